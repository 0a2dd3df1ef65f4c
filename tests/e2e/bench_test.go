package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/certs"
	"github.com/confighash/confighash/sourcecache"
	"github.com/confighash/confighash/tests/bench"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
	"github.com/confighash/confighash/watches"
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

// BenchmarkMutatorWarmCache admits a Deployment with 5 sources in process, through the
// HTTP handler, answering from a cache synced with the local control plane: touched by
// the watcher (an update naming the source it changed), and created. Beside them, one
// consistent metadata GET of a source alone, of which a create sends five.
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
	sources := newSources(b, c)
	reader := webhook.NewCachedReader(sources, webhook.NewLiveReader(c.Client, watches.Door{}, sourcecache.Filter{}, nil, nil), webhook.NewVersions(metadata.NewForConfigOrDie(c.Config), watches.Door{}, sourcecache.Filter{}, 5*time.Second, nil), nil)
	go func() { _ = sources.Run(ctx) }()
	if !sources.WaitSynced(ctx) {
		b.Fatal("cache did not sync")
	}
	key, _ := confighash.NewKey(bytes.Repeat([]byte{3}, 32))
	mutator, err := webhook.New(webhook.Config{Key: key, Vocabulary: confighash.Vocabulary{Reloader: true}, Reader: reader,
		Snapshots: webhook.NewSnapshots(c.Client, key, nil)})
	if err != nil {
		b.Fatal(err)
	}
	handler, err := webhook.NewHandler(mutator, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}

	d := fixtures.Deployment("web", 1, fiveSourceTemplate())
	d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	d.Namespace = ns
	created, _ := json.Marshal(d)
	d.Annotations[confighash.AnnotationTrigger] = "ConfigMap/cm-0@" + versions["ConfigMap/cm-0"]
	touched, _ := json.Marshal(d)
	review := func(op admissionv1.Operation, obj, old []byte) []byte {
		body, _ := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{
				UID: "1", Operation: op, Namespace: ns, Name: "web",
				Kind:      metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
				Resource:  metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
				Object:    runtime.RawExtension{Raw: obj},
				OldObject: runtime.RawExtension{Raw: old},
			},
		})
		return body
	}
	b.Run("touch", func(b *testing.B) { admitEach(b, handler, review(admissionv1.Update, touched, created)) })
	// Beside each create, untimed: one consistent read of a source's version, and the
	// five rule 4 asks of a create using 5 sources, at once, with no webhook
	// around them. The floors its time is made of, in the same run.
	meta := metadata.NewForConfigOrDie(c.Config)
	get := func(resource, name string) {
		if _, err := meta.Resource(corev1.SchemeGroupVersion.WithResource(resource)).Namespace(ns).Get(b.Context(), name, metav1.GetOptions{}); err != nil {
			b.Error(err)
		}
	}
	b.Run("create", func(b *testing.B) {
		b.ReportAllocs()
		body := review(admissionv1.Create, created, nil)
		var creates, oneRead, fiveReads []time.Duration
		timed := func(into *[]time.Duration, f func()) {
			start := time.Now()
			f()
			*into = append(*into, time.Since(start))
		}
		for b.Loop() {
			timed(&creates, func() { admit(b, handler, body) })
			b.StopTimer()
			timed(&oneRead, func() { get("configmaps", "cm-0") })
			timed(&fiveReads, func() {
				var wg sync.WaitGroup
				for i := range 3 {
					wg.Go(func() { get("configmaps", fmt.Sprintf("cm-%d", i)) })
				}
				for i := range 2 {
					wg.Go(func() { get("secrets", fmt.Sprintf("secret-%d", i)) })
				}
				wg.Wait()
			})
			b.StartTimer()
		}
		b.StopTimer()
		reportPercentiles(b, creates)
		b.ReportMetric(float64(bench.Quantile(oneRead, .5).Microseconds()), "one-read-p50-µs")
		b.ReportMetric(float64(bench.Quantile(fiveReads, .5).Microseconds()), "five-reads-p50-µs")
	})
	// Pinned, a create reads whether each source's snapshot exists, as it does after
	// the first round; one that does not is made (a read of the source and a create).
	d.Annotations = map[string]string{confighash.AnnotationInject: "true", confighash.AnnotationPin: "true"}
	pinnedJSON, _ := json.Marshal(d)
	pinned := review(admissionv1.Create, pinnedJSON, nil)
	b.Run("create-pinned", func(b *testing.B) { admitEach(b, handler, pinned) })
	b.Run("create-pinned-new-snapshots", func(b *testing.B) {
		b.ReportAllocs()
		var samples []time.Duration
		for b.Loop() {
			b.StopTimer()
			for _, kind := range []string{"configmaps", "secrets"} {
				if err := c.Client.CoreV1().RESTClient().Delete().Namespace(ns).Resource(kind).
					Param("labelSelector", confighash.LabelSnapshotOf).Do(b.Context()).Error(); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			start := time.Now()
			admit(b, handler, pinned)
			samples = append(samples, time.Since(start))
		}
		b.StopTimer()
		reportPercentiles(b, samples)
	})
}

