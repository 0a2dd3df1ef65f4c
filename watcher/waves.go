package watcher

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
)

// Pacing: the watcher releases a gated workload's due change when its rollout window
// is open and, for a change that reaches many workloads, when its wave comes. A wave
// waits for the one before to roll out; a workload of it that fails halts the rest.
// What the watcher remembers here only saves work: the markers on the workloads and
// their statuses, in the API server, say the rest after a restart.

// heldReason is why a due change has not been released.
type heldReason string

const (
	heldWindow heldReason = "window" // outside its rollout window
	heldWave   heldReason = "wave"   // waiting for its wave
	heldHalted heldReason = "halted" // its wave halted on a failure
)

var heldReasons = []heldReason{heldWindow, heldWave, heldHalted}

// waves is what the watcher keeps of the waves under way, under one lock.
type waves struct {
	mu sync.Mutex
	// admitted are the workloads a wave let roll, until they have rolled out.
	admitted map[workloadKey]admission
	// waiting are the workloads of each namespace that wait for a wave; capped, one
	// of each namespace whose next wave waits for room under MaxRolling.
	waiting map[string]map[workloadKey]bool
	capped  map[string]workloadKey
	// held is why each held workload is held, and heldBy how many are held for each
	// reason; noted, the release an Event was sent for.
	held   map[workloadKey]heldReason
	heldBy map[heldReason]int
	noted  map[workloadKey]string
	// marked is the hash of the marker last written on a workload, until the cache
	// shows it.
	marked map[workloadKey]string
	// failing is why the pods of a template a wave let roll cannot start, by the
	// template's hash; halting, the waves whose halt is being written.
	failing map[workloadKey]failing
	halting map[waveID]bool
	// generation moves whenever admitted, failing or marked change; memo is valid
	// while no generation moved.
	generation uint64
	memo       waveMemo
}

// waveMemo saves what each check of a wave's waiting users would compute again on a
// wake of the wave: its users, sorted, and that users it released still roll out.
// Without it, a wake of n waiting users costs n² decisions (5 s for 1,000 here).
type waveMemo struct {
	at    generations
	users map[waveID][]*view
	// busy holds, for a wave whose released users still roll out, when the first of
	// them times out (zero: none can).
	busy map[waveID]time.Time
}

// generations are where what a wave's standing is made of stood: the workloads, the
// sources, the waves, and the namespaces' modes and pacing.
type generations struct{ workloads, sources, waves, namespaces uint64 }

type waveID struct {
	namespace string
	source    confighash.SourceRef
}

type failing struct{ hash, why string }

// admission is a wave's leave to roll a workload to a hash, given at a time.
type admission struct {
	source  confighash.SourceRef // whose change the wave rolls
	release string
	at      time.Time
	// slotFreed is set once its pods stayed Pending too long: it no longer counts
	// against MaxRolling.
	slotFreed bool
}

func newWaves() *waves {
	return &waves{admitted: map[workloadKey]admission{}, waiting: map[string]map[workloadKey]bool{}, capped: map[string]workloadKey{},
		held: map[workloadKey]heldReason{}, heldBy: map[heldReason]int{}, noted: map[workloadKey]string{}, marked: map[workloadKey]string{}, failing: map[workloadKey]failing{},
		halting: map[waveID]bool{}}
}

// setHeld notes why the workload is held, none to forget it, and returns how many are
// held by reason when that changed; under the waves' lock.
func (ws *waves) setHeld(key workloadKey, reason heldReason) map[string]int {
	was, ok := ws.held[key]
	if ok && was == reason || !ok && reason == "" {
		return nil
	}
	if ok {
		ws.heldBy[was]--
		delete(ws.held, key)
	}
	if reason != "" {
		ws.heldBy[reason]++
		ws.held[key] = reason
	}
	counts := make(map[string]int, len(ws.heldBy))
	for r, n := range ws.heldBy {
		counts[string(r)] = n
	}
	return counts
}

