package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
)

// RequireClients makes the TLS server accept only clients with a certificate signed by
// a CA of caFile (PEM) and, when names is not empty, named by one of them (its common
// name or a DNS name). The API server presents one to webhooks where an
// AdmissionConfiguration gives it one (docs/install.md); anyone else who reaches the
// port is refused during the handshake, before a request is read.
func RequireClients(cfg *tls.Config, caFile string, names []string) error {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("read client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("client CA %s holds no PEM certificate", caFile)
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	if len(names) == 0 {
		return nil
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
			return errors.New("no verified client certificate")
		}
		leaf := cs.VerifiedChains[0][0]
		if slices.Contains(names, leaf.Subject.CommonName) || slices.ContainsFunc(leaf.DNSNames, func(n string) bool { return slices.Contains(names, n) }) {
			return nil
		}
		return fmt.Errorf("client certificate %q is not one of the allowed names", leaf.Subject.CommonName)
	}
	return nil
}
