package watcher

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/bounded"
	"github.com/confighash/confighash/sourcecache"
	"github.com/rs/zerolog"
)

// pacer paces the release of gated workloads' due changes: a change is released when
// the workload's rollout window is open and, for a change that reaches many workloads,
// when its wave comes. A wave waits for the users it granted to roll out; one of them
// that fails halts the rest (halts.go), and reverts itself where it asks to
// (revert.go); the first wave of a change may bake (bake.go); --max-rolling caps them
// across namespaces (waveslots.go). It also holds the users of a source that keeps
// changing (flapping.go).
type pacer struct {
	sources   *sourcecache.Cache
	workloads *workloads
	decider   *decider
	reads     *bounded.Reader
	queue     workqueue.TypedRateLimitingInterface[workloadKey]
	report    *reporter
	metrics   Recorder
	log       zerolog.Logger
	// pauseEnd is when the workload's pause period ends; unreached forgets that a
	// change reached it, for a hold is not slowness.
	pauseEnd  func(workloadKey) time.Time
	unreached func(workloadKey)

	threshold                   int
	waveTimeout, pendingTimeout time.Duration
	maxRolling                  int

	waves    *waves
	flapping *flapBreaker
	reverter *reverter
	baker    *baker
	analyst  *analyst
	pauses   *deploymentPauses
}

// canaryMark is the baking marker the workload's release writes: its grant's, for a
// workload of a change's first wave; for any other, none, which clears one of an
// earlier change.
func (pc *pacer) canaryMark(key workloadKey) any {
	pc.waves.mu.Lock()
	g, ok := pc.waves.grants[key]
	pc.waves.mu.Unlock()
	if !ok || g.canary == nil {
		return nil
	}
	return g.canary.String()
}

// forget drops what the pacer keeps of a workload.
func (pc *pacer) forget(key workloadKey) {
	pc.unhold(key)
	pc.waves.mu.Lock()
	pc.endGrant(key)
	delete(pc.waves.marked, key)
	pc.waves.generation++
	pc.waves.mu.Unlock()
}

// flapped counts a change of a source with users, and reports whether it flaps.
func (pc *pacer) flapped(src sourceIn, now time.Time) bool { return pc.flapping.changed(src, now) }

// forgetSource drops what was counted of a source created or deleted.
func (pc *pacer) forgetSource(src sourceIn) { pc.flapping.forget(src) }

// wrote learns, from a write of a source as the cache takes it in, who wrote it.
func (pc *pacer) wrote(d *sourcecache.Digested, meta metav1.Object) {
	pc.flapping.wrote(sourceIn{d.Namespace(), d.Source.SourceRef}, meta)
}

// paced reports whether the workload's due change is to be released now, or holds it:
// while a halted wave holds it, outside its rollout window or its pause period, while
// the sources due keep changing, and until its wave comes.
func (pc *pacer) paced(ctx context.Context, key workloadKey, v *view, d confighash.Decision) (release bool, err error) {
	now := time.Now()
	if pc.heldByHalt(v, d) {
		// Its marker's removal, or the next change of the source, wakes it.
		pc.hold(key, confighash.HoldHalted, d.Release)
		return false, nil
	}
	if at := d.Pacing.RollsAt(now, pc.pauseEnd(key)); at.After(now) {
		if !d.Pacing.Windows.Open(now) {
			// A wave's grant, given while its window was open, goes to others.
			pc.waves.mu.Lock()
			if pc.endGrant(key) {
				pc.wakeWaiting(key.Namespace)
			}
			pc.waves.mu.Unlock()
			if pc.hold(key, confighash.HoldWindow, d.Release) {
				why, rolls := confighash.HoldOf(confighash.HoldWindow).Says(confighash.HoldFacts{Windows: d.Pacing.Windows, Opens: at})
				pc.report.EventOn(v, corev1.EventTypeNormal, "Held", changedList(d.Held)+": "+why+"; rolls "+rolls)
				if err := pc.report.status(ctx, v, confighash.Status{Act: confighash.ActHeld, Until: at, Why: changedList(d.Held) + ": " + why}); err != nil {
					return false, err
				}
			}
		}
		pc.queue.AddAfter(key, at.Sub(now)) // a pause within an open window is no hold
		return false, nil
	}
	if held, err := pc.heldByFlapping(ctx, key, v, changesOf(v.Namespace, d.Held, pc.sources)); held || err != nil {
		return false, err
	}
	if wv := pc.waveOf(v, d); wv != nil {
		return pc.joinWave(ctx, key, v, d, wv)
	}
	return true, nil
}