// hold notes why the workload is held and reports whether that is news for this
// release: an Event is due.
func (w *Watcher) hold(key workloadKey, reason heldReason, release string) bool {
	ws := w.waves
	ws.mu.Lock()
	counts := ws.setHeld(key, reason)
	news := ws.noted[key] != string(reason)+release
	ws.noted[key] = string(reason) + release
	ws.mu.Unlock()
	if counts != nil {
		w.cfg.Metrics.Held(counts)
	}
	w.progress.unreached(key) // held is not slow: no convergence latency
	return news
}

// unhold forgets the workload's hold, once released or no longer due.
func (w *Watcher) unhold(key workloadKey) {
	ws := w.waves
	ws.mu.Lock()
	counts := ws.setHeld(key, "")
	delete(ws.noted, key)
	delete(ws.waiting[key.Namespace], key)
	ws.stopWaiting(key)
	ws.mu.Unlock()
	if counts != nil {
		w.cfg.Metrics.Held(counts)
	}
}

// forget drops all the watcher keeps of a workload that is gone.
func (w *Watcher) forget(key workloadKey) {
	w.unhold(key)
	w.owners.unsettle(key)
	w.waves.mu.Lock()
	w.dismiss(key)
	delete(w.waves.marked, key)
	w.waves.generation++
	w.waves.mu.Unlock()
}

// dismiss ends a wave's leave for the workload to roll, if it had one, and wakes the
// namespaces whose next wave waited for the room; under the waves' lock.
func (w *Watcher) dismiss(key workloadKey) bool {
	if _, ok := w.waves.admitted[key]; !ok {
		return false
	}
	delete(w.waves.admitted, key)
	delete(w.waves.failing, key)
	w.waves.generation++
	w.wakeCapped()
	return true
}

// wakeWaiting queues the workloads of the namespace that wait for a wave: theirs may
// come. Under the waves' lock.
func (w *Watcher) wakeWaiting(namespace string) {
	for key := range w.waves.waiting[namespace] {
		w.queue.Add(key)
	}
}

// progressed checks again a workload a wave let roll, whose rollout moved on, and the
// workloads of its namespace that wait for a wave: theirs may come.
func (w *Watcher) progressed(v *view) {
	w.waves.mu.Lock()
	defer w.waves.mu.Unlock()
	if _, ok := w.waves.admitted[keyOf(v)]; ok {
		w.queue.Add(keyOf(v))
	}
	w.wakeWaiting(v.Namespace)
}

// settle halts the wave of a workload it let roll, once that wave has settled with a
// failure: when nothing of it waits any more, the failure of its last would otherwise
// go unseen.
func (w *Watcher) settle(ctx context.Context, v *view) error {
	w.waves.mu.Lock()
	_, ok := w.waves.admitted[keyOf(v)]
	known := w.waves.failing[keyOf(v)].hash == v.Hash
	w.waves.mu.Unlock()
	if !ok {
		return nil
	}
	if !known && v.Status == rollingOut && v.Release == v.Hash && v.Selector != "" {
		// Pods that cannot start change no status of the workload: look again soon,
		// until they are known to fail.
		why, pending, err := w.failingPods(ctx, v)
		if err != nil {
			return err
		}
		w.queue.AddAfter(keyOf(v), podCheckInterval)
		w.pendingTooLong(v, pending)
		if why != "" {
			w.waves.mu.Lock()
			w.waves.failing[keyOf(v)] = failing{hash: v.Hash, why: why}
			w.waves.generation++
			w.waves.mu.Unlock()
		}
	}
	w.waves.mu.Lock()
	a, ok := w.waves.admitted[keyOf(v)]
	if !ok {
		w.waves.mu.Unlock()
		return nil
	}
	wv := &wave{source: a.source, users: w.users(v.Namespace, a.source)}
	if st := w.stand(wv, time.Now()); len(st.failed) > 0 && st.rolling == 0 {
		return w.halt(ctx, keyOf(v), wv, st)
	}
	w.waves.mu.Unlock()
	return nil
}

