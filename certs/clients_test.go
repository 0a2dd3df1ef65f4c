package certs

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestRequiredClientsAreOnlyThoseTheCASignedWithAnAllowedName(t *testing.T) {
	ca, err := NewAuthority("client-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewAuthority("other-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	server.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	if err := RequireClients(server.TLS, caFile, []string{"kube-apiserver"}); err != nil {
		t.Fatal(err)
	}
	server.StartTLS()
	defer server.Close()

	client := func(a *Authority, name string) *tls.Certificate {
		kp, err := a.Issue(Leaf{CommonName: name, Client: true, Validity: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return &pair
	}
	for _, tc := range []struct {
		what string
		cert *tls.Certificate
		ok   bool
	}{
		{"a certificate of the CA with an allowed name is answered", client(ca, "kube-apiserver"), true},
		{"no certificate is refused", nil, false},
		{"a certificate of another CA is refused", client(other, "kube-apiserver"), false},
		{"a certificate of the CA with another name is refused", client(ca, "someone"), false},
	} {
		t.Run(tc.what, func(t *testing.T) {
			roots := x509.NewCertPool()
			roots.AddCert(server.Certificate())
			cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12, ServerName: "example.com"}
			if tc.cert != nil {
				cfg.Certificates = []tls.Certificate{*tc.cert}
			}
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DialContext: (&net.Dialer{}).DialContext}}
			resp, err := c.Get(server.URL)
			if err == nil {
				resp.Body.Close()
			}
			if (err == nil) != tc.ok {
				t.Errorf("answered: %v, want %v (%v)", err == nil, tc.ok, err)
			}
		})
	}
}
