package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"time"

	cmtls "github.com/cert-manager/cert-manager/pkg/server/tls"
)

// Reloads are reported through these hooks; the ops side turns them into logs and
// metrics. cert-manager's source logs reloads only at trace level.
type Hooks struct {
	// Loaded is called with each new certificate served.
	Loaded func(leaf *x509.Certificate)
	// Failed is called when the source gave up reading the files; it is restarted.
	Failed func(err error)
}

// ServingCertificate serves the certificate and key in two files and reloads them when
// they change, as when kubelet renews a mounted cert-manager Secret. Mount the Secret
// as a directory, never with subPath: a subPath mount is never updated.
type ServingCertificate struct {
	source *cmtls.FileCertificateSource
	hooks  Hooks
	poll   time.Duration
}

// NewServingCertificate returns a reloading certificate for certFile and keyFile,
// polled every poll.
func NewServingCertificate(certFile, keyFile string, poll time.Duration, hooks Hooks) *ServingCertificate {
	return &ServingCertificate{
		source: &cmtls.FileCertificateSource{CertPath: certFile, KeyPath: keyFile, UpdateInterval: poll},
		hooks:  hooks,
		poll:   poll,
	}
}

// GetCertificate is for tls.Config.GetCertificate.
func (s *ServingCertificate) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.source.GetCertificate(hello)
}

// Ready reports whether a certificate and key are loaded.
func (s *ServingCertificate) Ready() bool {
	// Healthy() reads without the source's lock; GetCertificate takes it.
	c, err := s.source.GetCertificate(nil)
	return err == nil && c != nil
}

// Run polls the files until ctx is done. The source gives up after a number of failed
// reads and counts them over its whole run, so it is restarted, keeping the last good
// certificate, rather than taking the server down.
func (s *ServingCertificate) Run(ctx context.Context) error {
	go s.watchLoaded(ctx)
	for {
		err := s.source.Start(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && s.hooks.Failed != nil {
			s.hooks.Failed(err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.poll):
		}
	}
}

// watchLoaded reports each new certificate the source serves.
func (s *ServingCertificate) watchLoaded(ctx context.Context) {
	var current *tls.Certificate
	ticker := time.NewTicker(s.poll / 2)
	defer ticker.Stop()
	for {
		if c, err := s.source.GetCertificate(nil); err == nil && c != current {
			current = c
			if s.hooks.Loaded != nil && len(c.Certificate) > 0 {
				if leaf, err := x509.ParseCertificate(c.Certificate[0]); err == nil {
					s.hooks.Loaded(leaf)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