// podCheckInterval is how often the pods of a workload a wave let roll are checked
// while it rolls out.
const podCheckInterval = 5 * time.Second

// failingPods returns why a pod of the workload's latest template cannot start, "" if
// none is known to fail, and since when one has been Pending.
func (w *Watcher) failingPods(ctx context.Context, v *view) (string, time.Time, error) {
	pods, err := w.cfg.Client.CoreV1().Pods(v.Namespace).List(ctx, metav1.ListOptions{LabelSelector: v.Selector})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("list the pods of %s %s/%s: %w", v.Kind.Kind, v.Namespace, v.Name, err)
	}
	return failingPod(pods.Items, v.Hash), pendingSince(pods.Items, v.Hash), nil
}

// paced releases the workload's due change, or holds it: while a halted wave holds
// it, outside its rollout window or its pause period, and until its wave comes.
func (w *Watcher) paced(ctx context.Context, key workloadKey, v *view, d confighash.Decision) error {
	now := time.Now()
	if w.heldByHalt(v, d) {
		// Its marker's removal, or the next change of the source, wakes it.
		w.hold(key, heldHalted, d.Release)
		return nil
	}
	if at := d.Pacing.RollsAt(now, w.progress.pauseEnd(key)); at.After(now) {
		if !d.Pacing.Windows.Open(now) {
			// A wave's leave to roll, given while its window was open, goes to others.
			w.waves.mu.Lock()
			if w.dismiss(key) {
				w.wakeWaiting(key.Namespace)
			}
			w.waves.mu.Unlock()
			if w.hold(key, heldWindow, d.Release) {
				w.cfg.Events.Event(objectRef(v), corev1.EventTypeNormal, "Held",
					fmt.Sprintf("%s: outside its rollout window (%s); rolls when it opens, at %s", changedList(d.Held), d.Pacing.Windows, at.UTC().Format(time.RFC3339)))
			}
		}
		w.queue.AddAfter(key, at.Sub(now)) // a pause within an open window is no hold
		return nil
	}
	if wv := w.waveOf(v, d); wv != nil {
		if ok, err := w.joinWave(ctx, key, v, d, wv); !ok || err != nil {
			return err
		}
	}
	return w.release(ctx, key, v, d)
}

func changedList(refs []confighash.SourceRef) string {
	return confighash.ListRefs(refs) + " changed"
}

// release touches the workload with AnnotationRelease set to the hash it is due, so
// the webhook rolls it, and clears the markers of a wave that halted.
func (w *Watcher) release(ctx context.Context, key workloadKey, v *view, d confighash.Decision) error {
	released := *v
	released.Release = d.Release
	due, err := w.decide(&released, confighash.Pods{})
	if err != nil {
		return err
	}
	if w.queue.NumRequeues(key) >= w.cfg.HealAfter {
		return w.heal(ctx, key, v, due) // the webhook failed open on every release
	}
	w.progress.pause(key, due.Policy.PausePeriod)
	trig := triggers(v, due.Record, w.sources)
	admitted, err := w.touch(ctx, v, trig, map[string]any{
		confighash.AnnotationRelease: d.Release, confighash.AnnotationHeld: nil, confighash.AnnotationFailed: nil,
	})
	if err = w.admitted(key, v, due, trig, nil, admitted, err); err == nil {
		w.unhold(key)
	}
	return err
}

// wave is one change of a source, rolled in waves.
type wave struct {
	source confighash.SourceRef
	size   int
	users  []*view
}

