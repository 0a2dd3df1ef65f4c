package watcher

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/watches"
	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

func TestFairQueueTakesNamespacesInTurn(t *testing.T) {
	q := newFairQueue[workloadKey]()
	for i := range 100 {
		q.Push(workloadKey{"Deployment", "busy", string(rune('a' + i%26))})
	}
	q.Push(workloadKey{"Deployment", "quiet", "web"})
	q.Push(workloadKey{"Deployment", "other", "api"})
	var order []string
	for q.Len() > 0 {
		k := q.Pop()
		order = append(order, k.Namespace+"/"+k.Name)
	}
	if len(order) != 102 {
		t.Fatalf("popped %d items, want 102", len(order))
	}
	for _, want := range []string{"quiet/web", "other/api"} {
		if at := slices.Index(order, want); at < 0 || at > 2 {
			t.Errorf("%s popped at %d, want among the first 3, behind at most one of the busy namespace's 100: %v", want, at, order[:5])
		}
	}
	if order[0] != "busy/a" || order[3] != "busy/b" {
		t.Errorf("the busy namespace's own order is lost: %v", order[:5])
	}
}

// TestFairQueueUnderTheWorkqueue: through the workqueue, a key added again while
// queued is queued once, and one added while processed comes back after Done.
func TestFairQueueUnderTheWorkqueue(t *testing.T) {
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[workloadKey]{Queue: newFairQueue[workloadKey]()})
	defer q.ShutDown()
	a, b := workloadKey{"Deployment", "a", "web"}, workloadKey{"Deployment", "b", "web"}
	q.Add(a)
	q.Add(a)
	q.Add(b)
	if q.Len() != 2 {
		t.Fatalf("Len = %d, want 2: a key added twice is queued once", q.Len())
	}
	got, _ := q.Get()
	q.Add(got) // while processed
	if q.Len() != 1 {
		t.Fatalf("Len = %d while %v is processed, want 1", q.Len(), got)
	}
	q.Done(got)
	if q.Len() != 2 {
		t.Fatalf("Len = %d after Done, want 2: the key added while processed is queued again", q.Len())
	}
}

// TestRestartsTakeNamespacesInTurn (issue 52): a tenant's thousand controllers whose
// pods are restarted in place hold another namespace's restarts behind at most one of
// theirs, as the workloads' queue does.
func TestRestartsTakeNamespacesInTurn(t *testing.T) {
	r, err := newRestarts(fake.NewClientset(), watches.Door{Gate: modes{}}, confighash.Vocabulary{}, podRules{}, 0, time.Minute, 0, newReporter(record.NewFakeRecorder(1), nil, nil, zerolog.Nop()), NoopRecorder{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer r.queue.ShutDown()
	for i := range 1000 {
		r.queue.Add(podGroup{"busy", types.UID(fmt.Sprint(i))})
	}
	r.queue.Add(podGroup{"quiet", "web"})
	for i := range 3 {
		g, _ := r.queue.Get()
		r.queue.Done(g)
		if g.Namespace == "quiet" {
			return
		}
		if i == 2 {
			t.Fatal("the quiet namespace's group waits behind more than one of the busy namespace's")
		}
	}
}
