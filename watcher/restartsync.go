package watcher

import (
	"cmp"
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// groupLook is where a group's pods stand: those to restart (the not Ready first,
// then the highest ordinal first, as a StatefulSet rolls), those down, and those the
// watcher restarted that are not back yet.
type groupLook struct {
	pods        []*podView
	todo        []restart
	notReady    int // the first of todo, restarted at once: down already
	unavailable int
	notBack     []restart
	lastWritten time.Time
}

// underWay reports whether the group's restarts for a change are under way: a pod
// the watcher restarted is not back, or one already carries the token the rest are
// to be restarted to.
func (l groupLook) underWay() bool {
	return len(l.notBack) > 0 || len(l.todo) > 0 && continuing(l.todo[0], l.pods)
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
		if !ok || p.Deleting || p.Namespace != g.Namespace {
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
		case r.reloads.pending(p, now) || !p.Ready:
			l.unavailable++
			if p.RestartsAt >= 0 {
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

// holdUnderWay gives a slot to each group whose restarts are under way, as a watcher
// that starts leading finds them, before any other takes one.
func (r *restarts) holdUnderWay() {
	now := time.Now()
	seen := map[podGroup]bool{}
	for _, obj := range r.pods.List() {
		p, ok := obj.(*podView)
		if !ok || seen[podGroup{p.Namespace, p.Group}] {
			continue
		}
		g := podGroup{p.Namespace, p.Group}
		seen[g] = true
		if r.look(g, now).underWay() {
			r.slots.hold(g)
		}
	}
}

// sync restarts the group's stale pods as far as it may now, and returns when to look
// again: 0 when nothing is left to restart or to come back, or it waits for a slot,
// whose release wakes it.
func (r *restarts) sync(ctx context.Context, g podGroup) (time.Duration, error) {
	if r.pods.For(g.Namespace) == nil || !r.covered(g.Namespace) {
		return 0, nil
	}
	now := time.Now()
	l := r.look(g, now)
	defer func() { r.metrics.RestartingControllers(r.slots.counts()) }()
	halted := false
	for _, b := range l.notBack {
		halted = r.haltIfFailed(g, b.pod, b.want.Token) || halted
	}
	r.slots.setHalted(g, halted)
	switch {
	case len(l.todo) == 0 && len(l.notBack) == 0:
		r.release(g)
		if l.unavailable > 0 {
			return restartPoll, nil // to see them come back
		}
		return 0, nil
	case len(l.todo) == 0:
		return restartPoll, nil
	}
	first := l.todo[0]
	rollout := r.rollout(first.pod) // one controller's: the same for each of its pods
	if rollout.replacing {
		r.release(g)
		r.tell(g, first.pod, first.want.Token, corev1.EventTypeNormal, "RestartRollsInstead",
			"its workload rolls out a new pod template, whose pods start on the new data: the pods it replaces are not restarted in place too")
		return restartPoll, nil
	}
	if l.underWay() {
		r.slots.hold(g)
	} else if why := r.slots.take(g, first.want.WaveSize); why != "" {
		r.tell(g, first.pod, first.want.Token, corev1.EventTypeNormal, "RestartWaits", why)
		return 0, nil
	}
	// Down already: restarted at once, at no cost to the rest.
	for _, s := range l.todo[:l.notReady] {
		if err := r.restart(ctx, s.pod, s.want.Token); err != nil {
			return 0, err
		}
	}
	stale := l.todo[l.notReady:]
	if len(stale) == 0 {
		return restartPoll, nil
	}
	if wait := held(stale[0], l.pods, l.lastWritten, now); wait > 0 {
		return wait, nil
	}
	budget := rollout.maxUnavailable
	if budget == 0 {
		r.tell(g, stale[0].pod, stale[0].want.Token, corev1.EventTypeWarning, "RestartHeld",
			"its controller's rollout lets no pod be unavailable (maxUnavailable 0, and no surge in place): no pod of it is restarted in place; let one be (maxUnavailable: 1), or have it roll (confighash.dev/restart: rollout)")
		return restartPoll, nil
	}
	// One pod after another up to the budget; a pod whose restart the cache does not
	// show yet comes first again, and its same token restarts nothing twice.
	for _, s := range stale[:min(len(stale), max(0, budget-l.unavailable-l.notReady))] {
		if !r.disruptions.allowed(s.pod) {
			break
		}
		if err := r.restart(ctx, s.pod, s.want.Token); err != nil {
			return 0, err
		}
	}
	return restartPoll, nil
}

// release frees the group's slot, and wakes the groups waiting for one.
func (r *restarts) release(g podGroup) {
	for _, w := range r.slots.release(g) {
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