func changedList(refs []confighash.SourceRef) string {
	return confighash.ListRefs(refs) + " changed"
}

// wave is one change of a source, rolled in waves.
type wave struct {
	id     waveID
	change confighash.Trigger
	pacing confighash.Pacing
	users  []*view
}

// size is the size of the wave's next wave: the first, or those after it.
func (wv *wave) size(canaried bool) int {
	if !canaried {
		return wv.pacing.FirstWave(len(wv.users))
	}
	return wv.pacing.LaterWaves(len(wv.users))
}

// waveOf returns the wave the workload's due change rolls in, nil when it rolls at
// once: it is a Job, which waves leave out (waveUsers), no wave applies, or no changed
// source reaches more workloads than the first wave and the threshold.
func (pc *pacer) waveOf(v *view, d confighash.Decision) *wave {
	if v.Kind.Recreated() {
		return nil
	}
	pacing := pc.pacingWith(v.Namespace, d.Pacing, d.Held...)
	if !pacing.Waves() {
		return nil
	}
	for _, ref := range d.Held {
		id := waveID{v.Namespace, ref}
		users := pc.waveUsers(id)
		if len(users) > max(pacing.FirstWave(len(users)), pc.threshold) {
			return &wave{id: id, change: pc.changeOf(id), pacing: pacing, users: users}
		}
	}
	return nil
}

// pacingWith is a user's pacing with the own wave settings of the changed sources,
// which bind all their users (confighash.Source.Paces).
func (pc *pacer) pacingWith(namespace string, p confighash.Pacing, changed ...confighash.SourceRef) confighash.Pacing {
	for _, ref := range changed {
		if src, ok := pc.sources.Lookup(namespace, ref); ok {
			p = src.Source.Paces(p)
		}
	}
	return p
}

// changeOf is the latest change of the wave's source.
func (pc *pacer) changeOf(id waveID) confighash.Trigger {
	change := confighash.Trigger{SourceRef: id.source}
	if d, ok := pc.sources.Lookup(id.namespace, id.source); ok {
		change.ResourceVersion = d.ResourceVersion
	}
	return change
}

// waveUsers returns the users of the source that waves take, in their order: by kind
// and name. They are shared: not to be modified.
func (pc *pacer) waveUsers(id waveID) []*view {
	pc.waves.mu.Lock()
	at := pc.memo().at
	users, ok := pc.waves.memo.users[id]
	pc.waves.mu.Unlock()
	if ok {
		return users
	}
	// A Job is recreated outside waves: it has no rollout to wait for, and no marker
	// can be written on it.
	users = slices.DeleteFunc(pc.workloads.users(id.namespace, id.source), func(v *view) bool { return v.Kind.Recreated() })
	slices.SortFunc(users, func(a, b *view) int {
		return confighash.WaveOrder(a.Kind.Kind, a.Name, b.Kind.Kind, b.Name)
	})
	pc.waves.mu.Lock()
	if pc.memo().at == at {
		pc.waves.memo.users[id] = users
	}
	pc.waves.mu.Unlock()
	return users
}

// joinWave reports whether the workload may roll now in its wave. When the users
// granted before have rolled out, the next are granted: the workloads that failed
// before first, then by kind and name, as many as MaxRolling leaves room for. When
// one has failed, the wave halts.
func (pc *pacer) joinWave(ctx context.Context, key workloadKey, v *view, d confighash.Decision, wv *wave) (bool, error) {
	now := time.Now()
	ws := pc.waves
	ws.mu.Lock()
	if g, ok := ws.grants[key]; ok && g.Release == d.Release {
		ws.mu.Unlock()
		return true, nil
	}
	st := pc.standing(wv, now)
	if st.Halts() {
		// Once nothing of the wave rolls any more, so that one alert names all that failed.
		h := pc.claimHalt(wv.id, st)
		ws.mu.Unlock()
		return false, pc.halt(ctx, key, h)
	}
	if st.Rolling > 0 {
		ws.stopWaiting(key) // its wave waits for its own, not for room
	} else {
		pc.grantNext(key, wv, st, now)
	}
	_, granted := ws.grants[key]
	if !granted {
		if ws.waiting[key.Namespace] == nil {
			ws.waiting[key.Namespace] = map[workloadKey]bool{}
		}
		ws.waiting[key.Namespace][key] = true
		if !st.Deadline.IsZero() {
			pc.queue.AddAfter(key, time.Until(st.Deadline)+time.Second)
		}
	}
	ws.mu.Unlock()
	if !granted && pc.hold(key, confighash.HoldWave, d.Release) {
		why := fmt.Sprintf("%s: rolls in waves (%s) of its %d users; waiting for its wave", changedList(d.Held), wv.pacing.String(), len(wv.users))
		pc.report.EventOn(v, corev1.EventTypeNormal, "Held", why)
		return false, pc.report.status(ctx, v, confighash.Status{Act: confighash.ActHeld, Why: why})
	}
	return granted, nil
}

