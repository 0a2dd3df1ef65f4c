package sourcecache

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash/tests/bench"
)

// BenchmarkSourcesAtRest reports the heap the cache holds per source: Secrets of one
// key in ten namespaces, as Digested, indexed as the informers index them.
func BenchmarkSourcesAtRest(b *testing.B) {
	const sources = 10_000
	value := []byte(strings.Repeat("s", 1<<10))
	created := metav1.Now()
	for b.Loop() {
		store := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, sourceIndexers)
		before := bench.LiveHeap()
		for i := range sources {
			d, err := toDigested(&corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", i%10), Name: fmt.Sprintf("secret-%d", i),
					ResourceVersion: fmt.Sprint(1000 + i), CreationTimestamp: created},
				Data: map[string][]byte{"value": value},
			})
			if err != nil {
				b.Fatal(err)
			}
			if err := store.Add(d); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(bench.LiveHeap()-before)/sources, "heap-bytes/source")
		runtime.KeepAlive(store)
	}
}
