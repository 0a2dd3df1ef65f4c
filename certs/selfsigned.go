package certs

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// bootstrapValidity is long: without cert-manager nothing renews the certificate, and
// the webhook fails open when it expires.
const bootstrapValidity = 10 * 365 * 24 * time.Hour

// Bootstrap returns a serving certificate for dnsNames and the CA that signed it, from
// a kubernetes.io/tls Secret in namespace, creating both when the Secret is absent.
func Bootstrap(ctx context.Context, client kubernetes.Interface, namespace, secret string, dnsNames []string) (tls.Certificate, []byte, error) {
	s, err := GetOrCreateSecret(ctx, client, namespace, secret, func() (*corev1.Secret, error) {
		return newServingSecret(namespace, secret, dnsNames)
	})
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("read or create serving certificate secret %s/%s: %w", namespace, secret, err)
	}
	cert, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("serving certificate secret %s/%s: %w", namespace, secret, err)
	}
	return cert, s.Data["ca.crt"], nil
}

// GetOrCreateSecret reads the Secret, or creates it from build when it is absent.
// Replicas starting together race to create it; the losers read the winner's, so all
// of them end up with the same contents.
func GetOrCreateSecret(ctx context.Context, client kubernetes.Interface, namespace, name string, build func() (*corev1.Secret, error)) (*corev1.Secret, error) {
	secrets := client.CoreV1().Secrets(namespace)
	s, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		return s, err
	}
	created, err := build()
	if err != nil {
		return nil, err
	}
	s, err = secrets.Create(ctx, created, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return secrets.Get(ctx, name, metav1.GetOptions{})
	}
	return s, err
}

func newServingSecret(namespace, name string, dnsNames []string) (*corev1.Secret, error) {
	ca, err := NewAuthority("confighash-webhook-ca", bootstrapValidity)
	if err != nil {
		return nil, err
	}
	leaf, err := ca.Issue(Leaf{CommonName: dnsNames[0], DNSNames: dnsNames, Validity: bootstrapValidity})
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app.kubernetes.io/part-of": "confighash"}},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: leaf.CertPEM, corev1.TLSPrivateKeyKey: leaf.KeyPEM, "ca.crt": ca.CertPEM},
	}, nil
}

// SelfSigned serves a bootstrapped certificate and keeps its CA in the caBundle of the
// webhook configuration, for installs without cert-manager.
type SelfSigned struct {
	cert          tls.Certificate
	caPEM         []byte
	client        kubernetes.Interface
	configuration string
	retry         time.Duration
	failed        func(error)
	patched       atomic.Bool
}

// NewSelfSigned returns a certificate source for cert whose Run writes caPEM into the
// named MutatingWebhookConfiguration, retrying every retry (the configuration may be
// applied after the webhook starts) and reporting each failure to failed.
func NewSelfSigned(cert tls.Certificate, caPEM []byte, client kubernetes.Interface, configuration string, retry time.Duration, failed func(error)) *SelfSigned {
	return &SelfSigned{cert: cert, caPEM: caPEM, client: client, configuration: configuration, retry: retry, failed: failed}
}

// GetCertificate is for tls.Config.GetCertificate.
func (s *SelfSigned) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return &s.cert, nil
}

// Ready reports whether the API server has been given the CA.
func (s *SelfSigned) Ready() bool { return s.patched.Load() }

// Run sets the caBundle, retrying until it succeeds, then waits for ctx to end.
func (s *SelfSigned) Run(ctx context.Context) error {
	for {
		err := PatchCABundle(ctx, s.client, s.configuration, s.caPEM)
		if err == nil {
			s.patched.Store(true)
			<-ctx.Done()
			return nil
		}
		if s.failed != nil {
			s.failed(err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.retry):
		}
	}
}
