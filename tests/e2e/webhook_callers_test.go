package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
	"github.com/confighash/confighash/webhook"
)

// TestForgedReviewsCannotExhaustTheWebhook (issue 41, point 3): anyone who reaches
// the admission port POSTs 16 forged AdmissionReviews of 5.5 MB at once (the webhook
// grew 378 MiB at 0579f85), then 16 just under the body cap, of an opted-in
// Deployment in a namespace confighash acts in, so each would be decoded. The first
// are refused unread, the others are admitted a few at a time and the rest shed, and
// the webhook's peak RSS grows by far less; a real admission right after is hashed.
func TestForgedReviewsCannotExhaustTheWebhook(t *testing.T) {
	c := sharedCluster(t)
	wh := startWebhook(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "v"})
	before := peakRSSMiB(t, wh.cmd.Process.Pid)

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: certPool(t, wh.ca.CertPEM), MinVersion: tls.VersionTLS12}, MaxConnsPerHost: 0, MaxIdleConnsPerHost: 32,
	}}
	statuses := func(size int) map[string]int {
		body := forgedReview(t, ns, size)
		var mu sync.Mutex
		got := map[string]int{}
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				outcome := postForged(client, "https://"+wh.addr+webhook.Path, body)
				mu.Lock()
				defer mu.Unlock()
				got[outcome]++
			})
		}
		wg.Wait()
		return got
	}
	huge := statuses(5_500_000)
	afterHuge := peakRSSMiB(t, wh.cmd.Process.Pid)
	t.Logf("16 forged reviews of 5.5 MB at once: %v; peak RSS %.1f → %.1f MiB (+%.1f)", huge, before, afterHuge, afterHuge-before)
	if huge["200 allowed"] != 0 {
		t.Errorf("a review over the %d-byte cap was admitted: %v", webhook.MaxBodyBytes, huge)
	}
	capped := statuses(webhook.MaxBodyBytes - 4<<10)
	after := peakRSSMiB(t, wh.cmd.Process.Pid)
	t.Logf("16 forged reviews of %.2f MiB (just under the cap) at once: %v; peak RSS %.1f → %.1f MiB (+%.1f)", float64(webhook.MaxBodyBytes-4<<10)/(1<<20), capped, afterHuge, after, after-afterHuge)
	t.Logf("webhook peak RSS growth over both attacks: +%.1f MiB (378 MiB at 0579f85 with the first alone)", after-before)
	if capped["200 shed"] == 0 {
		t.Errorf("no review was shed: %v; want the bytes in flight bounded", capped)
	}
	if growth := after - before; growth > 128 {
		t.Errorf("the webhook's peak RSS grew %.0f MiB under forged reviews, want under 128 MiB", growth)
	}
	if n := wh.metric(t, `confighash_webhook_admissions_shed_total{limit="bytes"}`); n == 0 {
		t.Error("confighash_webhook_admissions_shed_total{limit=\"bytes\"} is 0")
	}

	// A real admission right after is hashed.
	createDeployment(t, c, ns, fixtures.Deployment("web", 1, fixtures.EnvFromTemplate("cfg")))
	expectHashed(t, c, ns, "web")
}

