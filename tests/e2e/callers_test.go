package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/fixtures"
)

// TestAForgedReviewFromAnotherAddressLearnsNoName (issue 41, point 4): a review
// claiming namespace "victim", with a Reloader name pattern that matches every Secret
// there, POSTed to the admission port from an address the API server does not call
// from (127.0.0.2; the local API server calls from 127.0.0.1, the endpoint of
// default/kubernetes), is refused before it is read and names nothing: it named every
// Secret of victim, with digests that tell when each changes. The same review from the
// API server's address is answered, and a Deployment created through the API server is
// hashed: the check refuses no real admission. Where no NetworkPolicy is enforced,
// this is what keeps a pod out.
func TestAForgedReviewFromAnotherAddressLearnsNoName(t *testing.T) {
	c := sharedCluster(t)
	wh := startWebhook(t, c)
	victim := labeledNamespace(t, c)
	for _, name := range []string{"prod-db-password", "stripe-live-key"} {
		createSecret(t, c, victim, name, map[string]string{"k": "0"})
	}
	createConfigMap(t, c, victim, "cfg", map[string]string{"k": "0"})
	createDeployment(t, c, victim, fixtures.Deployment("web", 1, fixtures.EnvFromTemplate("cfg")))
	if templateHash(t, c, victim, "web") == "" {
		t.Fatal("no hash: the API server's admission was refused")
	}

	forged := fixtures.AnnotatedDeployment("probe", map[string]string{confighash.ReloaderSecretReload: "[a-z0-9.-]+"}, fixtures.EnvFromTemplate("cfg"))
	forged.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	forged.Namespace = victim
	review := createReview(t, forged)
	post := func(from string) (int, string) {
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(wh.ca.CertPEM)
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return dialer.DialContext(ctx, network, addr)
			},
		}}
		resp, err := client.Post("https://"+wh.addr+"/mutate", "application/json", bytes.NewReader(review))
		if err != nil {
			t.Fatalf("post from %s: %v", from, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// The patch is base64 in the review's response: decode what came back to look in it.
	learned := func(body string) string {
		var r admissionv1.AdmissionReview
		if json.Unmarshal([]byte(body), &r) == nil && r.Response != nil {
			return body + string(r.Response.Patch)
		}
		return body
	}

	status, body := post("127.0.0.2")
	if status != http.StatusForbidden {
		t.Errorf("a review from 127.0.0.2: status %d, want 403", status)
	}
	for _, name := range []string{"prod-db-password", "stripe-live-key"} {
		if strings.Contains(learned(body), name) {
			t.Errorf("a review from 127.0.0.2 learned the name %s: %s", name, body)
		}
	}
	if got := wh.metric(t, `confighash_webhook_bad_requests_total{reason="caller"}`); got != 1 {
		t.Errorf(`confighash_webhook_bad_requests_total{reason="caller"} = %v, want 1`, got)
	}
	// From the API server's address, the same review is answered as the API server's.
	status, body = post("127.0.0.1")
	if status != http.StatusOK || !strings.Contains(learned(body), "stripe-live-key") {
		t.Errorf("the review from the API server's address: status %d, want 200 and a record naming the Secrets the pattern matches: %s", status, body)
	}
}
