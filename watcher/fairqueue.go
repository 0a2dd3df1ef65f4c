package watcher

// fairQueue is the order the workers take ready items in: one namespace after
// another, in turn, and each namespace's in the order they became ready. With one
// FIFO, a namespace with a backlog (a shared ConfigMap used by thousands of its
// workloads, touches made slow by an admission webhook of its own, recreations, a
// tenant's thousands of pods restarted in place) held every other namespace's behind
// it; now another namespace's item waits for at most one of that backlog per worker.
// The workqueue calls it under its lock.
type fairQueue[K namespaced] struct {
	items map[string][]K
	// turns are the namespaces with items, in the order they take their turn.
	turns []string
	n     int
}

// namespaced is a queue's item, which belongs to a namespace.
type namespaced interface {
	comparable
	namespace() string
}

func newFairQueue[K namespaced]() *fairQueue[K] { return &fairQueue[K]{items: map[string][]K{}} }

// Touch is called when a queued item is added again: it keeps its place.
func (q *fairQueue[K]) Touch(K) {}

func (q *fairQueue[K]) Push(k K) {
	ns := k.namespace()
	if len(q.items[ns]) == 0 {
		q.turns = append(q.turns, ns)
	}
	q.items[ns] = append(q.items[ns], k)
	q.n++
}

func (q *fairQueue[K]) Len() int { return q.n }

// Pop takes the first item of the namespace whose turn it is; a namespace with more
// goes to the back of the turns.
func (q *fairQueue[K]) Pop() K {
	ns := q.turns[0]
	q.turns = q.turns[1:]
	items := q.items[ns]
	k := items[0]
	var zero K
	items[0] = zero // no reference kept to a popped key's strings
	if items = items[1:]; len(items) > 0 {
		q.items[ns] = items
		q.turns = append(q.turns, ns)
	} else {
		delete(q.items, ns)
	}
	q.n--
	return k
}