// grantNext grants the next of the wave's pending users leave to roll, the workloads
// that failed before first, as many as the wave's size and MaxRolling allow, and
// queues them; under the waves' lock.
func (pc *pacer) grantNext(key workloadKey, wv *wave, st standing, now time.Time) {
	pending := st.Pending
	slices.SortStableFunc(pending, func(a, b int) int {
		return boolOrder(st.users[a].Failed.IsZero(), st.users[b].Failed.IsZero())
	})
	for _, i := range pending[:pc.room(key, min(wv.size(st.Canaried), len(pending)))] {
		uk := keyOf(st.users[i])
		g := grant{Grant: confighash.Grant{Release: st.in[i].Due, At: now}, source: wv.id.source}
		if !st.Canaried && (wv.pacing.Canary.N > 0 || wv.pacing.Bake > 0) {
			g.canary = &confighash.Baking{Marker: confighash.Marker{Change: wv.change, Hash: g.Release}, Bake: wv.pacing.Bake}
		}
		pc.waves.grants[uk] = g
		pc.waves.generation++
		if uk != key {
			pc.queue.Add(uk)
		}
		pc.queue.AddAfter(uk, pc.waveTimeout+time.Second) // to see it fail by taking too long
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
func (pc *pacer) standing(wv *wave, now time.Time) standing {
	at := pc.memo().at
	if deadline, ok := pc.waves.memo.busy[wv.id]; ok && (deadline.IsZero() || now.Before(deadline)) {
		return standing{Standing: confighash.Standing{Rolling: 1, Deadline: deadline}}
	}
	st := pc.stand(wv, now)
	if st.Rolling > 0 && pc.memo().at == at {
		pc.waves.memo.busy[wv.id] = st.Deadline
	}
	return st
}

// stand reads the users of a wave, has confighash.Stand classify them, and ends the
// grants it says end; under the waves' lock.
func (pc *pacer) stand(wv *wave, now time.Time) standing {
	st := standing{users: make([]*view, 0, len(wv.users)), in: make([]confighash.WaveUser, 0, len(wv.users))}
	for _, u := range wv.users {
		if in, ok := pc.waveUser(u, wv.change, now); ok {
			st.users = append(st.users, u)
			st.in = append(st.in, in)
		}
	}
	st.Standing = confighash.Stand(st.in, now, pc.waveTimeout)
	for _, i := range st.Ended {
		pc.endGrant(keyOf(st.users[i]))
	}
	return st
}

// waveUser reads what confighash.Stand needs of a user of a wave of the change; false
// when its decision fails; under the waves' lock.
func (pc *pacer) waveUser(u *view, change confighash.Trigger, now time.Time) (confighash.WaveUser, bool) {
	d, err := pc.decider.decide(u, confighash.Pods{})
	if err != nil {
		return confighash.WaveUser{}, false
	}
	key := keyOf(u)
	in := confighash.WaveUser{Released: u.Release != "" && u.Release == u.Hash, Status: u.Status, Failing: pc.waves.failing[key].hash == u.Hash}
	if g, ok := pc.waves.grants[key]; ok {
		in.Grant = &g.Grant
	}
	// A canary's marker names the hash its release named: one without it is forged, as a
	// keyed hash cannot be guessed before the watcher releases it.
	if u.Baking.Change == change && u.Baking.Hash == u.Release {
		in.Canary = &u.Baking
	}
	if len(d.Held) > 0 {
		in.Due, in.WindowOpen = d.Release, d.Pacing.Windows.Open(now)
		in.HeldByHalt = pc.markedWith(u, u.Held, d.Release)
	} else if in.Released {
		in.FailureMarked = pc.markedWith(u, u.Failed, u.Hash)
	}
	return in, true
}
