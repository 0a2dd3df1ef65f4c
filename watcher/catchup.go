package watcher

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Catching up the pods no restart in place reaches. A pod made while the webhook shed
// its admission (webhook/shed.go), or before its namespace or workload asked for
// restart in place, has no restarter and no label: the restarts never see it, and
// restarting the others would leave it on its old data for ever. Where the workload
// that made a group's pods counts more of them than the group has, a change of their
// data rolls the workload instead: its pod template gets the hash its pods are to start
// with, which the webhook leaves as it is on a workload restarted in place, and each
// new pod gets its restarter. Nothing is kept: the same change writes the same hash.

// unreached returns how many pods of the group's controller no restart in place
// reaches: those the workload that made them counts beyond the group's. 0 where that is
// not known: no workload's status counts them (podsOf), or a pod of the group is being
// deleted, which the status may count yet or no longer.
func (l groupLook) unreached(owner *view) int {
	if owner == nil || l.deleting {
		return 0
	}
	return max(0, owner.Pods-len(l.pods))
}

// rollInstead rolls the group's workload for the change its pods are to be restarted
// for, when they may be, within the caps, and tells the workload why, once per change.
func (r *restarts) rollInstead(ctx context.Context, g podGroup, l groupLook, owner *view, unreached int, now time.Time) (time.Duration, error) {
	first := l.todo[0]
	if wait := held(first, l.pods, l.lastWritten, now); wait > 0 {
		if !l.underWay() {
			r.wake(r.slots.release(g))
		}
		return wait, nil
	}
	if !r.takeSlot(g, first) {
		return 0, nil
	}
	if owner.Hash != first.want.Token {
		// Its UID named: a workload made again under the same name is not rolled.
		patch := hashPatch(owner.Kind, first.want.Token, map[string]any{"uid": owner.UID})
		if _, err := r.patch(ctx, owner, patch); err != nil {
			return 0, err
		}
	}
	r.slots.progressed(g, now)
	r.tell(g, objectRef(owner), first.want.Token, corev1.EventTypeWarning, "RollsToCatchUp", fmt.Sprintf(
		"%d of its %d pods run without the restarter (made while the webhook shed their admission, or before they asked for restart in place): no restart in place reaches them, so it rolls for this change instead (its pod template's hash set to %s)",
		unreached, owner.Pods, first.want.Token))
	return restartPoll, nil
}
