package watcher

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// groupLook is where a group's pods stand: those to restart (the not Ready first,
// then the highest ordinal first, as a StatefulSet rolls), those down, those the
// watcher restarted that are not back yet, and whether one is being deleted.
type groupLook struct {
	pods        []*podView
	todo        []restart
	notReady    int // the first of todo, restarted at once: down already
	unavailable int
	notBack     []restart
	lastWritten time.Time
	deleting    bool
	// nudges are the pods to nudge now, nudgeIn how long until the next is due.
	nudges  []*podView
	nudgeIn time.Duration
}

// underWay reports whether the group's restarts for a change are under way: a pod
// the watcher restarted is not back, or one already carries the token the rest are
// to be restarted to.
func (l groupLook) underWay() bool {
	return len(l.notBack) > 0 || len(l.todo) > 0 && continuing(l.todo[0], l.pods)
}

// waveSize is the wave size of the group's change, 0 when it has nothing to restart.
func (l groupLook) waveSize() int {
	if len(l.todo) == 0 {
		return 0
	}
	return l.todo[0].want.WaveSize
}

func continuing(s restart, group []*podView) bool {
	return slices.ContainsFunc(group, func(p *podView) bool { return p.RestartsAt >= 0 && p.Token == s.want.Token })
}

// look reads where the group's pods stand, from the cache.
func (r *restarts) look(g podGroup, now time.Time) groupLook {
	var l groupLook
	inf := r.pods.For(g.Namespace)
	if inf == nil {
		return l
	}
	objs, _ := inf.GetIndexer().ByIndex("group", string(g.UID))
	var stale []restart
	for _, obj := range objs {
		p, ok := obj.(*podView)
		if !ok || p.Namespace != g.Namespace || p.Done {
			continue // a pod run to its end runs nothing to restart
		}
		if p.Deleting {
			l.deleting = true
			continue
		}
		want, err := r.restartOf(p)
		if err != nil {
			r.log.Debug().Err(err).Str("pod", p.Namespace+"/"+p.Name).Msg("not restarted in place")
			continue
		}
		l.pods = append(l.pods, p)
		if p.TokenWritten.After(l.lastWritten) {
			l.lastWritten = p.TokenWritten
		}
		switch {
		case p.Token != want.Token && !p.Ready:
			l.todo = append(l.todo, restart{p, want})
		case p.Token != want.Token:
			stale = append(stale, restart{p, want})
		default:
			switch due := r.nudgeDue(p, now); {
			case due == 0:
				l.nudges = append(l.nudges, p)
			case due > 0 && (l.nudgeIn == 0 || due < l.nudgeIn):
				l.nudgeIn = due
			}
			pending := r.reloads.pending(p, now) // once: it notes what it sees of a reload
			if !pending && p.Ready {
				continue
			}
			l.unavailable++
			if r.notBack(p, pending) {
				l.notBack = append(l.notBack, restart{p, want})
			}
		}
	}
	slices.SortFunc(stale, func(a, b restart) int {
		return cmp.Or(cmp.Compare(len(b.pod.Name), len(a.pod.Name)), cmp.Compare(b.pod.Name, a.pod.Name))
	})
	l.notReady = len(l.todo)
	l.todo = append(l.todo, stale...)
	return l
}

// notBack reports whether a pod down is one the watcher restarted that has not come
// back: its restart or reload is pending, or it has not been Ready since, as far as
// its Ready condition, which last changed within the restart timeout of the token's
// write, tells. A pod that came back and went down later, as on a dead node, is down
// for another cause, and holds no wave.
func (r *restarts) notBack(p *podView, pending bool) bool {
	switch {
	case p.RestartsAt < 0:
		return false
	case pending:
		return true
	}
	return !p.Ready && (p.TokenWritten.IsZero() || p.ReadyChanged.Before(p.TokenWritten.Add(r.timeout)))
}

// holdUnderWay gives a slot to each group whose restarts are under way, as a watcher
// that starts leading finds them, before any other takes one, within the caps: a
// tenant may write a pod's token to look under way.
func (r *restarts) holdUnderWay() {
	now := time.Now()
	seen := map[podGroup]bool{}
	for _, obj := range r.pods.List() {
		p, ok := obj.(*podView)
		if !ok {
			continue
		}
		g := podGroup{p.Namespace, p.Group}
		if seen[g] {
			continue
		}
		seen[g] = true
		if l := r.look(g, now); l.underWay() {
			r.slots.take(g, l.waveSize())
		}
	}
}

