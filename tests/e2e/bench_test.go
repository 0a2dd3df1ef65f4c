package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/metadata"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/webhook"
)

// fiveSourceTemplate uses 3 ConfigMaps and 2 Secrets, created by createFiveSources.
func fiveSourceTemplate() corev1.PodTemplateSpec {
	ctr := corev1.Container{Name: "app", Image: "example.com/app:1"}
	var vols []corev1.Volume
	for i := range 3 {
		ctr.EnvFrom = append(ctr.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("cm-%d", i)}}})
	}
	for i := range 2 {
		vols = append(vols, corev1.Volume{Name: fmt.Sprintf("s%d", i), VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: fmt.Sprintf("secret-%d", i)}}})
	}
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{ctr}, Volumes: vols}}
}

func createFiveSources(tb testing.TB, c *cluster.Cluster, ns string) map[string]string {
	tb.Helper()
	versions := map[string]string{}
	data := map[string]string{}
	for k := range 10 {
		data[fmt.Sprintf("key-%d", k)] = string(bytes.Repeat([]byte{'v'}, 1024))
	}
	for i := range 3 {
		cm, err := c.Client.CoreV1().ConfigMaps(ns).Create(tb.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: data}, metav1.CreateOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		versions["ConfigMap/"+cm.Name] = cm.ResourceVersion
	}
	for i := range 2 {
		if _, err := c.Client.CoreV1().Secrets(ns).Create(tb.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("secret-%d", i)}, StringData: data}, metav1.CreateOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	return versions
}

// reportPercentiles reports the p50 and p99 of the samples, in microseconds.
func reportPercentiles(b *testing.B, samples []time.Duration) {
	slices.Sort(samples)
	at := func(q float64) float64 { return float64(samples[int(q*float64(len(samples)-1))].Microseconds()) }
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}

// BenchmarkMutatorWarmCache admits a touched Deployment with 5 sources in process,
// through the HTTP handler, answering from a cache synced with the local control plane.
func BenchmarkMutatorWarmCache(b *testing.B) {
	c := cluster.Require(b, testCluster)
	ns, err := c.CreateNamespace(b.Context(), "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.DeleteNamespace(context.Background(), ns) })
	versions := createFiveSources(b, c, ns)

	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	sources := sourcecache.New(c.Client, nil, sourcecache.Filter{}, nil)
	go func() { _ = sources.Run(ctx) }()
	if !sources.WaitSynced(ctx) {
		b.Fatal("cache did not sync")
	}
	key, _ := confighash.NewKey(bytes.Repeat([]byte{3}, 32))
	reader := webhook.NewCachedReader(sources, webhook.NewLiveReader(c.Client, sourcecache.Filter{}, nil, nil), webhook.NewVersions(metadata.NewForConfigOrDie(c.Config), sourcecache.Filter{}, 5*time.Second, nil), nil)
	mutator, err := webhook.New(webhook.Config{Key: key, Vocabulary: confighash.Vocabulary{Reloader: true}, Reader: reader})
	if err != nil {
		b.Fatal(err)
	}
	handler, err := webhook.NewHandler(mutator, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}

	d := deployment("web", 1, fiveSourceTemplate())
	d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	d.Namespace = ns
	old, _ := json.Marshal(d)
	d.Annotations[confighash.AnnotationTrigger] = "ConfigMap/cm-0@" + versions["ConfigMap/cm-0"]
	obj, _ := json.Marshal(d)
	body, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "1", Operation: admissionv1.Update, Namespace: ns, Name: "web",
			Kind:      metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Resource:  metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
			Object:    runtime.RawExtension{Raw: obj},
			OldObject: runtime.RawExtension{Raw: old},
		},
	})

	samples := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		req := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rr := httptest.NewRecorder()
		handler.ServeHTTP(rr, req)
		samples = append(samples, time.Since(start))
		if rr.Code != http.StatusOK || !bytes.Contains(rr.Body.Bytes(), []byte(`"patch"`)) {
			b.Fatalf("status %d, no patch: %s", rr.Code, rr.Body)
		}
	}
	b.StopTimer()
	reportPercentiles(b, samples)
}

// BenchmarkDeploymentCreate measures a Deployment create through the API server, in a
// namespace the webhook does not serve and in one it does, with 5 sources and with
// none: the differences are what the webhook adds, and what its live reads add.
func BenchmarkDeploymentCreate(b *testing.B) {
	c := cluster.Require(b, testCluster)
	w := startWebhook(b, c)
	cases := []struct {
		name        string
		withWebhook bool
		tmpl        corev1.PodTemplateSpec
	}{
		{"without-webhook", false, fiveSourceTemplate()},
		{"with-webhook-no-sources", true, plainTemplate()},
		{"with-webhook", true, fiveSourceTemplate()},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			labels := map[string]string{}
			if tc.withWebhook {
				labels[confighash.InjectionLabel] = confighash.InjectionEnabled
			}
			ns, err := c.CreateNamespace(b.Context(), "bench", labels)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = c.DeleteNamespace(context.Background(), ns) })
			createFiveSources(b, c, ns)
			sumBefore := w.metric(b, "confighash_webhook_admission_duration_seconds_sum")
			countBefore := w.metric(b, "confighash_webhook_admission_duration_seconds_count")
			samples := make([]time.Duration, 0, b.N)
			i := 0
			for b.Loop() {
				d := deployment(fmt.Sprintf("web-%d", i), 0, tc.tmpl)
				i++
				start := time.Now()
				created, err := c.Client.AppsV1().Deployments(ns).Create(b.Context(), d, metav1.CreateOptions{})
				samples = append(samples, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				if _, hashed := created.Spec.Template.Annotations[confighash.AnnotationHash]; hashed != tc.withWebhook {
					b.Fatalf("hash written = %v, want %v", hashed, tc.withWebhook)
				}
			}
			b.StopTimer()
			reportPercentiles(b, samples)
			if tc.withWebhook {
				// The webhook's own view: from the request decoded to the response built.
				sum := w.metric(b, "confighash_webhook_admission_duration_seconds_sum") - sumBefore
				count := w.metric(b, "confighash_webhook_admission_duration_seconds_count") - countBefore
				b.ReportMetric(sum/count*1e6, "in-webhook-µs")
			}
		})
	}
}
