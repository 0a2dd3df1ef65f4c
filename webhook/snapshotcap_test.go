package webhook

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash/tests/bench"
)

func TestTheSnapshotCapCountsEachNamespaceApart(t *testing.T) {
	c := &SnapshotCap{maxCount: 2, maxBytes: 100, used: map[string]snapshotUsage{}, reserved: map[string]map[string]reservation{}}
	snapshot := func(ns, name, value string) any {
		s, _ := toSnapshotSize(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": value}})
		return s
	}
	c.add(snapshot("a", "one", strings.Repeat("x", 39)), 1) // 40 bytes
	c.add(snapshot("b", "one", strings.Repeat("x", 99)), 1) // 100 bytes, another namespace
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
	// A snapshot deleted (as the informers' tombstone carries it) frees its room.
	c.add(snapshot("b", "one", strings.Repeat("x", 99)), -1)
	if err := c.reserve("b", sizes(2, 100), true); err != nil {
		t.Errorf("after its one snapshot went, namespace b: %v", err)
	}
	// Admissions at the same moment: the first reserves the room, the second finds none
	// until the informers see the first's snapshot, which then counts once.
	if err := c.reserve("c", sizes(2, 10), false); err != nil {
		t.Fatal(err)
	}
	if err := c.reserve("c", map[string]int64{"other": 1}, false); !errors.As(err, &capped) {
		t.Errorf("a second admission beyond the room the first reserved: %v", err)
	}
	c.add(snapshot("c", "s0", "x"), 1)
	c.add(snapshot("c", "s1", "x"), 1)
	if u, held := c.used["c"], len(c.reserved["c"]); u.count != 2 || u.bytes != 4 || held != 0 {
		t.Errorf("once seen, the snapshots count %d, %d bytes, with %d reservations left; want 2, 4 bytes and none", u.count, u.bytes, held)
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
