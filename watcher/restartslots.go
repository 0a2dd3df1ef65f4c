package watcher

import (
	"fmt"
	"time"
)

// restartSlots are the groups whose pods are being restarted in place, as waves and
// --max-rolling count them: a namespace's wave size caps its groups under way at
// once, MaxRolling all of them across namespaces, shared fairly while others wait for
// room. A group under way keeps its slot until none of its pods is stale or back
// from its restart not yet: one that does not come back holds its slot, so a bad
// change halts after the first wave. It gives its --max-rolling slot up, though: a
// tenant's halted changes hold no other namespace's restarts. Nor does a group whose
// pods show it under way and never come back: one that made no progress for the
// restart timeout halts (stalled). Only restarts' sync uses them.
type restartSlots struct {
	maxRolling int
	// under holds the groups under way, and whether each counts against MaxRolling
	// (not once halted); rolling, how many do.
	under   map[podGroup]bool
	rolling int
	// progress is when each group under way took its slot, or had a pod restarted
	// since: what the watcher did, never what a pod's fields say.
	progress map[podGroup]time.Time
	// inNamespace counts the groups under way of each namespace; waiting are the
	// groups held for room, by namespace, woken when a slot frees.
	inNamespace map[string]int
	waiting     map[string]map[podGroup]bool
}

func newRestartSlots(maxRolling int) *restartSlots {
	return &restartSlots{maxRolling: maxRolling, under: map[podGroup]bool{}, progress: map[podGroup]time.Time{}, inNamespace: map[string]int{}, waiting: map[string]map[podGroup]bool{}}
}

// take gives the group a slot, keeps the one it has, or says why it waits: its
// namespace's waveSize groups (0: no waves) are under way, or MaxRolling leaves it
// no room. A group its pods show under way, as a watcher that starts over finds it,
// takes one the same way: what a pod says is the tenant's to write.
func (s *restartSlots) take(g podGroup, waveSize int) (why string) {
	if _, ok := s.under[g]; ok {
		return ""
	}
	mine := s.inNamespace[g.Namespace]
	if waveSize > 0 && mine >= waveSize {
		s.wait(g)
		return fmt.Sprintf("its namespace restarts in place the pods of %d controllers at once (wave size %d): it waits for its wave; a pod that does not come back from its restart holds its wave (RestartHalted)", waveSize, waveSize)
	}
	if s.maxRolling > 0 {
		free := s.maxRolling - s.rolling
		others := len(s.waiting)
		if _, waits := s.waiting[g.Namespace]; waits {
			others--
		}
		if others > 0 {
			free = min(free, max(1, s.maxRolling/(others+1))-mine)
		}
		if free <= 0 {
			s.wait(g)
			return fmt.Sprintf("at most %d controllers restart pods in place at once, across namespaces (--max-rolling): it waits for room", s.maxRolling)
		}
	}
	s.under[g] = true
	s.progress[g] = time.Now()
	s.rolling++
	s.inNamespace[g.Namespace]++
	s.stopWaiting(g)
	return ""
}

// progressed notes that a pod of the group was restarted at now.
func (s *restartSlots) progressed(g podGroup, now time.Time) {
	if _, ok := s.under[g]; ok {
		s.progress[g] = now
	}
}

// stalled reports whether the group has held its slot for longer than timeout with no
// pod restarted since.
func (s *restartSlots) stalled(g podGroup, now time.Time, timeout time.Duration) bool {
	at, ok := s.progress[g]
	return ok && now.Sub(at) > timeout
}

func (s *restartSlots) stopWaiting(g podGroup) {
	if ws := s.waiting[g.Namespace]; ws != nil {
		delete(ws, g)
		if len(ws) == 0 {
			delete(s.waiting, g.Namespace)
		}
	}
}

func (s *restartSlots) wait(g podGroup) {
	if s.waiting[g.Namespace] == nil {
		s.waiting[g.Namespace] = map[podGroup]bool{}
	}
	s.waiting[g.Namespace][g] = true
}

// release frees the group's slot, or its place among those waiting, and returns the
// groups waiting, to look at again, when that may let one go: a slot freed, or a
// namespace no longer waiting, which widens the others' shares.
func (s *restartSlots) release(g podGroup) []podGroup {
	waited := s.waiting[g.Namespace][g]
	s.stopWaiting(g)
	rolling, ok := s.under[g]
	if !ok {
		if _, still := s.waiting[g.Namespace]; waited && !still {
			return s.waiters()
		}
		return nil
	}
	if rolling {
		s.rolling--
	}
	delete(s.under, g)
	delete(s.progress, g)
	if s.inNamespace[g.Namespace]--; s.inNamespace[g.Namespace] == 0 {
		delete(s.inNamespace, g.Namespace)
	}
	return s.waiters()
}

func (s *restartSlots) waiters() []podGroup {
	var wake []podGroup
	for _, ws := range s.waiting {
		for w := range ws {
			wake = append(wake, w)
		}
	}
	return wake
}

// setHalted notes whether the group is halted, and returns the groups waiting, to
// look at again, when its --max-rolling slot freed. One halted keeps its place in its
// namespace's wave and gives its --max-rolling slot up; once no longer halted (a fix
// made its pods stale again), it gives its place up too, and takes one again as any
// other, within the caps.
func (s *restartSlots) setHalted(g podGroup, halted bool) []podGroup {
	rolling, ok := s.under[g]
	switch {
	case halted && !ok:
		s.under[g] = false // its wave's place alone, as a watcher that starts over finds it
		s.progress[g] = time.Now()
		s.inNamespace[g.Namespace]++
		s.stopWaiting(g)
	case halted && rolling:
		s.under[g] = false
		s.rolling--
		return s.waiters()
	case !halted && ok && !rolling:
		return s.release(g)
	}
	return nil
}

// counts returns how many groups are under way, and how many wait.
func (s *restartSlots) counts() (underWay, waiting int) {
	for _, ws := range s.waiting {
		waiting += len(ws)
	}
	return len(s.under), waiting
}
