package watcher

import (
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/bench"
)

// BenchmarkViewsAtRest reports the heap the watcher's workload store holds per
// workload: views of opted-in Deployments that use a ConfigMap and a Secret and carry
// their hash and record, indexed as the informers index them.
func BenchmarkViewsAtRest(b *testing.B) {
	const workloads = 10_000
	for b.Loop() {
		store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		before := bench.LiveHeap()
		for i := range workloads {
			d := deploymentUsing(map[string]string{
				confighash.AnnotationInject:  "true",
				confighash.AnnotationSources: fmt.Sprintf("v1 configmap/config-%d=%016x secret/secret-%d=%016x", i, i, i, i),
			}, fmt.Sprintf("config-%d", i))
			d.Namespace, d.Name, d.ResourceVersion = fmt.Sprintf("ns-%d", i%10), fmt.Sprintf("app-%d", i), fmt.Sprint(1000+i)
			d.Spec.Template.Annotations = map[string]string{confighash.AnnotationHash: fmt.Sprintf("v1:%064x", i)}
			d.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: fmt.Sprintf("secret-%d", i)}}}}
			v, err := toView(d)
			if err != nil {
				b.Fatal(err)
			}
			if err := store.Add(v); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(bench.LiveHeap()-before)/workloads, "heap-bytes/workload")
		runtime.KeepAlive(store)
	}
}
