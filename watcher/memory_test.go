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
// workload, indexed as the informers index them: for Deployments that opt in, using a
// ConfigMap and a Secret and carrying their hash and record, and for the same
// Deployments not opted in, in namespaces that opt workloads in one by one, of which
// the watcher keeps the key alone.
func BenchmarkViewsAtRest(b *testing.B) {
	const workloads = 10_000
	gate := modes{}
	for i := range 10 {
		gate[fmt.Sprintf("ns-%d", i)] = confighash.ModeOptedIn
	}
	transform := newKeptKeys(gate).transform(toView)
	for _, optedIn := range []bool{true, false} {
		name := "opted-in"
		if !optedIn {
			name = "not-opted-in"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: byNamespace})
				before := bench.LiveHeap()
				for i := range workloads {
					annotations := map[string]string{confighash.AnnotationSources: fmt.Sprintf("v1 configmap/config-%d=%016x secret/secret-%d=%016x", i, i, i, i)}
					if optedIn {
						annotations[confighash.AnnotationInject] = "true"
					}
					d := deploymentUsing(annotations, fmt.Sprintf("config-%d", i))
					d.Namespace, d.Name, d.ResourceVersion = fmt.Sprintf("ns-%d", i%10), fmt.Sprintf("app-%d", i), fmt.Sprint(1000+i)
					d.Spec.Template.Annotations = map[string]string{confighash.AnnotationHash: fmt.Sprintf("v1:%064x", i)}
					d.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: fmt.Sprintf("secret-%d", i)}}}}
					v, err := transform(d)
					if err != nil {
						b.Fatal(err)
					}
					if _, isView := v.(*view); isView != optedIn {
						b.Fatalf("kept a %T", v)
					}
					if err := store.Add(v); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(bench.LiveHeap()-before)/workloads, "heap-bytes/workload")
				runtime.KeepAlive(store)
			}
		})
	}
}
