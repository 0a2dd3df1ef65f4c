package watcher

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/alert"
	"github.com/confighash/confighash/bounded"
)

// A wave halts when a workload it let roll has failed and none still rolls: markers
// on the workloads, in the API server, hold the rest across restarts.

// podCheckInterval is how often the pods of a workload a wave let roll are checked
// while it rolls out.
const podCheckInterval = 5 * time.Second

// followRollout follows the rollout of a workload a wave let roll, and the bake of one
// of a change's first wave: it starts the bake once it rolled out, finds pods that
// cannot start, or that restart or lose their readiness while it bakes, and halts the
// wave once it failed and nothing of it rolls any more, as the failure of its last
// would otherwise go unseen.
func (pc *pacer) followRollout(ctx context.Context, v *view) error {
	key := keyOf(v)
	pc.waves.mu.Lock()
	g, granted := pc.waves.grants[key]
	known := pc.waves.failing[key].hash == v.Hash
	pc.waves.mu.Unlock()
	canary := pc.baker.current(v)
	if !granted && canary == nil {
		return nil
	}
	if canary != nil {
		if started, err := pc.baker.start(ctx, v, canary); started || err != nil {
			return err // the write brings it back
		}
	}
	var bakingSince time.Time
	if canary != nil && canary.Bake > 0 && time.Now().Before(canary.Until()) {
		bakingSince = canary.Since
	}
	rolling := v.Status == confighash.RollingOut && granted
	if !known && (rolling || !bakingSince.IsZero()) && v.Release == v.Hash && v.Selector != "" {
		// Pods that cannot start, or restart, change no status of the workload: look
		// again soon, until they are known to fail.
		why, pending, err := pc.failingPods(ctx, v, bakingSince)
		if err != nil {
			return err
		}
		unsure := false
		if why == "" && !bakingSince.IsZero() {
			last := time.Now().Add(podCheckInterval).After(canary.Until())
			why, unsure = pc.gate(ctx, v, canary.Change.SourceRef, last)
		}
		pc.queue.AddAfter(key, podCheckInterval)
		if rolling {
			pc.pendingTooLong(v, pending)
		}
		if why != "" {
			pc.waves.mu.Lock()
			pc.waves.failing[key] = failing{hash: v.Hash, why: why, unsure: unsure}
			pc.waves.generation++
			pc.waves.mu.Unlock()
		}
	}
	source := g.source
	if !granted {
		source = canary.Change.SourceRef
	}
	id := waveID{v.Namespace, source}
	pc.waves.mu.Lock()
	st := pc.stand(&wave{id: id, change: pc.changeOf(id), users: pc.workloads.users(id.namespace, id.source)}, time.Now())
	if !st.Halts() {
		pc.waves.mu.Unlock()
		return nil
	}
	h := pc.claimHalt(id, st)
	pc.waves.mu.Unlock()
	return pc.halt(ctx, key, h)
}

// gate reads the metric gate of the canary's bake, if it has one, at its last check or
// not (analyst.check).
func (pc *pacer) gate(ctx context.Context, v *view, source confighash.SourceRef, last bool) (why string, unsure bool) {
	d, err := pc.decider.decide(v, confighash.Pods{})
	if err != nil {
		return "", false
	}
	pacing := pc.pacingWith(v.Namespace, d.Pacing, source)
	if pacing.Analysis.IsZero() {
		return "", false
	}
	return pc.analyst.check(ctx, v, pacing.Analysis, last)
}

// podsLimits bound the list of a workload's pods: read whole, for their statuses, a
// page at a time, only what is found in each kept. A workload may have thousands, and a
// namespace user may make more with its labels, as large as their quota allows.
var podsLimits = bounded.Limits{Page: 100, PageBytes: 4 << 20, Items: 100_000, Bytes: 1 << 30}

// failingPods returns why a pod of the workload's latest template cannot start, or,
// baking since a time, restarted or lost its readiness since, "" if none is known to
// fail; and since when one has been Pending.
func (pc *pacer) failingPods(ctx context.Context, v *view, bakingSince time.Time) (why string, pending time.Time, err error) {
	res := bounded.Resource{GroupVersionResource: corev1.SchemeGroupVersion.WithResource("pods"), Namespace: v.Namespace}
	err = bounded.Each(ctx, pc.reads, res, metav1.ListOptions{LabelSelector: v.Selector}, podsLimits, func(pods []corev1.Pod) error {
		if why == "" {
			why = failingPod(pods, v.Hash)
		}
		if why == "" && !bakingSince.IsZero() {
			why = unhealthyPod(pods, v.Hash, bakingSince)
		}
		if since := pendingSince(pods, v.Hash); !since.IsZero() && (pending.IsZero() || since.Before(pending)) {
			pending = since
		}
		return nil
	})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("list the pods of %s %s/%s: %w", v.Kind.Kind, v.Namespace, v.Name, err)
	}
	return why, pending, nil
}

// haltWrites is what a halt marks: the users still due, held from the hash they are
// due, and those that failed, at their hash and with why.
type haltWrites struct {
	id     waveID
	held   []*view
	due    []string
	failed []*view
	whys   []string
	// unsure are the failed not known to have failed: they are not reverted.
	unsure []bool
}

