// Package certs is the webhook's TLS: the serving certificate cert-manager writes,
// reloaded when renewed (serving.go); without cert-manager, a self-signed authority and
// serving certificate kept in a Secret (authority.go, selfsigned.go); and the caBundle
// of the webhook configuration, patched to trust it (cabundle.go).
package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// KeyPair is a certificate with its private key, both PEM-encoded.
type KeyPair struct {
	CertPEM []byte
	KeyPEM  []byte

	cert *x509.Certificate
	key  crypto.Signer
}

// Authority is a self-signed certificate authority that issues leaf certificates.
type Authority struct {
	KeyPair
}

// NewAuthority creates a self-signed CA valid for the given duration.
func NewAuthority(commonName string, validity time.Duration) (*Authority, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	kp, err := sign(tmpl, nil, validity)
	if err != nil {
		return nil, fmt.Errorf("create certificate authority: %w", err)
	}
	return &Authority{KeyPair: *kp}, nil
}

// Leaf describes a certificate to issue.
type Leaf struct {
	CommonName    string
	Organizations []string
	DNSNames      []string
	IPs           []net.IP
	// Client issues a client-authentication certificate instead of a serving one.
	Client   bool
	Validity time.Duration
}

// Issue signs a new leaf certificate with a fresh key.
func (a *Authority) Issue(l Leaf) (*KeyPair, error) {
	usage := x509.ExtKeyUsageServerAuth
	if l.Client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: l.CommonName, Organization: l.Organizations},
		DNSNames:    l.DNSNames,
		IPAddresses: l.IPs,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	kp, err := sign(tmpl, &a.KeyPair, l.Validity)
	if err != nil {
		return nil, fmt.Errorf("issue certificate for %q: %w", l.CommonName, err)
	}
	return kp, nil
}

// sign creates a key and a certificate from tmpl, signed by parent or self-signed when
// parent is nil.
func sign(tmpl *x509.Certificate, parent *KeyPair, validity time.Duration) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generate serial: %w", err)
	}
	now := time.Now()
	tmpl.SerialNumber = serial
	// Backdate a little so a peer with a slightly slow clock accepts the certificate.
	tmpl.NotBefore = now.Add(-5 * time.Minute)
	tmpl.NotAfter = now.Add(validity)

	issuer, signer := tmpl, crypto.Signer(key)
	if parent != nil {
		issuer, signer = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, key.Public(), signer)
	if err != nil {
		return nil, fmt.Errorf("create certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return &KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		cert:    cert,
		key:     key,
	}, nil
}

// WriteFiles writes the pair as certName and keyName in dir, the key readable by its owner only.
func (kp *KeyPair) WriteFiles(dir, certName, keyName string) error {
	if err := os.WriteFile(filepath.Join(dir, certName), kp.CertPEM, 0o644); err != nil {
		return fmt.Errorf("write certificate: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, keyName), kp.KeyPEM, 0o600); err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	return nil
}