// waveOf returns the wave the workload's due change rolls in, nil when it rolls at
// once: no wave size applies, or no changed source reaches more workloads than the
// threshold.
func (w *Watcher) waveOf(v *view, d confighash.Decision) *wave {
	size := d.Pacing.WaveSize
	for _, ref := range d.Held {
		if src, ok := w.sources.Lookup(v.Namespace, ref); ok && src.Source.WaveSize > 0 && (size == 0 || src.Source.WaveSize < size) {
			size = src.Source.WaveSize
		}
	}
	if size == 0 {
		return nil
	}
	for _, ref := range d.Held {
		if users := w.waveUsers(waveID{v.Namespace, ref}); len(users) > max(size, w.cfg.WaveThreshold) {
			return &wave{source: ref, size: size, users: users}
		}
	}
	return nil
}

// waveUsers returns the users of the source, in the order waves take them: by kind and
// name. They are shared: not to be modified.
func (w *Watcher) waveUsers(id waveID) []*view {
	w.waves.mu.Lock()
	at := w.memo().at
	users, ok := w.waves.memo.users[id]
	w.waves.mu.Unlock()
	if ok {
		return users
	}
	users = w.users(id.namespace, id.source)
	slices.SortFunc(users, func(a, b *view) int {
		return cmp.Or(strings.Compare(a.Kind.Kind, b.Kind.Kind), strings.Compare(a.Name, b.Name))
	})
	w.waves.mu.Lock()
	if w.memo().at == at {
		w.waves.memo.users[id] = users
	}
	w.waves.mu.Unlock()
	return users
}

// memo returns the memo of the current generations, emptied if any moved since it was
// filled; under the waves' lock. What is computed from the cache after it was taken
// goes in only if no generation moved meanwhile.
func (w *Watcher) memo() *waveMemo {
	now := generations{w.workloadsGeneration.Load(), w.sources.Generation(), w.waves.generation, w.namespacesGeneration.Load()}
	if w.waves.memo.at != now || w.waves.memo.users == nil {
		w.waves.memo = waveMemo{at: now, users: map[waveID][]*view{}, busy: map[waveID]time.Time{}}
	}
	return &w.waves.memo
}

// heldByHalt reports whether a halted wave holds the workload: it is marked held from
// the hash it is due.
func (w *Watcher) heldByHalt(v *view, d confighash.Decision) bool {
	w.waves.mu.Lock()
	defer w.waves.mu.Unlock()
	return w.markedWith(v, v.Held, d.Release)
}

// markedWith reports whether the workload's marker, or the one just written, names the
// hash; under the waves' lock.
func (w *Watcher) markedWith(v *view, annotation, hash string) bool {
	key := keyOf(v)
	if m, ok := w.waves.marked[key]; ok && markedHash(annotation) == m {
		delete(w.waves.marked, key) // the cache shows it: the annotation says the rest
	}
	return markedHash(annotation) == hash || w.waves.marked[key] == hash
}

// standing is where the users of a wave stand.
type standing struct {
	pending []*view // due to roll, not held by a halt
	due     map[*view]string
	failed  []*view // released, and failed, not yet halted for
	rolling int     // released, not yet rolled out
	// deadline is when the first of those rolling fails for taking too long.
	deadline time.Time
}

// standing is where the users of the wave stand, from the memo while users it
// released still roll out and nothing changed (the waiting need no more); under the
// waves' lock.
func (w *Watcher) standing(wv *wave, id waveID, now time.Time) standing {
	at := w.memo().at
	if deadline, ok := w.waves.memo.busy[id]; ok && (deadline.IsZero() || now.Before(deadline)) {
		return standing{rolling: 1, deadline: deadline}
	}
	st := w.stand(wv, now)
	if st.rolling > 0 && w.memo().at == at {
		w.waves.memo.busy[id] = st.deadline
	}
	return st
}