// TestNamePatternsCostNoListOfATenantsSources (issue 41, point 2): 100 Secrets with
// 240 KB of annotations each in a namespace confighash acts in, then 4 server-side dry
// runs at once of a Deployment that reloads with the Secrets named "s.*": each made a
// metadata list of the namespace (the webhook grew 253 MiB at 0579f85); the names now
// come from the cache, and only the matched Secrets' versions are read.
func TestNamePatternsCostNoListOfATenantsSources(t *testing.T) {
	c := sharedCluster(t)
	wh := startWebhook(t, c)
	ns := labeledNamespace(t, c)
	start := peakRSSMiB(t, wh.cmd.Process.Pid)
	annotation := strings.Repeat("x", 240_000)
	for i := range 100 {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%03d", i), Annotations: map[string]string{"tenant/padding": annotation}},
			StringData: map[string]string{"k": fmt.Sprint(i)}}
		if _, err := c.Client.CoreV1().Secrets(ns).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	d := fixtures.AnnotatedDeployment("web", map[string]string{confighash.ReloaderSecretReload: "s.*"}, fixtures.PlainTemplate())
	dryRun := func() (string, error) {
		got, err := c.Client.AppsV1().Deployments(ns).Create(t.Context(), d.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return "", err
		}
		return got.Spec.Template.Annotations[confighash.AnnotationHash], nil
	}
	// The cache lags the creates by milliseconds: a dry run matches all 100, and reads
	// the version of each, once it holds them.
	var want string
	waitFor(t, 30*time.Second, "a dry run to hash the 100 Secrets", func() bool {
		reads := wh.metric(t, `confighash_webhook_version_reads_total{kind="Secret"}`)
		hash, err := dryRun()
		want = hash
		return err == nil && hash != "" && wh.metric(t, `confighash_webhook_version_reads_total{kind="Secret"}`)-reads == 100
	})
	before := peakRSSMiB(t, wh.cmd.Process.Pid)
	began := time.Now()
	for range 3 {
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				hash, err := dryRun()
				if err != nil || hash == "" {
					t.Errorf("dry run: hash %q, error %v", hash, err)
				}
			})
		}
		wg.Wait()
	}
	after := peakRSSMiB(t, wh.cmd.Process.Pid)
	t.Logf("100 Secrets of 240 KB of annotations and a dry run that hashes them: peak RSS %.1f → %.1f MiB (+%.1f)", start, before, before-start)
	t.Logf("3 rounds of 4 dry runs at once of a Deployment reloading with s.* over them: %v; peak RSS %.1f → %.1f MiB (+%.1f; +%.1f in all; +253 MiB at 0579f85)",
		time.Since(began).Round(time.Millisecond), before, after, after-before, after-start)
	if growth := after - start; growth > 48 {
		t.Errorf("the webhook's peak RSS grew %.0f MiB, want under 48 MiB", growth)
	}
	if hash, err := dryRun(); err != nil || hash != want {
		t.Errorf("a dry run after: hash %q (error %v), want %q as before", hash, err, want)
	}
	// A real admission right after is hashed.
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "v"})
	createDeployment(t, c, ns, fixtures.Deployment("real", 1, fixtures.EnvFromTemplate("cfg")))
	expectHashed(t, c, ns, "real")
}

// expectHashed fails unless the Deployment's pod template carries a hash.
func expectHashed(t *testing.T, c *cluster.Cluster, ns, name string) {
	t.Helper()
	got, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Template.Annotations[confighash.AnnotationHash] == "" {
		t.Fatalf("the Deployment %s/%s was admitted without a hash", ns, name)
	}
}

// forgedReview is an AdmissionReview of the create of an opted-in Deployment in ns,
// padded with an annotation to size bytes.
func forgedReview(t *testing.T, ns string, size int) []byte {
	t.Helper()
	d := fixtures.AnnotatedDeployment("forged", map[string]string{confighash.AnnotationInject: "true"}, fixtures.EnvFromTemplate("cfg"))
	d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	d.Namespace = ns
	short := len(createReview(t, d))
	d.Annotations["padding"] = strings.Repeat("x", size-short)
	return createReview(t, d)
}

// createReview is the AdmissionReview the API server sends for the create of the
// Deployment, its uid first.
func createReview(t *testing.T, d *appsv1.Deployment) []byte {
	t.Helper()
	object, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	review, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID(d.Name), Operation: admissionv1.Create, Namespace: d.Namespace, Name: d.Name,
			Kind:     metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Resource: metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
			Object:   runtime.RawExtension{Raw: object},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return review
}

// postForged posts body and says what came back: the status and, for a 200, whether
// the review was shed (a warning that says so) or allowed.
func postForged(client *http.Client, url string, body []byte) string {
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return "error"
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprint(resp.StatusCode)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &review); err != nil || review.Response == nil || !review.Response.Allowed {
		return "200 unreadable"
	}
	if strings.Contains(strings.Join(review.Response.Warnings, " "), "too many admissions at once") {
		return "200 shed"
	}
	return "200 allowed"
}

func certPool(t *testing.T, pemCerts []byte) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCerts) {
		t.Fatal("no CA certificate")
	}
	return pool
}
