package watcher

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/watches"
)

// restarts restarts in place the pods whose data moved on from their restart token:
// it writes each stale pod's new token, which its restarter sees, no more pods of a
// group (the pods of one controller) at once than its rollout takes down, and the
// next once one is back Ready. A pod that does not come back holds the rest of its
// group where they are: the change halts. What is restarted lives in the pods'
// tokens, so a watcher that starts over restarts none twice.
type restarts struct {
	client kubernetes.Interface
	pods   *watches.Informers
	queue  workqueue.TypedRateLimitingInterface[podGroup]
	podRules
	// disruptions is what the pods' PodDisruptionBudgets allow.
	disruptions *disruptions
	// quiet is how long after a change its pods wait, so that changes made together
	// restart them once; timeout, how long a restarted pod may take to be Ready.
	quiet, timeout time.Duration
	report         *reporter
	metrics        Recorder
	log            zerolog.Logger

	// reloads are the reloads under way, slots the groups under way. Only lead's one
	// goroutine uses them. What each group was told is the reporter's (said).
	reloads reloadWaits
	slots   *restartSlots
}

// podGroup is a namespace and the UID its pods' restarts are paced within.
type podGroup struct {
	Namespace string
	UID       types.UID
}

func (g podGroup) namespace() string { return g.Namespace }

// podRules are what the watcher says of each pod restarted in place: what it is to
// carry now; whether its namespace's sources are all known; what its workload's
// rollout says of it; and how that workload is written, to roll it instead.
type podRules struct {
	restartOf func(*podView) (confighash.Restart, error)
	covered   func(namespace string) bool
	rollout   func(*podView) podRollout
	patch     func(context.Context, *view, map[string]any) (*view, error)
}

// restartPoll is how often a group whose restarts are under way is looked at again,
// beyond the changes of its pods, which wake it at once.
const restartPoll = 5 * time.Second

// newRestartsOf restarts the pods of the watcher's namespaces, with the tokens decided
// from its caches as the webhook decides them.
func newRestartsOf(w *Watcher, door watches.Door) (*restarts, error) {
	rules := podRules{restartOf: w.decider.restartOf, covered: w.sources.Covers, rollout: w.workloads.rolloutFor, patch: w.workloads.patch}
	return newRestarts(w.cfg.Client, door, w.cfg.Vocabulary, rules, w.cfg.QuietPeriod, w.cfg.WaveTimeout, w.cfg.MaxRolling, w.report, w.cfg.Metrics, w.cfg.Log)
}

// informers are the sets of informers restarts reads, to be read again with the
// workloads' when confighash starts acting on more of a namespace.
func (r *restarts) informers() map[string]*watches.Informers {
	return map[string]*watches.Informers{"restarted pods": r.pods, "budgets": r.disruptions.budgets}
}

// newRestarts watches the pods labelled for restart in place in the namespaces.
func newRestarts(client kubernetes.Interface, door watches.Door, vocabulary confighash.Vocabulary, rules podRules,
	quiet, timeout time.Duration, maxRolling int, report *reporter, metrics Recorder, log zerolog.Logger) (*restarts, error) {
	r := &restarts{client: client, podRules: rules, quiet: quiet, timeout: timeout, report: report, metrics: metrics, log: log,
		reloads: reloadWaits{}, slots: newRestartSlots(maxRolling),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[podGroup](), workqueue.TypedRateLimitingQueueConfig[podGroup]{
			DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[podGroup]{Name: "confighash-restarts",
				Queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[podGroup]{Queue: newFairQueue[podGroup]()})})})}
	var err error
	if r.disruptions, err = newDisruptions(client, door); err != nil {
		return nil, err
	}
	r.pods, err = door.Open(watches.RestartedPods, func(ns string) cache.SharedIndexInformer {
		return coreinformers.NewFilteredPodInformer(client, ns, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, "group": byGroup}, watches.RestartedPods.WithSelector)
	}, podViewTransform(vocabulary))
	if err != nil {
		return nil, err
	}
	changed := func(obj any) {
		if p, ok := obj.(*podView); ok {
			r.queue.Add(podGroup{p.Namespace, p.Group})
		}
	}
	return r, r.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: changed, UpdateFunc: func(_, obj any) { changed(obj) }, DeleteFunc: changed})
}

