package watcher

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/watches"
)

// BenchmarkWaveWake times one wake of a wave while the 10 users it released roll
// out: each of the others, waiting, is checked once and finds its wave not come.
func BenchmarkWaveWake(b *testing.B) {
	for _, users := range []int{100, 1000} {
		b.Run(fmt.Sprintf("users-%d", users), func(b *testing.B) {
			key, err := confighash.NewKey(bytes.Repeat([]byte("k"), confighash.MinKeySize))
			if err != nil {
				b.Fatal(err)
			}
			objects := []runtime.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg", ResourceVersion: "2"}, Data: map[string]string{"k": "new"}}}
			for i := range users {
				// Recorded at other data: each is due the ConfigMap's.
				d := deploymentUsing(map[string]string{confighash.AnnotationInject: "true", confighash.AnnotationSources: "v1 configmap/cfg=0100000000000000"}, "cfg")
				d.Name = fmt.Sprintf("web-%04d", i)
				objects = append(objects, d)
			}
			client := fake.NewClientset(objects...)
			w := &Watcher{
				cfg:     Config{Key: key, Pacing: confighash.Pacing{WaveSize: 10}, WaveTimeout: time.Minute},
				sources: mustSources(b, client),
			}
			gate := modes{"ns": confighash.ModeOptedIn}
			if w.workloads, err = newWorkloads(client, nil, nil, gate, watches.Door{Gate: modes{}}, confighash.Kinds{confighash.Deployment}, confighash.Vocabulary{}, NoopRecorder{}, w.cfg.Log); err != nil {
				b.Fatal(err)
			}
			w.report = newReporter(record.NewFakeRecorder(users), nil, w.workloads, w.cfg.Log)
			w.decider = &decider{key: key, pacing: w.cfg.Pacing, gate: gate, sources: w.sources, later: newLaterRecords(), report: w.report}
			pc := &pacer{sources: w.sources, workloads: w.workloads, decider: w.decider, waveTimeout: time.Minute, waves: newWaves()}
			go func() { _ = w.sources.Run(b.Context()) }()
			w.workloads.byKind[confighash.Deployment.Kind].Run(b.Context())
			if !cache.WaitForCacheSync(b.Context().Done(), w.sources.Synced, w.workloads.byKind[confighash.Deployment.Kind].HasSynced) {
				b.Fatal("caches not synced")
			}
			type due struct {
				v *view
				d confighash.Decision
			}
			var waiting []due
			for i, obj := range w.workloads.byKind[confighash.Deployment.Kind].List() {
				v := obj.(*view)
				d, err := w.decider.decide(v, confighash.Pods{})
				if err != nil || len(d.Held) == 0 {
					b.Fatalf("%s: held %v, %v; want it due the ConfigMap", v.Name, d.Held, err)
				}
				if i < 10 {
					pc.waves.grants[keyOf(v)] = grant{Grant: confighash.Grant{Release: d.Release, At: time.Now()}, source: d.Held[0]}
					continue
				}
				waiting = append(waiting, due{v, d})
			}
			for b.Loop() {
				w.workloads.generation.Add(1) // the status that woke them
				for _, u := range waiting {
					wv := pc.waveOf(u.v, u.d)
					pc.waves.mu.Lock()
					st := pc.standing(wv, time.Now())
					pc.waves.mu.Unlock()
					if st.Rolling == 0 {
						b.Fatal("the wave's released users do not roll")
					}
				}
			}
		})
	}
}
