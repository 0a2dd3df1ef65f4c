package watcher

import (
	"sync"
	"time"
)

// changes times the check of a workload after the changes that reached it: once none
// came for the quiet period, and at most max after the first. The queue keeps the
// earliest time a key was added at, so a change that comes later extends the wait
// when the key comes out of the queue (settled), not when it is added.
type changes struct {
	quiet, max time.Duration

	mu      sync.Mutex
	pending map[workloadKey]changed
}

// changed is when the first and the last change not yet checked reached a workload.
type changed struct{ first, last time.Time }

// reached notes a change of the workload at now, and returns how long to wait before
// checking it.
func (c *changes) reached(key workloadKey, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pending[key]
	if !ok {
		p.first = now
	}
	p.last = now
	c.pending[key] = p
	return p.due(c.quiet, c.max).Sub(now)
}

// settled returns how much longer to wait before checking the workload, 0 to check it
// now; then the changes so far are taken as checked.
func (c *changes) settled(key workloadKey, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pending[key]
	if !ok {
		return 0
	}
	if wait := p.due(c.quiet, c.max).Sub(now); wait > 0 {
		return wait
	}
	delete(c.pending, key)
	return 0
}

func (p changed) due(quiet, max time.Duration) time.Time {
	due := p.last.Add(quiet)
	if limit := p.first.Add(max); limit.Before(due) {
		due = limit
	}
	return due
}
