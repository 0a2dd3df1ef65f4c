package watcher

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/confighash/confighash"
)

// Slots: --max-rolling caps the workloads waves let roll at once, across namespaces.
// The namespaces share it: while others wait for room, one takes no more than an
// equal share, and a workload whose new pods stay Pending gives its slot up, so that
// one namespace that cannot schedule its pods does not hold every slot until the
// wave timeout, at each change.

// DefaultPendingTimeout is how long the new pods of a workload a wave let roll may stay
// Pending before its slot goes to others: longer than an image pull takes.
const DefaultPendingTimeout = 5 * time.Minute

// room returns how many of the n workloads the namespace's wave would let roll may
// roll now under MaxRolling. A namespace cut short waits for room (capped) until it
// gets all it asks for. Under the waves' lock.
func (pc *pacer) room(key workloadKey, n int) int {
	ws := pc.waves
	if pc.maxRolling == 0 {
		return n
	}
	held, mine := 0, 0
	for k, a := range ws.grants {
		if !a.slotFreed {
			held++
			if k.Namespace == key.Namespace {
				mine++
			}
		}
	}
	free := pc.maxRolling - held
	others := len(ws.capped)
	if _, waits := ws.capped[key.Namespace]; waits {
		others--
	}
	if others > 0 {
		share := max(1, pc.maxRolling/(others+1))
		free = min(free, share-mine)
	}
	if n <= max(free, 0) {
		delete(ws.capped, key.Namespace)
		return n
	}
	ws.capped[key.Namespace] = key
	return max(0, free)
}

// stopWaiting forgets that the workload's namespace waits for room, if it waited
// for this workload's wave: it is released, no longer due, or its wave waits for its
// own. Under the waves' lock.
func (ws *waves) stopWaiting(key workloadKey) {
	if ws.capped[key.Namespace] == key {
		delete(ws.capped, key.Namespace)
	}
}

// wakeCapped queues the namespaces that wait for room: there may be some now. Under
// the waves' lock.
func (pc *pacer) wakeCapped() {
	for _, k := range pc.waves.capped {
		pc.queue.Add(k)
	}
}

// pendingTooLong gives up the slot of a workload a wave let roll whose new pods have
// been Pending since then for longer than PendingTimeout. It still counts in its
// wave, which waits for it until it rolls out or times out.
func (pc *pacer) pendingTooLong(v *view, since time.Time) {
	if pc.maxRolling == 0 || since.IsZero() || time.Since(since) < pc.pendingTimeout {
		return
	}
	pc.waves.mu.Lock()
	a, ok := pc.waves.grants[keyOf(v)]
	freed := ok && !a.slotFreed
	if freed {
		a.slotFreed = true
		pc.waves.grants[keyOf(v)] = a
		pc.wakeCapped()
	}
	pc.waves.mu.Unlock()
	if !freed {
		return
	}
	pc.metrics.PendingTooLong()
	pc.report.EventOn(v, corev1.EventTypeWarning, "PendingTooLong",
		fmt.Sprintf("pods of its new template Pending for more than %v: its place among the --max-rolling workloads goes to others; its wave waits for it until --wave-timeout", pc.pendingTimeout))
}

// pendingSince returns when the oldest pod of the template still Pending was created,
// zero for none.
func pendingSince(pods []corev1.Pod, hash string) time.Time {
	var since time.Time
	for _, p := range pods {
		if p.Annotations[confighash.AnnotationHash] != hash || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodPending {
			continue
		}
		if t := p.CreationTimestamp.Time; since.IsZero() || t.Before(since) {
			since = t
		}
	}
	return since
}
