package watcher

import (
	"sync"
	"time"
)

// progress is what the watcher remembers of each workload between checks, under one
// lock: when a change first reached it, the version it warned about, and its pause.
type progress struct {
	mu sync.Mutex
	// firstSeen is when a change first reached a workload not yet converged: the start
	// of its convergence latency.
	firstSeen map[workloadKey]time.Time
	// warned remembers the resourceVersion a bad-annotation Event was sent for.
	warned map[workloadKey]string
	// pausedUntil is when the pause period after a workload's last touch ends.
	pausedUntil map[workloadKey]time.Time
}

func newProgress() *progress {
	return &progress{firstSeen: map[workloadKey]time.Time{}, warned: map[workloadKey]string{}, pausedUntil: map[workloadKey]time.Time{}}
}

// reached notes that a change reached the workload, and returns how long to wait
// before checking it: after, or until its pause period ends.
func (p *progress) reached(key workloadKey, now time.Time, after time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.firstSeen[key]; !ok {
		p.firstSeen[key] = now
	}
	if until, ok := p.pausedUntil[key]; ok {
		if held := until.Sub(now); held > after {
			after = held
		} else if held <= 0 {
			delete(p.pausedUntil, key)
		}
	}
	return after
}

// pause holds further touches of the workload for d.
func (p *progress) pause(key workloadKey, d time.Duration) {
	if d <= 0 {
		return
	}
	p.mu.Lock()
	p.pausedUntil[key] = time.Now().Add(d)
	p.mu.Unlock()
}

// pauseEnd is when the workload's pause period ends; zero for none.
func (p *progress) pauseEnd(key workloadKey) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pausedUntil[key]
}

// unpause ends a pause set for a touch that did not roll the workload.
func (p *progress) unpause(key workloadKey) {
	p.mu.Lock()
	delete(p.pausedUntil, key)
	p.mu.Unlock()
}

// warnOnce reports whether a warning about this version of the workload is still to
// be sent, and notes that it is sent.
func (p *progress) warnOnce(key workloadKey, rv string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.warned[key] == rv {
		return false
	}
	p.warned[key] = rv
	return true
}

// converged returns how long the workload took to converge since a change reached
// it, if one did.
func (p *progress) converged(key workloadKey) (time.Duration, bool) {
	p.mu.Lock()
	start, ok := p.firstSeen[key]
	delete(p.firstSeen, key)
	p.mu.Unlock()
	return time.Since(start), ok
}

// done forgets a workload that no longer needs converging.
func (p *progress) done(key workloadKey) {
	p.mu.Lock()
	delete(p.firstSeen, key)
	delete(p.warned, key)
	delete(p.pausedUntil, key)
	p.mu.Unlock()
}

// unreached forgets when a change reached the workload, with no latency to record:
// there is nothing to do until it changes.
func (p *progress) unreached(key workloadKey) {
	p.mu.Lock()
	delete(p.firstSeen, key)
	p.mu.Unlock()
}
