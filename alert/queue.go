package alert

import "sync"

// queue holds the alerts waiting to be sent, at most size, first in first out. The
// namespaces share it: when it is full, an alert of a namespace with fewer waiting
// takes the place of the newest of the namespace with the most. A flood of one
// namespace's changes drops its own alerts, never another's one.
type queue struct {
	mu      sync.Mutex
	size    int
	alerts  []Alert
	waiting map[string]int // alerts waiting, by namespace
	// ready holds a token while alerts wait.
	ready chan struct{}
}

func newQueue(size int) *queue {
	return &queue{size: size, waiting: map[string]int{}, ready: make(chan struct{}, 1)}
}

// push queues the alert, and returns the alert dropped to keep to the size, if one
// was: itself when its namespace has the most waiting.
func (q *queue) push(a Alert) (dropped *Alert) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.alerts) >= q.size {
		most := q.most()
		if most == a.Namespace || q.waiting[most] <= q.waiting[a.Namespace] {
			return &a
		}
		for i := len(q.alerts) - 1; ; i-- {
			if q.alerts[i].Namespace == most {
				evicted := q.alerts[i]
				q.alerts = append(q.alerts[:i], q.alerts[i+1:]...)
				q.taken(most)
				dropped = &evicted
				break
			}
		}
	}
	q.alerts = append(q.alerts, a)
	q.waiting[a.Namespace]++
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return dropped
}

// most returns the namespace with the most alerts waiting; under the lock.
func (q *queue) most() string {
	most := ""
	for ns, n := range q.waiting {
		if n > q.waiting[most] || n == q.waiting[most] && ns < most {
			most = ns
		}
	}
	return most
}

// pop takes the first alert waiting, if any.
func (q *queue) pop() (Alert, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.alerts) == 0 {
		return Alert{}, false
	}
	a := q.alerts[0]
	q.alerts[0] = Alert{}
	q.alerts = q.alerts[1:]
	q.taken(a.Namespace)
	if len(q.alerts) > 0 {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
	return a, true
}

// taken counts an alert of the namespace out of the queue; under the lock.
func (q *queue) taken(namespace string) {
	if q.waiting[namespace]--; q.waiting[namespace] == 0 {
		delete(q.waiting, namespace)
	}
}
