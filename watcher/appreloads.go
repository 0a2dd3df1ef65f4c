package watcher

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// reloadWaits are the pods told to reload, by UID, until their restarter was seen
// not Ready for the reload and then Ready again: a reload restarts no container, so
// no restart count tells it done. Only this watcher saw it: one that starts over
// takes a Ready pod as reloaded.
type reloadWaits map[types.UID]*reloadWait

// reloadWait is a reload under way: for which token, since when, and whether the
// restarter was seen not Ready for it.
type reloadWait struct {
	group      podGroup
	token      string
	since      time.Time
	sawUnready bool
}

// reloadSettle is how long a pod told to reload may stay Ready before the watcher
// takes the reload as done without having seen it: its restarter is not Ready for at
// least 2 s from the change, which a probe each second sees.
const reloadSettle = 10 * time.Second

// asked records that the pod was told, at now, to reload for the token.
func (rw reloadWaits) asked(p *podView, token string, now time.Time) {
	rw[p.UID] = &reloadWait{group: podGroup{p.Namespace, p.Group}, token: token, since: now}
}

// prune drops the reloads of the group's pods that are gone: those not in pods.
func (rw reloadWaits) prune(g podGroup, pods []*podView) {
	for uid, w := range rw {
		if w.group == g && !slices.ContainsFunc(pods, func(p *podView) bool { return p.UID == uid }) {
			delete(rw, uid)
		}
	}
}

// pending reports whether a restart or a reload the watcher asked of the pod has not
// happened yet: a restart is told by the restarts of its containers.
func (rw reloadWaits) pending(p *podView, now time.Time) bool {
	if !p.Reloads {
		return p.restarting()
	}
	w, ok := rw[p.UID]
	switch {
	case !ok || w.token != p.Token:
		return false
	case !p.RestarterReady:
		w.sawUnready = true
		return true
	case w.sawUnready || now.Sub(w.since) > reloadSettle:
		delete(rw, p.UID)
		return false
	}
	return true
}
