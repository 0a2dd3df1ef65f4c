package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"

	"github.com/confighash/confighash/tests/cluster"
)

var testCluster *cluster.Cluster

func TestMain(m *testing.M) { cluster.Main(m, &testCluster) }

// waitTimeout bounds every wait for cert-manager to act; each takes about a second.
const waitTimeout = 60 * time.Second

// injectAnnotation names the Certificate whose CA the injector copies into caBundle.
const injectAnnotation = "cert-manager.io/inject-ca-from"

func TestServingCertificateIsIssuedInjectedAndRenewed(t *testing.T) {
	c := cluster.Require(t, testCluster)
	ctx := t.Context()
	if err := c.InstallCertManagerCRDs(t.Context()); err != nil {
		t.Fatal(err)
	}
	cm := startCertManager(t, c)
	cmc, err := cmclient.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := c.CreateNamespace(ctx, "certmanager", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteNamespace(context.Background(), ns) })

	// The webhook configurations come first: the injector fills them once the
	// Certificate's Secret exists.
	injectFrom := ns + "/serving"
	webhooks := createWebhookConfigurations(t, c, ns, injectFrom)

	// The chain the manifests use: a self-signed issuer (here a ClusterIssuer), a CA
	// Certificate, a CA Issuer from its Secret, and the serving Certificate.
	selfSigned := &cmapi.ClusterIssuer{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-selfsigned"},
		Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}},
	}
	if _, err := cmc.CertmanagerV1().ClusterIssuers().Create(ctx, selfSigned, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmc.CertmanagerV1().ClusterIssuers().Delete(context.Background(), selfSigned.Name, metav1.DeleteOptions{})
	})
	create(t, cmc, ns, &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Name: "ca"},
		Spec: cmapi.CertificateSpec{
			IsCA: true, CommonName: "confighash-test-ca", SecretName: "ca",
			PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm},
			IssuerRef:  cmmeta.IssuerReference{Kind: cmapi.ClusterIssuerKind, Name: selfSigned.Name},
		},
	})
	if _, err := cmc.CertmanagerV1().Issuers(ns).Create(ctx, &cmapi.Issuer{
		ObjectMeta: metav1.ObjectMeta{Name: "ca"},
		Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: "ca"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dnsName := "webhook." + ns + ".svc"
	create(t, cmc, ns, &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Name: "serving"},
		Spec: cmapi.CertificateSpec{
			DNSNames: []string{dnsName}, SecretName: "serving",
			Duration:   &metav1.Duration{Duration: time.Hour},
			PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm},
			IssuerRef:  cmmeta.IssuerReference{Kind: cmapi.IssuerKind, Name: "ca"},
		},
	})

	cm.eventually(t, "the serving Certificate is Ready", func(ctx context.Context) (bool, error) {
		return ready(ctx, cmc, ns, "serving", 1)
	})
	ca := parseCert(t, secretData(t, c, ns, "ca", "tls.crt"))
	if !ca.IsCA {
		t.Fatalf("the CA Certificate's tls.crt is not a CA: %s", ca.Subject)
	}
	first := secretData(t, c, ns, "serving", "tls.crt")
	verify(t, first, ca, dnsName)
	if got := parseCert(t, secretData(t, c, ns, "serving", "ca.crt")); !got.Equal(ca) {
		t.Errorf("the serving Secret's ca.crt is %s, want the CA %s", got.Subject, ca.Subject)
	}
	for kind, bundle := range webhooks {
		cm.eventually(t, "the CA is injected into the "+kind, func(ctx context.Context) (bool, error) {
			b, err := bundle(ctx)
			return err == nil && len(b) > 0 && parseCert(t, b).Equal(ca), err
		})
	}

	// Renew as `cmctl renew` does: the Issuing condition, set through the status,
	// again on a conflict with cert-manager's own status writes.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crt, err := cmc.CertmanagerV1().Certificates(ns).Get(ctx, "serving", metav1.GetOptions{})
		if err != nil {
			return err
		}
		apiutil.SetCertificateCondition(crt, crt.Generation, cmapi.CertificateConditionIssuing, cmmeta.ConditionTrue,
			"ManuallyTriggered", "Certificate re-issuance manually triggered")
		_, err = cmc.CertmanagerV1().Certificates(ns).UpdateStatus(ctx, crt, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	cm.eventually(t, "the renewed serving Certificate is Ready", func(ctx context.Context) (bool, error) {
		return ready(ctx, cmc, ns, "serving", 2)
	})
	renewed := secretData(t, c, ns, "serving", "tls.crt")
	if bytes.Equal(renewed, first) {
		t.Fatal("renewal left tls.crt unchanged")
	}
	verify(t, renewed, ca, dnsName)
	// caBundle holds the CA, not the leaf, so a renewal leaves it as it was.
	for kind, bundle := range webhooks {
		if b, err := bundle(ctx); err != nil || !parseCert(t, b).Equal(ca) {
			t.Errorf("after renewal, the %s's caBundle is not the CA (%v)", kind, err)
		}
	}
}

// certManager is this command, built and running beside the control plane.
type certManager struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error // the exit, once done is closed
}