// sourceChanged wakes the groups of the namespace's pods that may use the source: at
// once for a change alone (tracking.alone), else once the change is quiet.
func (r *restarts) sourceChanged(namespace string, ref confighash.SourceRef, alone bool) {
	inf := r.pods.For(namespace)
	if inf == nil {
		return
	}
	after := r.quiet
	if alone {
		after = 0
	}
	objs, _ := inf.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
	for _, obj := range objs {
		if p, ok := obj.(*podView); ok && p.State.MayUse(ref) {
			r.queue.AddAfter(podGroup{p.Namespace, p.Group}, after)
		}
	}
}

// run runs the informers of pods and their budgets, if r restarts any.
func (r *restarts) run(ctx context.Context) {
	if r != nil {
		r.pods.Run(ctx)
		r.disruptions.budgets.Run(ctx)
	}
}

// synced reports whether the pods and their budgets have been listed, or r restarts
// none.
func (r *restarts) synced() bool {
	return r == nil || r.pods.HasSynced() && r.disruptions.budgets.HasSynced()
}

// resync wakes every group: changes may have been made while no watcher led.
func (r *restarts) resync() {
	for _, obj := range r.pods.List() {
		if p, ok := obj.(*podView); ok {
			r.queue.Add(podGroup{p.Namespace, p.Group})
		}
	}
}

// lead restarts pods until ctx is done, those that drifted while no watcher led
// first; r may restart none.
func (r *restarts) lead(ctx context.Context) {
	if r == nil {
		return
	}
	r.slots = newRestartSlots(r.slots.maxRolling) // what a leader before held is read again
	r.holdUnderWay()
	r.resync()
	go func() { <-ctx.Done(); r.queue.ShutDown() }()
	for {
		g, quit := r.queue.Get()
		if quit {
			return
		}
		after, err := r.sync(ctx, g)
		switch {
		case err != nil && ctx.Err() == nil:
			r.log.Warn().Err(err).Str("namespace", g.Namespace).Str("group", string(g.UID)).Msg("restarts in place not done; retrying")
			r.queue.AddRateLimited(g)
		case after > 0:
			r.queue.Forget(g)
			r.queue.AddAfter(g, after)
		default:
			r.queue.Forget(g)
		}
		r.queue.Done(g)
	}
}

// restart is a stale pod and what it is to carry.
type restart struct {
	pod  *podView
	want confighash.Restart
}