// admitEach admits the review at each round and reports the percentiles of the
// handler's time.
func admitEach(b *testing.B, handler http.Handler, body []byte) {
	b.ReportAllocs()
	timeEach(b, func() { admit(b, handler, body) })
}

// admit admits the review, which must be answered with a patch.
func admit(b *testing.B, handler http.Handler, body []byte) {
	req := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rr := httptest.NewRecorder()
	handler.ServeHTTP(rr, req)
	if rr.Code != http.StatusOK || !bytes.Contains(rr.Body.Bytes(), []byte(`"patch"`)) {
		b.Fatalf("status %d, no patch: %s", rr.Code, rr.Body)
	}
}

// timeEach calls f at each round and reports the percentiles of its time.
func timeEach(b *testing.B, f func()) {
	samples := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		f()
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, samples)
}

// BenchmarkDeploymentCreate measures a Deployment create through the API server: in a
// namespace no webhook serves; in one a webhook serves that allows it unchanged (the
// least any webhook adds here); in one a webhook serves that makes one consistent read
// and returns confighash's patch (the floor of what rule 4 asks); and in one
// confighash's serves, with 5 sources and with none. The differences are what a
// webhook's round trip adds, and what confighash adds to the floor.
func BenchmarkDeploymentCreate(b *testing.B) {
	c := cluster.Require(b, testCluster)
	w := startWebhook(b, c)
	noop := startNoopWebhook(b, c)
	floor := startFloorWebhook(b, c)
	enabled := map[string]string{confighash.InjectionLabel: confighash.InjectionEnabled}
	cases := []struct {
		name   string
		labels map[string]string
		hashed bool
		tmpl   corev1.PodTemplateSpec
	}{
		{"without-webhook", nil, false, fiveSourceTemplate()},
		{"with-noop-webhook", noop, false, fiveSourceTemplate()},
		{"with-floor-webhook", floor, true, fiveSourceTemplate()},
		{"with-webhook-no-sources", enabled, true, fixtures.PlainTemplate()},
		{"with-webhook", enabled, true, fiveSourceTemplate()},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			ns, err := c.CreateNamespace(b.Context(), "bench", tc.labels)
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
				d := fixtures.Deployment(fmt.Sprintf("web-%d", i), 0, tc.tmpl)
				i++
				start := time.Now()
				created, err := c.Client.AppsV1().Deployments(ns).Create(b.Context(), d, metav1.CreateOptions{})
				samples = append(samples, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				if _, hashed := created.Spec.Template.Annotations[confighash.AnnotationHash]; hashed != tc.hashed {
					b.Fatalf("hash written = %v, want %v", hashed, tc.hashed)
				}
			}
			b.StopTimer()
			reportPercentiles(b, samples)
			// confighash's own view: from the request decoded to the response built.
			sum := w.metric(b, "confighash_webhook_admission_duration_seconds_sum") - sumBefore
			if count := w.metric(b, "confighash_webhook_admission_duration_seconds_count") - countBefore; count > 0 {
				b.ReportMetric(sum/count*1e6, "in-webhook-µs")
			}
		})
	}
}