// startCertManager builds this package and runs it until the test ends, when it
// stops it with SIGTERM and checks that it exits cleanly.
func startCertManager(t *testing.T, c *cluster.Cluster) *certManager {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "certmanager")
	// The test binary has just compiled the same packages: this mostly links.
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cm := &certManager{logPath: filepath.Join(dir, "certmanager.log"), done: make(chan struct{})}
	logFile, err := os.Create(cm.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cm.cmd = exec.Command(bin, "--kubeconfig="+c.Kubeconfig)
	cm.cmd.Stdout, cm.cmd.Stderr = logFile, logFile
	// A test that dies leaves no cert-manager behind.
	cm.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cm.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		cm.err = cm.cmd.Wait()
		close(cm.done)
	}()
	t.Cleanup(func() { cm.stop(t) })
	return cm
}

// stop sends SIGTERM and expects a clean exit within the command's shutdown grace.
func (cm *certManager) stop(t *testing.T) {
	if err := syscall.Kill(cm.cmd.Process.Pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Errorf("signal certmanager: %v", err)
	}
	select {
	case <-cm.done:
		if cm.err != nil {
			t.Errorf("certmanager exited after SIGTERM with %v", cm.err)
		}
	case <-time.After(shutdownGrace + 10*time.Second):
		t.Errorf("certmanager did not exit within %s of SIGTERM", shutdownGrace+10*time.Second)
		_ = cm.cmd.Process.Kill()
		<-cm.done
	}
	if t.Failed() {
		t.Logf("certmanager log (%s):\n%s", cm.logPath, cluster.LogTail(cm.logPath, 40))
	}
}

// eventually waits until cond holds, failing fast if the command has exited.
func (cm *certManager) eventually(t *testing.T, what string, cond wait.ConditionWithContextFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case <-cm.done:
			return false, fmt.Errorf("certmanager exited: %v", cm.err)
		default:
		}
		return cond(ctx)
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func create(t *testing.T, cmc cmclient.Interface, ns string, crt *cmapi.Certificate) {
	t.Helper()
	if _, err := cmc.CertmanagerV1().Certificates(ns).Create(t.Context(), crt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// ready reports whether the Certificate is Ready at the given revision, the count of
// its issuances.
func ready(ctx context.Context, cmc cmclient.Interface, ns, name string, revision int) (bool, error) {
	crt, err := cmc.CertmanagerV1().Certificates(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	return apiutil.CertificateHasCondition(crt, cmapi.CertificateCondition{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionTrue}) &&
		crt.Status.Revision != nil && *crt.Status.Revision == revision, nil
}

func secretData(t *testing.T, c *cluster.Cluster, ns, name, key string) []byte {
	t.Helper()
	s, err := c.Client.CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Data[key]) == 0 {
		t.Fatalf("Secret %s/%s has no %s", ns, name, key)
	}
	return s.Data[key]
}

// parseCert returns the first certificate of a PEM bundle.
func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("no PEM block in %q", data)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// verify checks that the leaf is signed by ca and serves dnsName.
func verify(t *testing.T, leafPEM []byte, ca *x509.Certificate, dnsName string) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := parseCert(t, leafPEM).Verify(x509.VerifyOptions{Roots: roots, DNSName: dnsName}); err != nil {
		t.Errorf("the serving certificate does not verify against the CA: %v", err)
	}
}

// createWebhookConfigurations creates a mutating and a validating webhook
// configuration annotated for injection from the Certificate injectFrom, and returns,
// by kind, functions that read their caBundle.
func createWebhookConfigurations(t *testing.T, c *cluster.Cluster, ns, injectFrom string) map[string]func(context.Context) ([]byte, error) {
	t.Helper()
	ctx := t.Context()
	meta := metav1.ObjectMeta{Name: ns + "-inject", Annotations: map[string]string{injectAnnotation: injectFrom}}
	// No rules: the API server never calls it, so its unreachable URL does no harm.
	url := "https://127.0.0.1:1/never-called"
	client := admissionregistrationv1.WebhookClientConfig{URL: &url}
	sideEffects := ptr.To(admissionregistrationv1.SideEffectClassNone)
	mutations := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := mutations.Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: meta,
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "never.confighash.test", ClientConfig: client, SideEffects: sideEffects, AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	validations := c.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := validations.Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: meta,
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "never.confighash.test", ClientConfig: client, SideEffects: sideEffects, AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, err := range []error{
			mutations.Delete(context.Background(), meta.Name, metav1.DeleteOptions{}),
			validations.Delete(context.Background(), meta.Name, metav1.DeleteOptions{}),
		} {
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete webhook configuration: %v", err)
			}
		}
	})
	return map[string]func(context.Context) ([]byte, error){
		"MutatingWebhookConfiguration": func(ctx context.Context) ([]byte, error) {
			w, err := mutations.Get(ctx, meta.Name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return w.Webhooks[0].ClientConfig.CABundle, nil
		},
		"ValidatingWebhookConfiguration": func(ctx context.Context) ([]byte, error) {
			w, err := validations.Get(ctx, meta.Name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return w.Webhooks[0].ClientConfig.CABundle, nil
		},
	}
}
