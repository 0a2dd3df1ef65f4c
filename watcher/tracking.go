package watcher

import (
	"sync"
	"time"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
)

// tracking is the one owner of what the watcher remembers of each workload between
// checks, under its own lock: the changes not checked yet, when a change first
// reached it and its pause. What a wave needs of its users is the waves' (waves.go), read
// for all the users of a wave at once. Both only save work or time it: after a
// restart, the workloads and their statuses say the rest.
type tracking struct {
	// quiet and max time the check after changes: once none came for quiet, and at
	// most max after the first; spacing spaces the touches of one fan-out.
	quiet, max, spacing time.Duration

	mu sync.Mutex
	of map[workloadKey]*tracked
}

// tracked is what the watcher remembers of one workload; an entry with nothing in it
// is dropped.
type tracked struct {
	// changed is when the first and the last change not yet checked reached it.
	changed changed
	// firstSeen is when a change first reached it while not converged: the start of
	// its convergence latency.
	firstSeen time.Time
	// pausedUntil is when the pause period after its last touch ends.
	pausedUntil time.Time
}

// changed is when the first and the last change not yet checked reached a workload;
// alone says the first may be checked at once (tracking.alone) and none followed it.
type changed struct {
	first, last time.Time
	alone       bool
}

func (p changed) due(quiet, max time.Duration) time.Time {
	if p.alone {
		return p.first
	}
	due := p.last.Add(quiet)
	if limit := p.first.Add(max); limit.Before(due) {
		due = limit
	}
	return due
}

func newTracking(quiet, max, spacing time.Duration) *tracking {
	return &tracking{quiet: quiet, max: max, spacing: spacing, of: map[workloadKey]*tracked{}}
}

// with runs f on the workload's entry under the lock, and drops the entry if f leaves
// it empty.
func (t *tracking) with(key workloadKey, f func(e *tracked)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.of[key]
	if !ok {
		e = &tracked{}
	}
	f(e)
	switch {
	case *e == tracked{}:
		delete(t.of, key)
	case !ok:
		t.of[key] = e
	}
}

// get returns what is remembered of the workload, the zero entry for nothing: a read
// that neither allocates nor adds an entry.
func (t *tracking) get(key workloadKey) tracked {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.of[key]; ok {
		return *e
	}
	return tracked{}
}

// forget drops all that is remembered of the workload.
func (t *tracking) forget(key workloadKey) {
	t.mu.Lock()
	delete(t.of, key)
	t.mu.Unlock()
}

// alone reports whether a change of a source, seen at now, may be checked at once: no
// tool that writes a set of objects in turn wrote it, and the source had not been
// written for burstGap before. An apply (Helm, kubectl apply, GitOps) writes the rest
// of its objects next, some milliseconds apart, and a source written more often is in
// a burst: those wait the quiet period, so that what is written together rolls once.
// A SecretProviderClass's new versions are not alone: the CSI driver writes the Secret
// it syncs right after. prev's write time is to the second, hence the second more.
func (t *tracking) alone(prev, d *sourcecache.Digested, now time.Time) bool {
	return prev != nil && !d.Applied && d.Source.Kind != confighash.SecretProviderClass && t.quiet > 0 &&
		now.Sub(prev.Written()) > time.Second+burstGap
}

// burstGap is how long a source must have gone unwritten for a change of it to come
// alone. A writer that changes a source every second or so (the burst scenario) leaves
// a gap this long about once in 200 changes, so its changes are coalesced.
const burstGap = 5 * time.Second

// touchBurst is how many of the workloads one change reaches are touched at once,
// before the touch rate spaces the rest: a fan-out of a few rolls together, as
// client-go's own limiter lets a burst of 10 through.
const touchBurst = 10

// spread is how long after the first the i-th workload one change reaches is touched.
func (t *tracking) spread(i int) time.Duration {
	return time.Duration(max(0, i-touchBurst+1)) * t.spacing
}

// changeReached notes a change of the workload at now, and returns how long to wait
// before checking it: none for a change alone, unless another is waiting. The queue
// keeps the earliest time a key was added at, so a change that comes later extends the
// wait when the key comes out of the queue (untilQuiet), not when it is added.
func (t *tracking) changeReached(key workloadKey, now time.Time, alone bool) (wait time.Duration) {
	t.with(key, func(e *tracked) {
		if e.changed.first.IsZero() {
			e.changed.first, e.changed.alone = now, alone
		} else {
			e.changed.alone = false
		}
		e.changed.last = now
		wait = e.changed.due(t.quiet, t.max).Sub(now)
	})
	return wait
}

// untilQuiet returns how much longer to wait before checking the workload, 0 to check
// it now; then the changes so far are taken as checked.
func (t *tracking) untilQuiet(key workloadKey, now time.Time) (wait time.Duration) {
	t.with(key, func(e *tracked) {
		if e.changed.first.IsZero() {
			return
		}
		if wait = e.changed.due(t.quiet, t.max).Sub(now); wait <= 0 {
			wait, e.changed = 0, changed{}
		}
	})
	return wait
}

// reached notes that a change reached the workload, and returns how long to wait
// before checking it: after, or until its pause period ends.
func (t *tracking) reached(key workloadKey, now time.Time, after time.Duration) time.Duration {
	t.with(key, func(e *tracked) {
		if e.firstSeen.IsZero() {
			e.firstSeen = now
		}
		if !e.pausedUntil.IsZero() {
			if held := e.pausedUntil.Sub(now); held > after {
				after = held
			} else if held <= 0 {
				e.pausedUntil = time.Time{}
			}
		}
	})
	return after
}

// pause holds further touches of the workload for d.
func (t *tracking) pause(key workloadKey, d time.Duration) {
	if d <= 0 {
		return
	}
	t.with(key, func(e *tracked) { e.pausedUntil = time.Now().Add(d) })
}

// pausedUntil holds further touches of the workload until end, unless a pause is
// known: the one its status tells, when a leader starts.
func (t *tracking) pausedUntil(key workloadKey, end time.Time) {
	t.with(key, func(e *tracked) {
		if e.pausedUntil.IsZero() {
			e.pausedUntil = end
		}
	})
}

// pauseEnd is when the workload's pause period ends; zero for none.
func (t *tracking) pauseEnd(key workloadKey) time.Time { return t.get(key).pausedUntil }

// unpause ends a pause set for a touch that did not roll the workload.
func (t *tracking) unpause(key workloadKey) {
	t.with(key, func(e *tracked) { e.pausedUntil = time.Time{} })
}

// converged returns how long the workload took to converge since a change reached
// it, if one did.
func (t *tracking) converged(key workloadKey) (took time.Duration, ok bool) {
	t.with(key, func(e *tracked) {
		if ok = !e.firstSeen.IsZero(); ok {
			took, e.firstSeen = time.Since(e.firstSeen), time.Time{}
		}
	})
	return took, ok
}

// unreached forgets when a change reached the workload, with no latency to record:
// there is nothing to do until it changes.
func (t *tracking) unreached(key workloadKey) {
	t.with(key, func(e *tracked) { e.firstSeen = time.Time{} })
}

// deleted forgets the convergence of a workload deleted meanwhile.
func (t *tracking) deleted(key workloadKey) {
	t.with(key, func(e *tracked) { e.firstSeen, e.pausedUntil = time.Time{}, time.Time{} })
}
