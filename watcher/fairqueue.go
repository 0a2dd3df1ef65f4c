package watcher

import "k8s.io/client-go/util/workqueue"

// fairQueue is the order the workers take ready workloads in: one namespace after
// another, in turn, and each namespace's in the order they became ready. With one
// FIFO, a namespace with a backlog (a shared ConfigMap used by thousands of its
// workloads, touches made slow by an admission webhook of its own, recreations) held
// every other namespace's rollouts behind it; now another namespace's workload waits
// for at most one of that backlog per worker. The workqueue calls it under its lock.
type fairQueue struct {
	items map[string][]workloadKey
	// turns are the namespaces with items, in the order they take their turn.
	turns []string
	n     int
}

var _ workqueue.Queue[workloadKey] = (*fairQueue)(nil)

func newFairQueue() *fairQueue { return &fairQueue{items: map[string][]workloadKey{}} }

// Touch is called when a queued item is added again: it keeps its place.
func (q *fairQueue) Touch(workloadKey) {}

func (q *fairQueue) Push(k workloadKey) {
	if len(q.items[k.Namespace]) == 0 {
		q.turns = append(q.turns, k.Namespace)
	}
	q.items[k.Namespace] = append(q.items[k.Namespace], k)
	q.n++
}

func (q *fairQueue) Len() int { return q.n }

// Pop takes the first item of the namespace whose turn it is; a namespace with more
// goes to the back of the turns.
func (q *fairQueue) Pop() workloadKey {
	ns := q.turns[0]
	q.turns = q.turns[1:]
	items := q.items[ns]
	k := items[0]
	items[0] = workloadKey{} // no reference kept to a popped key's strings
	if items = items[1:]; len(items) > 0 {
		q.items[ns] = items
		q.turns = append(q.turns, ns)
	} else {
		delete(q.items, ns)
	}
	q.n--
	return k
}