// startNoopWebhook serves, on 127.0.0.1, a mutating webhook that allows every
// Deployment unchanged, for the namespaces with the labels it returns: the least a
// webhook in the path of a write adds on this cluster.
func startNoopWebhook(b *testing.B, c *cluster.Cluster) map[string]string {
	b.Helper()
	return startBenchWebhook(b, c, "noop", func(context.Context, *admissionv1.AdmissionRequest) ([]byte, error) { return nil, nil })
}

// floorPatch is the patch confighash returns for a create: the pod template's hash
// and the record on the metadata, values of their real length.
var floorPatch = []byte(`[{"op":"add","path":"/metadata/annotations","value":{"confighash.dev/sources":"v2 configmap/cm-0=0123456789abcdef configmap/cm-1=0123456789abcdef configmap/cm-2=0123456789abcdef secret/secret-0=0123456789abcdef secret/secret-1=0123456789abcdef"}},` +
	`{"op":"add","path":"/spec/template/metadata/annotations","value":{"confighash.dev/hash":"v1:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}}]`)

// startFloorWebhook serves a webhook that does what rule 4 asks of an admission and
// no more: one consistent read of each of the five sources the pod template uses (a
// metadata GET, served by etcd), all at once, then the patch confighash returns.
// confighash's admission is held against it.
func startFloorWebhook(b *testing.B, c *cluster.Cluster) map[string]string {
	b.Helper()
	meta, err := metadata.NewForConfig(c.Config)
	if err != nil {
		b.Fatal(err)
	}
	configMaps, secrets := corev1.SchemeGroupVersion.WithResource("configmaps"), corev1.SchemeGroupVersion.WithResource("secrets")
	sources := []struct {
		resource schema.GroupVersionResource
		name     string
	}{{configMaps, "cm-0"}, {configMaps, "cm-1"}, {configMaps, "cm-2"}, {secrets, "secret-0"}, {secrets, "secret-1"}}
	return startBenchWebhook(b, c, "floor", func(ctx context.Context, req *admissionv1.AdmissionRequest) ([]byte, error) {
		var g errgroup.Group
		for _, src := range sources {
			g.Go(func() error {
				_, err := meta.Resource(src.resource).Namespace(req.Namespace).Get(ctx, src.name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
		return floorPatch, nil
	})
}

// startBenchWebhook serves, on 127.0.0.1, a mutating webhook for Deployments that
// answers each review with the JSON patch mutate returns (none: allowed unchanged),
// for the namespaces with the labels it returns.
func startBenchWebhook(b *testing.B, c *cluster.Cluster, name string, mutate func(context.Context, *admissionv1.AdmissionRequest) ([]byte, error)) map[string]string {
	b.Helper()
	labels := map[string]string{"bench.confighash.dev/" + name + "-webhook": "true"}
	ca, err := certs.NewAuthority(name+"-webhook-ca", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	kp, err := ca.Issue(certs.Leaf{CommonName: name + "-webhook", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Validity: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		b.Fatal(err)
	}
	var called atomic.Int64
	srv := &http.Server{
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var review admissionv1.AdmissionReview
			if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
				http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
				return
			}
			called.Add(1)
			patch, err := mutate(r.Context(), review.Request)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
			if patch != nil {
				review.Response.Patch, review.Response.PatchType = patch, ptr.To(admissionv1.PatchTypeJSONPatch)
			}
			review.Request = nil
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(review)
		}),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	b.Cleanup(func() { _ = srv.Close() })

	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "confighash-e2e-" + name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         name + ".bench.confighash.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + ln.Addr().String() + "/"), CABundle: ca.CertPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: labels},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](5),
		}},
	}
	api := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	_ = api.Delete(b.Context(), cfg.Name, metav1.DeleteOptions{})
	if _, err := api.Create(b.Context(), cfg, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = api.Delete(context.Background(), cfg.Name, metav1.DeleteOptions{}) })
	probe, err := c.CreateNamespace(b.Context(), name+"-probe", labels)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.DeleteNamespace(context.Background(), probe) })
	waitFor(b, 30*time.Second, "the API server to call the "+name+" webhook", func() bool {
		_, err := c.Client.AppsV1().Deployments(probe).Create(b.Context(), fixtures.Deployment("probe", 0, fixtures.PlainTemplate()), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && called.Load() > 0
	})
	return labels
}