// sync restarts the group's stale pods as far as it may now, and returns when to look
// again: 0 when nothing is left to restart or to come back, or it waits for a slot,
// whose release wakes it. A group takes a slot only to restart a pod now, and gives it
// up while held with none of its pods restarting: a window, a pause, its rollout's or
// its budgets' leave hold no other controller's wave.
func (r *restarts) sync(ctx context.Context, g podGroup) (after time.Duration, err error) {
	if r.pods.For(g.Namespace) == nil || !r.covered(g.Namespace) {
		return 0, nil
	}
	now := time.Now()
	l := r.look(g, now)
	defer func() {
		r.metrics.RestartingControllers(r.slots.counts())
		if l.nudgeIn > 0 && err == nil && (after == 0 || l.nudgeIn < after) {
			after = l.nudgeIn // nothing of the pod's changes while the kubelet misses it
		}
	}()
	r.reloads.prune(g, l.pods)
	if len(l.pods) == 0 {
		r.forget(g) // gone, or none of its pods restarted in place any longer
	}
	for _, p := range l.nudges {
		if err := r.nudge(ctx, p); err != nil {
			return 0, err
		}
	}
	halted := false
	for _, b := range l.notBack {
		halted = r.haltIfFailed(g, b.pod, b.want.Token) || halted
	}
	if len(l.notBack) > 0 && !halted && r.slots.stalled(g, now, r.timeout) {
		// Under way with no pod back and none restarted for the timeout: whatever its
		// pods' fields say, it holds no slot longer.
		b := l.notBack[0]
		if r.tell(g, b.pod.ref(), b.want.Token, corev1.EventTypeWarning, "RestartHalted", fmt.Sprintf(
			"its controller's restarts in place made no progress for %v (--wave-timeout): no pod came back; the others keep running on their data until one does", r.timeout)) {
			r.metrics.RestartHalted()
		}
		halted = true
	}
	r.wake(r.slots.setHalted(g, halted))
	if len(l.todo) == 0 {
		if len(l.notBack) == 0 {
			r.wake(r.slots.release(g))
		}
		if l.unavailable > 0 {
			return restartPoll, nil // to see them come back
		}
		return 0, nil
	}
	first := l.todo[0]
	rollout := r.rollout(first.pod) // one controller's: the same for each of its pods
	if rollout.replacing {
		r.wake(r.slots.release(g))
		r.tell(g, first.pod.ref(), first.want.Token, corev1.EventTypeNormal, "RestartRollsInstead",
			"its workload rolls out a new pod template, whose pods start on the new data: the pods it replaces are not restarted in place too")
		return restartPoll, nil
	}
	if n := l.unreached(rollout.owner); n > 0 {
		return r.rollInstead(ctx, g, l, rollout.owner, n, now)
	}
	writes, after := r.writable(g, l, rollout, now)
	switch {
	case len(writes) == 0 && !l.underWay():
		r.wake(r.slots.release(g))
		return after, nil
	case len(writes) == 0:
		return after, nil
	case !r.takeSlot(g, first):
		return 0, nil
	}
	for _, s := range writes {
		if err := r.restart(ctx, s.pod, s.want.Token); err != nil {
			return 0, err
		}
	}
	r.slots.progressed(g, now)
	return restartPoll, nil
}

// writable returns the group's pods to restart now, and when to look again: those not
// Ready at once, at no cost to the rest; the stale, one after another up to the
// budget, within their window and pause, while their budgets allow. A pod whose restart
// the cache does not show yet comes first again, and its same token restarts nothing
// twice.
func (r *restarts) writable(g podGroup, l groupLook, rollout podRollout, now time.Time) ([]restart, time.Duration) {
	writes := l.todo[:l.notReady]
	stale := l.todo[l.notReady:]
	if len(stale) == 0 {
		return writes, restartPoll
	}
	if wait := held(stale[0], l.pods, l.lastWritten, now); wait > 0 {
		return writes, wait
	}
	if rollout.maxUnavailable == 0 {
		r.tell(g, stale[0].pod.ref(), stale[0].want.Token, corev1.EventTypeWarning, "RestartHeld",
			"its controller's rollout lets no pod be unavailable (maxUnavailable 0, and no surge in place): no pod of it is restarted in place; let one be (maxUnavailable: 1), or have it roll (confighash.dev/restart: rollout)")
		return writes, restartPoll
	}
	for _, s := range stale[:min(len(stale), max(0, rollout.maxUnavailable-l.unavailable-l.notReady))] {
		if !r.disruptions.allowed(s.pod) {
			break
		}
		writes = append(writes, s)
	}
	return writes, restartPoll
}

// takeSlot takes the group a slot, to restart its pods or roll their workload now, or
// tells why it waits and reports false.
func (r *restarts) takeSlot(g podGroup, first restart) bool {
	why := r.slots.take(g, first.want.WaveSize)
	if why != "" {
		r.tell(g, first.pod.ref(), first.want.Token, corev1.EventTypeNormal, "RestartWaits", why)
	}
	return why == ""
}

// wake looks again at the groups a change of the slots may let go.
func (r *restarts) wake(groups []podGroup) {
	for _, w := range groups {
		r.queue.Add(w)
	}
}

// held returns how long a stale pod waits for its rollout window to open, or for the
// pause period its group's last restart began, when that restart was for another
// change; 0 when it may be restarted now.
func held(s restart, group []*podView, lastWritten, now time.Time) time.Duration {
	if ws := s.want.Windows; ws != nil && !ws.Open(now) {
		return ws.NextOpen(now).Sub(now)
	}
	if end := lastWritten.Add(s.want.PausePeriod); !continuing(s, group) && now.Before(end) {
		return end.Sub(now)
	}
	return 0
}
