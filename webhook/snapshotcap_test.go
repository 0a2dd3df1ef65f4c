package webhook

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/bench"
	"github.com/confighash/confighash/watches"
)

func TestTheSnapshotCapCountsEachNamespaceApart(t *testing.T) {
	snapshot := func(ns, name, value string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{confighash.LabelSnapshotOf: "cfg"}},
			Data: map[string]string{"k": value}}
	}
	client := fake.NewClientset(
		snapshot("a", "one", strings.Repeat("x", 39)), // 40 bytes
		snapshot("b", "one", strings.Repeat("x", 99)), // 100 bytes, another namespace
	)
	c, err := NewSnapshotCap(client, watches.Door{Gate: everywhere{}}, 2, 100)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Run(t.Context()) }()
	if !cache.WaitForCacheSync(t.Context().Done(), c.Synced) {
		t.Fatal("the cap's informers did not sync")
	}
	var capped *SnapshotCapError
	for _, tc := range []struct {
		name      string
		namespace string
		count     int
		bytes     int64
		limit     string
	}{
		{"one more that fits is admitted", "a", 1, 60, ""},
		{"one more beyond the count is refused", "a", 2, 10, "count"},
		{"one more beyond the bytes is refused", "a", 1, 61, "bytes"},
		{"a namespace's snapshots cost no other", "c", 2, 100, ""},
		{"a full namespace admits nothing more", "b", 1, 1, "bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.reserve(tc.namespace, sizes(tc.count, tc.bytes), true)
			switch {
			case tc.limit == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.limit != "" && (!errors.As(err, &capped) || capped.Limit != tc.limit):
				t.Errorf("got %v, want the %s cap", err, tc.limit)
			}
		})
	}
	// A snapshot deleted frees its room.
	if err := client.CoreV1().ConfigMaps("b").Delete(t.Context(), "one", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted snapshot to free its room", func() bool { return c.reserve("b", sizes(2, 100), true) == nil })
	// Admissions at the same moment: the first reserves the room, the second finds none
	// until the informers see the first's snapshots, which then count once.
	if err := c.reserve("c", sizes(2, 10), false); err != nil {
		t.Fatal(err)
	}
	if err := c.reserve("c", map[string]int64{"other": 1}, false); !errors.As(err, &capped) {
		t.Errorf("a second admission beyond the room the first reserved: %v", err)
	}
	for _, name := range []string{"s0", "s1"} {
		if _, err := client.CoreV1().ConfigMaps("c").Create(t.Context(), snapshot("c", name, "x"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	seen := func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.reserved["c"]) == 0 }
	waitFor(t, "the informers to see the reserved snapshots", seen)
	if u := c.used("c"); u.count != 2 || u.bytes != 4 {
		t.Errorf("once seen, the snapshots count %d, %d bytes; want 2, 4 bytes", u.count, u.bytes)
	}
	// A relist (a namespace confighash starts acting in) counts nothing twice.
	if swapped, err := c.informers[0].Relist(t.Context(), "c"); !swapped || err != nil {
		t.Fatalf("Relist(c) = %v, %v", swapped, err)
	}
	if u := c.used("c"); u.count != 2 || u.bytes != 4 {
		t.Errorf("after a relist, the snapshots count %d, %d bytes; want 2, 4 bytes", u.count, u.bytes)
	}
}

// waitFor waits up to 10 s for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// sizes returns n snapshots s0, s1... of these bytes in all.
func sizes(n int, bytes int64) map[string]int64 {
	out := map[string]int64{}
	for i := range n {
		out[fmt.Sprintf("s%d", i)] = bytes / int64(n)
	}
	return out
}

// BenchmarkSnapshotCapAtRest reports the heap the cap's informers hold per snapshot:
// ConfigMaps of 1 KiB in ten namespaces, kept as a name and a size.
func BenchmarkSnapshotCapAtRest(b *testing.B) {
	const snapshots = 10_000
	value := strings.Repeat("s", 1<<10)
	for b.Loop() {
		store := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{})
		before := bench.LiveHeap()
		for i := range snapshots {
			s, _ := toSnapshotSize(&corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", i%10), Name: fmt.Sprintf("app-%016x", i), ResourceVersion: fmt.Sprint(1000 + i)},
				Data:       map[string]string{"value": value},
			})
			if err := store.Add(s); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(bench.LiveHeap()-before)/snapshots, "heap-bytes/snapshot")
		runtime.KeepAlive(store)
	}
}