// stand classifies the users of a wave, under the waves' lock.
func (w *Watcher) stand(wv *wave, now time.Time) standing {
	st := standing{due: map[*view]string{}}
	for _, u := range wv.users {
		uk := keyOf(u)
		du, err := w.decide(u, confighash.Pods{})
		if err != nil {
			continue
		}
		a, admitted := w.waves.admitted[uk]
		if admitted && len(du.Held) > 0 && a.release != du.Release {
			w.dismiss(uk) // admitted for an earlier change
			admitted = false
		}
		timedOut := admitted && now.Sub(a.at) > w.cfg.WaveTimeout
		switch {
		case len(du.Held) > 0 && w.markedWith(u, u.Held, du.Release):
			// held by a halt
		case len(du.Held) > 0 && admitted:
			st.rolling++ // its release is under way
		case len(du.Held) > 0 && !du.Pacing.Windows.Open(now):
			// outside its own window: it joins a wave when that opens, and until then
			// takes no one's place in one
		case len(du.Held) > 0:
			st.pending = append(st.pending, u)
			st.due[u] = du.Release
		case u.Release == "" || u.Release != u.Hash || w.markedWith(u, u.Failed, u.Hash):
			w.dismiss(uk) // not released by a wave, or its failure is known
		case u.Status == rolloutFailed || u.Status == rollingOut && (timedOut || w.waves.failing[uk].hash == u.Hash):
			st.failed = append(st.failed, u)
		case u.Status == rollingOut:
			st.rolling++
			if admitted && (st.deadline.IsZero() || a.at.Add(w.cfg.WaveTimeout).Before(st.deadline)) {
				st.deadline = a.at.Add(w.cfg.WaveTimeout)
			}
		default:
			w.dismiss(uk) // rolled out
		}
	}
	return st
}

// joinWave reports whether the workload may roll now in its wave. When the users
// released before have rolled out, the next wave is chosen: the workloads that failed
// before first, then by kind and name, as many as MaxRolling leaves room for. When
// one has failed, the wave halts.
func (w *Watcher) joinWave(ctx context.Context, key workloadKey, v *view, d confighash.Decision, wv *wave) (bool, error) {
	now := time.Now()
	ws := w.waves
	ws.mu.Lock()
	if a, ok := ws.admitted[key]; ok && a.release == d.Release {
		ws.mu.Unlock()
		return true, nil
	}
	st := w.standing(wv, waveID{key.Namespace, wv.source}, now)
	if len(st.failed) > 0 && st.rolling == 0 {
		// Once the wave has settled, so that one alert names all that failed.
		return false, w.halt(ctx, key, wv, st)
	}
	if st.rolling > 0 {
		ws.stopWaiting(key) // its wave waits for its own, not for room
	} else {
		slices.SortStableFunc(st.pending, func(a, b *view) int {
			return boolOrder(a.Failed == "", b.Failed == "")
		})
		n := w.room(key, min(wv.size, len(st.pending)))
		for _, u := range st.pending[:n] {
			uk := keyOf(u)
			ws.admitted[uk] = admission{source: wv.source, release: st.due[u], at: now}
			ws.generation++
			if uk != key {
				w.queue.Add(uk)
			}
			w.queue.AddAfter(uk, w.cfg.WaveTimeout+time.Second) // to see it fail by taking too long
		}
	}
	_, admitted := ws.admitted[key]
	if !admitted {
		if ws.waiting[key.Namespace] == nil {
			ws.waiting[key.Namespace] = map[workloadKey]bool{}
		}
		ws.waiting[key.Namespace][key] = true
		if !st.deadline.IsZero() {
			w.queue.AddAfter(key, time.Until(st.deadline)+time.Second)
		}
	}
	ws.mu.Unlock()
	if !admitted && w.hold(key, heldWave, d.Release) {
		w.cfg.Events.Event(objectRef(v), corev1.EventTypeNormal, "Held",
			fmt.Sprintf("%s: rolls in waves of %d of its %d users; waiting for its wave", changedList(d.Held), wv.size, len(wv.users)))
	}
	return admitted, nil
}

func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