// claimHalt claims the wave's halt for this worker and collects what it writes; nil
// when another worker is writing it. Under the waves' lock, which halt, writing, no
// longer holds: the claim makes the others of the wave wait for the markers.
func (pc *pacer) claimHalt(id waveID, st standing) *haltWrites {
	if pc.waves.halting[id] {
		return nil
	}
	pc.waves.halting[id] = true
	h := &haltWrites{id: id}
	for _, i := range st.Pending {
		h.held = append(h.held, st.users[i])
		h.due = append(h.due, st.in[i].Due)
	}
	for _, i := range st.Failed {
		u := st.users[i]
		why, unsure := u.Status.String(), false
		if f := pc.waves.failing[keyOf(u)]; f.hash == u.Hash {
			why, unsure = f.why, f.unsure
		}
		h.failed = append(h.failed, u)
		h.whys = append(h.whys, why)
		h.unsure = append(h.unsure, unsure)
	}
	return h
}

// halt marks the failed users and holds the pending ones, in the API server so that
// a restart keeps the halt, and says so once: an Event on each, an alert. With no
// claim, another worker writes the halt: the workload is looked at again after.
func (pc *pacer) halt(ctx context.Context, key workloadKey, h *haltWrites) error {
	if h == nil {
		pc.queue.AddAfter(key, time.Second)
		return nil
	}
	defer func() {
		pc.waves.mu.Lock()
		delete(pc.waves.halting, h.id)
		pc.waves.mu.Unlock()
	}()
	change := pc.changeOf(h.id)
	failedNames := make([]string, len(h.failed))
	for i, u := range h.failed {
		failedNames[i] = u.Kind.Kind + "/" + u.Name
	}
	summary := fmt.Sprintf("the rollout of %s failed in %s; %d workloads held until %s changes again or is resumed",
		change, strings.Join(failedNames, ", "), len(h.held), h.id.source)
	// The held first: a halt cut short is taken up again while the failed ones are
	// not yet marked, and the alert goes once all is marked.
	for i, u := range h.held {
		if err := pc.mark(ctx, u, confighash.AnnotationHeld, confighash.Marker{Change: change, Hash: h.due[i]}, summary); err != nil {
			return err
		}
		pc.report.EventOn(u, corev1.EventTypeWarning, "Held", summary)
	}
	var reverted, halted []*view
	for i, u := range h.failed {
		reverts, why := pc.reverter.reverts(u, h.id.source)
		if reverts && h.unsure[i] {
			reverts, why = false, "it is not known to have failed ("+h.whys[i]+"): it halts"
		}
		if reverts {
			var err error
			if why, err = pc.reverter.revert(ctx, u, change, h.whys[i]); err != nil {
				return err
			}
			if why == "" {
				reverted = append(reverted, u)
				continue
			}
		}
		if why != "" {
			pc.report.EventOn(u, corev1.EventTypeWarning, "NotReverted", confighash.AnnotationOnFailure+": revert: "+why)
		}
		if err := pc.mark(ctx, u, confighash.AnnotationFailed, confighash.Marker{Change: change, Hash: u.Hash}, summary); err != nil {
			return err
		}
		pc.report.EventOn(u, corev1.EventTypeWarning, "RolloutFailed", fmt.Sprintf("%s (%s): %s", change, h.whys[i], summary))
		halted = append(halted, u)
	}
	if len(reverted) > 0 {
		names := make([]string, len(reverted))
		for i, u := range reverted {
			names[i] = u.Kind.Kind + "/" + u.Name
		}
		pc.report.Event(sourceIn{h.id.namespace, h.id.source}.object(), corev1.EventTypeWarning, "Reverted",
			fmt.Sprintf("the rollout of %s failed: %s rolled back to the data from before it; %d workloads held until %s changes again or is resumed",
				change, strings.Join(names, ", "), len(h.held), h.id.source))
	}
	for _, u := range halted {
		pc.report.alert(alert.Halted, u, []confighash.Trigger{change}, summary)
	}
	pc.metrics.Halted()
	return nil
}

// mark writes a marker on the workload and notes its hash until the cache shows it.
func (pc *pacer) mark(ctx context.Context, u *view, annotation string, m confighash.Marker, why string) error {
	held := confighash.Status{Act: confighash.ActHeld, At: time.Now(), Why: why}
	if _, err := pc.workloads.patch(ctx, u, annotationsPatch(map[string]any{annotation: m.String(), confighash.AnnotationStatus: held.Text()})); err != nil {
		return err
	}
	pc.waves.mu.Lock()
	pc.waves.marked[keyOf(u)] = m.Hash
	pc.waves.generation++
	pc.waves.mu.Unlock()
	return nil
}

// heldByHalt reports whether a halted wave holds the workload: it is marked held from
// the hash it is due.
func (pc *pacer) heldByHalt(v *view, d confighash.Decision) bool {
	pc.waves.mu.Lock()
	defer pc.waves.mu.Unlock()
	return pc.markedWith(v, v.Held, d.Release)
}

// markedWith reports whether the workload's marker, or the one just written, names the
// hash; under the waves' lock.
func (pc *pacer) markedWith(v *view, m confighash.Marker, hash string) bool {
	key := keyOf(v)
	if written, ok := pc.waves.marked[key]; ok && m.Hash == written {
		delete(pc.waves.marked, key) // the cache shows it: the annotation says the rest
	}
	return m.Hash == hash || pc.waves.marked[key] == hash
}
