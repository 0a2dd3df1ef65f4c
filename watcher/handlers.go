package watcher

import (
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
)

// The informers' handlers: each enqueues the workloads a change may concern, and
// never does the work itself.

// sourceChanged enqueues the workloads that may use a source whose data, existence or
// counting annotations changed.
func (w *Watcher) sourceChanged(old, obj any, initial bool) {
	if initial {
		return // the leader's resync covers what existed before
	}
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	d, ok := obj.(*sourcecache.Digested)
	if !ok {
		return
	}
	prev, _ := old.(*sourcecache.Digested)
	w.proofs.observe(prev, d)
	src := sourceIn{d.Namespace(), d.Source.SourceRef}
	switch {
	case prev == nil:
		w.pacer.forgetSource(src) // created or deleted
	case prev.Source.Equal(d.Source):
		return // metadata only
	}
	w.cfg.Metrics.SourceChanged(d.Source.Kind)
	if w.workloads.mode(d.Namespace()) == confighash.ModeOff {
		return
	}
	now := time.Now()
	alone := w.tracking.alone(prev, d, now)
	if w.restarts != nil {
		w.restarts.sourceChanged(d.Namespace(), d.Source.SourceRef, alone)
	}
	users := w.workloads.users(d.Namespace(), d.Source.SourceRef)
	for _, v := range users {
		w.decider.sourceChanged(v, d.Source.SourceRef)
	}
	if len(users) > 0 && prev != nil && w.pacer.flapped(src, now) {
		w.cfg.Metrics.Flapping()
	}
	w.enqueueSpread(users, now, alone)
}

// enqueueSpread enqueues the workloads a change reached at now, once it is quiet or at
// once if it came alone, spread at TouchRate after a first burst.
func (w *Watcher) enqueueSpread(views []*view, now time.Time, alone bool) {
	for i, v := range views {
		w.enqueue(v, w.tracking.changeReached(keyOf(v), now, alone)+w.tracking.spread(i))
	}
}

// workloadChanged enqueues a workload whose opt-in, references or record changed, for
// a convergence check; status updates and our own touches do not change a view.
func (w *Watcher) workloadChanged(old, obj any, initial bool) {
	v, ok := obj.(*view)
	if initial {
		return
	}
	if !ok {
		// Kept as its key now: the check finds it no longer acted on, and forgets it.
		if prev, wasView := old.(*view); wasView {
			w.queue.Add(keyOf(prev))
		}
		return
	}
	if prev, ok := old.(*view); ok && prev.State.Equal(v.State) && prev.Deleting == v.Deleting {
		if prev.Status != v.Status {
			w.pacer.progressed(v) // a wave may wait for it
			if len(v.Pins) > 0 && w.workloads.acts(v) && !w.snapshots.ownedFor(v) {
				w.queue.Add(keyOf(v)) // its new revision may own its snapshots now
			}
		}
		return
	}
	switch {
	case w.workloads.acts(v):
		w.enqueue(v, w.tracking.changeReached(keyOf(v), time.Now(), false))
	case len(v.Problems) > 0:
		w.queue.Add(keyOf(v)) // to be told: a typo may be what keeps it from opting in
	}
}

// enqueue queues the workload for a check after the delay, or, while its pause
// period holds it, when that ends.
func (w *Watcher) enqueue(v *view, after time.Duration) {
	key := keyOf(v)
	w.queue.AddAfter(key, w.tracking.reached(key, time.Now(), after))
}

// resync enqueues every workload that drifted while no watcher led, and those with a
// change held, whose release is the leader's to decide.
func (w *Watcher) resync() {
	drifted, queued := 0, 0
	now := time.Now()
	for _, v := range w.workloads.all() {
		// The pause of the last leader's rollout, which its status tells.
		if end := saidPauseEnd(v, now); !end.IsZero() && !w.pacer.pausesDeployment(v) {
			w.tracking.pausedUntil(keyOf(v), end)
		}
		d, err := w.decider.decide(v, confighash.Pods{})
		drift := err != nil || !d.Converged || len(d.Held) > 0
		// A pinned one is checked too: its snapshots' owners are known in memory
		// only, and the garbage collector may have taken one meanwhile. So is a
		// CronJob whose Job is due and was not started.
		// And a Deployment paused for its pause period, to be resumed.
		if !drift && len(v.Pins) == 0 && !v.RunDue && !v.pausedForPeriod() {
			continue
		}
		w.enqueue(v, w.tracking.spread(queued))
		queued++
		if drift {
			drifted++
		}
	}
	w.cfg.Metrics.Resynced(drifted)
	w.cfg.Log.Info().Int("drifted", drifted).Msg("resync done")
}
