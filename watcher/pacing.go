package watcher

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/confighash/confighash"
)

// Pacing: the watcher releases a gated workload's due change when its rollout window
// is open and, for a change that reaches many workloads, when its wave comes. A wave
// waits for the users it granted to roll out; one of them that fails halts the rest.

// paced releases the workload's due change, or holds it: while a halted wave holds
// it, outside its rollout window or its pause period, and until its wave comes.
func (w *Watcher) paced(ctx context.Context, key workloadKey, v *view, d confighash.Decision) error {
	now := time.Now()
	if w.heldByHalt(v, d) {
		// Its marker's removal, or the next change of the source, wakes it.
		w.hold(key, heldHalted, d.Release)
		return nil
	}
	if at := d.Pacing.RollsAt(now, w.tracking.pauseEnd(key)); at.After(now) {
		if !d.Pacing.Windows.Open(now) {
			// A wave's grant, given while its window was open, goes to others.
			w.waves.mu.Lock()
			if w.endGrant(key) {
				w.wakeWaiting(key.Namespace)
			}
			w.waves.mu.Unlock()
			if w.hold(key, heldWindow, d.Release) {
				w.report.Event(objectRef(v), corev1.EventTypeNormal, "Held",
					fmt.Sprintf("%s: outside its rollout window (%s); rolls when it opens, at %s", changedList(d.Held), d.Pacing.Windows, at.UTC().Format(time.RFC3339)))
				if err := w.report.status(ctx, v, confighash.Status{Act: confighash.ActHeld, Until: at,
					Why: fmt.Sprintf("%s: outside its rollout window (%s)", changedList(d.Held), d.Pacing.Windows)}); err != nil {
					return err
				}
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
// the webhook rolls it, and clears the markers of a wave that halted; a Job it
// recreates.
func (w *Watcher) release(ctx context.Context, key workloadKey, v *view, d confighash.Decision) error {
	released := *v
	released.Release = d.Release
	due, err := w.decider.decide(&released, confighash.Pods{})
	if err != nil {
		return err
	}
	if v.Kind.Recreated() {
		if err = w.recreate(ctx, key, v, due); err == nil {
			w.unhold(key)
		}
		return err
	}
	if w.queue.NumRequeues(key) >= w.cfg.HealAfter {
		return w.heal(ctx, key, v, due) // the webhook failed open on every release
	}
	w.tracking.pause(key, due.Policy.PausePeriod)
	trig := triggers(v, due.Record, w.sources)
	others := map[string]any{confighash.AnnotationRelease: d.Release, confighash.AnnotationHeld: nil, confighash.AnnotationFailed: nil}
	maps.Copy(others, w.jobs.runMark(v, due))
	if due.Hash != v.Hash {
		others = withStatus(others, rolled(trig, due.Policy.PausePeriod))
	}
	admitted, err := w.workloads.touch(ctx, v, trig, others)
	if err = w.verify(key, v, due, trig, nil, admitted, err); err == nil {
		w.unhold(key)
	}
	return err
}

// wave is one change of a source, rolled in waves.
type wave struct {
	id    waveID
	size  int
	users []*view
}

// waveOf returns the wave the workload's due change rolls in, nil when it rolls at
// once: it is a Job, which waves leave out (waveUsers), no wave size applies, or no
// changed source reaches more workloads than the threshold.
func (w *Watcher) waveOf(v *view, d confighash.Decision) *wave {
	if v.Kind.Recreated() {
		return nil
	}
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
		id := waveID{v.Namespace, ref}
		if users := w.waveUsers(id); len(users) > max(size, w.cfg.WaveThreshold) {
			return &wave{id: id, size: size, users: users}
		}
	}
	return nil
}

// waveUsers returns the users of the source that waves take, in their order: by kind
// and name. They are shared: not to be modified.
func (w *Watcher) waveUsers(id waveID) []*view {
	w.waves.mu.Lock()
	at := w.memo().at
	users, ok := w.waves.memo.users[id]
	w.waves.mu.Unlock()
	if ok {
		return users
	}
	// A Job is recreated outside waves: it has no rollout to wait for, and no marker
	// can be written on it.
	users = slices.DeleteFunc(w.workloads.users(id.namespace, id.source), func(v *view) bool { return v.Kind.Recreated() })
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

// joinWave reports whether the workload may roll now in its wave. When the users
// granted before have rolled out, the next are granted: the workloads that failed
// before first, then by kind and name, as many as MaxRolling leaves room for. When
// one has failed, the wave halts.
func (w *Watcher) joinWave(ctx context.Context, key workloadKey, v *view, d confighash.Decision, wv *wave) (bool, error) {
	now := time.Now()
	ws := w.waves
	ws.mu.Lock()
	if g, ok := ws.grants[key]; ok && g.Release == d.Release {
		ws.mu.Unlock()
		return true, nil
	}
	st := w.standing(wv, now)
	if st.Halts() {
		// Once nothing of the wave rolls any more, so that one alert names all that failed.
		h := w.claimHalt(wv.id, st)
		ws.mu.Unlock()
		return false, w.halt(ctx, key, h)
	}
	if st.Rolling > 0 {
		ws.stopWaiting(key) // its wave waits for its own, not for room
	} else {
		w.grantNext(key, wv, st, now)
	}
	_, granted := ws.grants[key]
	if !granted {
		if ws.waiting[key.Namespace] == nil {
			ws.waiting[key.Namespace] = map[workloadKey]bool{}
		}
		ws.waiting[key.Namespace][key] = true
		if !st.Deadline.IsZero() {
			w.queue.AddAfter(key, time.Until(st.Deadline)+time.Second)
		}
	}
	ws.mu.Unlock()
	if !granted && w.hold(key, heldWave, d.Release) {
		why := fmt.Sprintf("%s: rolls in waves of %d of its %d users; waiting for its wave", changedList(d.Held), wv.size, len(wv.users))
		w.report.Event(objectRef(v), corev1.EventTypeNormal, "Held", why)
		return false, w.report.status(ctx, v, confighash.Status{Act: confighash.ActHeld, Why: why})
	}
	return granted, nil
}

// grantNext grants the next of the wave's pending users leave to roll, the workloads
// that failed before first, as many as the wave's size and MaxRolling allow, and
// queues them; under the waves' lock.
func (w *Watcher) grantNext(key workloadKey, wv *wave, st standing, now time.Time) {
	pending := st.Pending
	slices.SortStableFunc(pending, func(a, b int) int {
		return boolOrder(st.users[a].Failed.IsZero(), st.users[b].Failed.IsZero())
	})
	for _, i := range pending[:w.room(key, min(wv.size, len(pending)))] {
		uk := keyOf(st.users[i])
		w.waves.grants[uk] = grant{Grant: confighash.Grant{Release: st.in[i].Due, At: now}, source: wv.id.source}
		w.waves.generation++
		if uk != key {
			w.queue.Add(uk)
		}
		w.queue.AddAfter(uk, w.cfg.WaveTimeout+time.Second) // to see it fail by taking too long
	}
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

// standing is where the users of a wave stand: confighash.Stand's verdict, with the
// users and what was read of them, by the same index.
type standing struct {
	confighash.Standing
	users []*view
	in    []confighash.WaveUser
}

// standing is where the users of the wave stand, from the memo while users it granted
// still roll out and nothing changed (the waiting need no more); under the waves'
// lock.
func (w *Watcher) standing(wv *wave, now time.Time) standing {
	at := w.memo().at
	if deadline, ok := w.waves.memo.busy[wv.id]; ok && (deadline.IsZero() || now.Before(deadline)) {
		return standing{Standing: confighash.Standing{Rolling: 1, Deadline: deadline}}
	}
	st := w.stand(wv, now)
	if st.Rolling > 0 && w.memo().at == at {
		w.waves.memo.busy[wv.id] = st.Deadline
	}
	return st
}

// stand reads the users of a wave, has confighash.Stand classify them, and ends the
// grants it says end; under the waves' lock.
func (w *Watcher) stand(wv *wave, now time.Time) standing {
	st := standing{users: make([]*view, 0, len(wv.users)), in: make([]confighash.WaveUser, 0, len(wv.users))}
	for _, u := range wv.users {
		if in, ok := w.waveUser(u, now); ok {
			st.users = append(st.users, u)
			st.in = append(st.in, in)
		}
	}
	st.Standing = confighash.Stand(st.in, now, w.cfg.WaveTimeout)
	for _, i := range st.Ended {
		w.endGrant(keyOf(st.users[i]))
	}
	return st
}

// waveUser reads what confighash.Stand needs of a user of a wave; false when its
// decision fails; under the waves' lock.
func (w *Watcher) waveUser(u *view, now time.Time) (confighash.WaveUser, bool) {
	d, err := w.decider.decide(u, confighash.Pods{})
	if err != nil {
		return confighash.WaveUser{}, false
	}
	key := keyOf(u)
	in := confighash.WaveUser{Released: u.Release != "" && u.Release == u.Hash, Status: u.Status, Failing: w.waves.failing[key].hash == u.Hash}
	if g, ok := w.waves.grants[key]; ok {
		in.Grant = &g.Grant
	}
	if len(d.Held) > 0 {
		in.Due, in.WindowOpen = d.Release, d.Pacing.Windows.Open(now)
		in.HeldByHalt = w.markedWith(u, u.Held, d.Release)
	} else if in.Released {
		in.FailureMarked = w.markedWith(u, u.Failed, u.Hash)
	}
	return in, true
}
