package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/webhook"
)

// installCertManagerCRDs installs cert-manager's CRDs from the module the project
// depends on, so manifests using them can be validated by the API server.
func installCertManagerCRDs(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager").Output()
	if err != nil {
		t.Fatalf("locate the cert-manager module: %v", err)
	}
	crds := filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds")
	// Server-side: the CRDs are too large for client-side apply's annotation.
	if _, err := c.Kubectl(t.Context(), nil, "apply", "--server-side", "-f", crds); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(t.Context(), nil, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io"); err != nil {
		t.Fatal(err)
	}
}

// kustomize renders a kustomization with kubectl's built-in kustomize.
func kustomize(t *testing.T, c *cluster.Cluster, dir string) []byte {
	t.Helper()
	out, err := c.Kubectl(t.Context(), nil, "kustomize", filepath.Join("..", "..", dir))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestInstallManifestsAreAcceptedByTheAPIServer(t *testing.T) {
	c := cluster.Require(t, testCluster)
	installCertManagerCRDs(t, c)
	// A server-side dry run creates no namespace, so the namespaced objects need them.
	for _, ns := range []string{"confighash", "demo"} {
		if _, err := c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	rendered := kustomize(t, c, "manifests")
	if _, err := c.Kubectl(t.Context(), rendered, "apply", "--dry-run=server", "-f", "-"); err != nil {
		t.Fatalf("the API server refused the install: %v", err)
	}
	demo, err := exec.Command("cat", filepath.Join("..", "..", "manifests", "examples", "demo.yaml")).Output()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(t.Context(), demo, "apply", "--dry-run=server", "-f", "-"); err != nil {
		t.Fatalf("the API server refused the demo: %v", err)
	}
}

func TestInstalledWebhookConfigurationIsTheTestedOne(t *testing.T) {
	c := cluster.Require(t, testCluster)
	rendered := kustomize(t, c, "manifests")
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	var installed *admissionregistrationv1.MutatingWebhookConfiguration
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			break
		}
		if !bytes.Contains(raw, []byte(`"MutatingWebhookConfiguration"`)) {
			continue
		}
		installed = &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := json.Unmarshal(raw, installed); err != nil {
			t.Fatal(err)
		}
	}
	if installed == nil || len(installed.Webhooks) != 1 {
		t.Fatalf("the install has no MutatingWebhookConfiguration with one webhook: %+v", installed)
	}
	want := webhook.Configuration("confighash", "confighash", installed.Webhooks[0].ClientConfig)
	if !equality.Semantic.DeepEqual(installed.Webhooks, want.Webhooks) {
		got, _ := json.MarshalIndent(installed.Webhooks, "", "  ")
		exp, _ := json.MarshalIndent(want.Webhooks, "", "  ")
		t.Fatalf("manifests/webhook-configuration.yaml differs from webhook.Configuration, which the e2e tests use:\ninstalled: %s\nwant: %s", got, exp)
	}
}