// annotate writes one annotation of the pod, the only write of a pod the watcher's
// policy allows it (confighash-watcher-restarts-pods-only); written is false for a pod
// gone. The write names the pod's UID, not its version, which the kubelet moves on at
// each status update.
func (r *restarts) annotate(ctx context.Context, p *podView, name, value string) (written bool, err error) {
	patch := fmt.Appendf(nil, `{"metadata":{"uid":%q,"annotations":{%q:%q}}}`, p.UID, name, value)
	_, err = r.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// restart writes the pod's new token: its restarter restarts its containers. Writing
// the same token again restarts nothing.
func (r *restarts) restart(ctx context.Context, p *podView, token string) error {
	written, err := r.annotate(ctx, p, confighash.AnnotationRestartToken, tokenOf(token, p.Restarts))
	switch {
	case err != nil:
		return fmt.Errorf("restart pod %s/%s in place: %w", p.Namespace, p.Name, err)
	case !written:
		return nil // gone: its replacement starts with the current data
	}
	if p.Reloads {
		r.metrics.RestartedInPlace(confighash.RestartReload)
		r.reloads.asked(p, token, time.Now())
		r.report.Eventf(p.ref(), corev1.EventTypeNormal, "Reloaded", "its app reloads its files, once the kubelet swapped them, for a change of the data they hold (restart token %s)", token)
		return nil
	}
	r.metrics.RestartedInPlace(confighash.RestartInPlace)
	r.report.Eventf(p.ref(), corev1.EventTypeNormal, "RestartedInPlace", "its containers restart in place for a change of the data they use (restart token %s)", token)
	return nil
}

// nudgeAfter is how long after its token's write a pod's restart may not have begun
// before the watcher nudges the kubelet: the kubelet writes the token at its next look
// at the pod and sees the restarter's exit at the one after, within about 2 s.
const nudgeAfter = 4 * time.Second

// nudgeDue returns how long until the pod is to be nudged, 0 for now, and -1 for
// never: only a pod restarted in place, or told to reload, for a token the watcher
// wrote, whose restart or reload has not begun (still Ready with no restart since; its
// restarter never seen not Ready for the reload), not nudged for it yet, within the
// restart timeout, after which it halts its group instead. A reload is known only to
// the watcher that asked for it: one that starts over nudges none.
func (r *restarts) nudgeDue(p *podView, now time.Time) time.Duration {
	written, begun := p.TokenWritten, !p.restarting() || !p.Ready
	if p.Reloads {
		written, begun = time.Time{}, true
		if w, ok := r.reloads[p.UID]; ok && w.token == p.Token {
			written, begun = w.since, w.sawUnready
		}
	}
	if begun || p.Nudged || written.IsZero() {
		return -1
	}
	since := now.Sub(written)
	switch {
	case since >= r.timeout:
		return -1
	case since >= nudgeAfter:
		return 0
	}
	return nudgeAfter - since
}

// nudge writes the pod's token again as its confighash.dev/restart-nudge: the pod
// changes, and the kubelet, which now and then misses a pod's update in its downward
// API volume until its periodic sync of the pod (a minute by default), looks at it
// again and writes the token for the restarter. Once per token: the token is not
// written again, so no restart comes of it.
func (r *restarts) nudge(ctx context.Context, p *podView) error {
	written, err := r.annotate(ctx, p, confighash.AnnotationRestartNudge, tokenOf(p.Token, p.RestartsAt))
	switch {
	case err != nil:
		return fmt.Errorf("nudge the kubelet for pod %s/%s: %w", p.Namespace, p.Name, err)
	case !written:
		return nil // gone
	}
	r.report.Eventf(p.ref(), corev1.EventTypeNormal, "RestartNudged", "its restart (or its app's reload) had not begun %v after its token (%s): written again as %s, for the kubelet to look at the pod again", nudgeAfter, p.Token, confighash.AnnotationRestartNudge)
	return nil
}

// haltIfFailed tells, once per token, that a pod restarted for it failed to come back,
// and reports whether it did: its group's other pods keep running on their data
// until it does.
func (r *restarts) haltIfFailed(g podGroup, p *podView, token string) bool {
	if p.TokenWritten.IsZero() {
		return false // not restarted by a watcher
	}
	why := p.Failing
	if why == "" && time.Since(p.TokenWritten) > r.timeout {
		why = fmt.Sprintf("not Ready %v after its restart", r.timeout)
	}
	if why == "" {
		return false
	}
	owner := "its group"
	if p.Owner != "" {
		owner = p.Owner
	}
	if r.tell(g, p.ref(), token, corev1.EventTypeWarning, "RestartHalted", fmt.Sprintf("restarted in place for new data, it does not come back (%s): the other pods of %s keep running on their data until it does", why, owner)) {
		r.metrics.RestartHalted()
	}
	return true
}

// tell sends an Event on a pod of the group, or its workload, once per group, token
// and reason, and reports whether it did.
func (r *restarts) tell(g podGroup, on *corev1.ObjectReference, token, eventType, reason, message string) bool {
	if !r.report.news(g, reason, token) {
		return false
	}
	r.report.Event(on, eventType, reason, message)
	return true
}

// forget drops the Events told of a group with no pods left.
func (r *restarts) forget(g podGroup) { r.report.forget(g) }
