package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/confighash/confighash/certs"
	"github.com/confighash/confighash/webhook"
)

const webhookSummary = "confighash webhook: the mutating admission webhook that writes the config hash."

type webhookConfig struct {
	listen, ops          string
	certFile, keyFile    string
	certPoll             time.Duration
	kubeconfig           string
	qps                  float64
	burst                int
	namespace, keySecret string
	hashKeyFile          string
	logFormat, logLevel  string
	shutdownTimeout      time.Duration
}

func (c *webhookConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.listen, "listen-address", ":8443", "address of the HTTPS admission server")
	fs.StringVar(&c.ops, "ops-address", ":8080", "address of the plain-HTTP server for /healthz, /readyz and /metrics")
	fs.StringVar(&c.certFile, "tls-cert-file", "/etc/confighash/tls/tls.crt", "serving certificate (PEM); reloaded when it changes")
	fs.StringVar(&c.keyFile, "tls-key-file", "/etc/confighash/tls/tls.key", "serving certificate's private key (PEM)")
	fs.DurationVar(&c.certPoll, "tls-poll-interval", 10*time.Second, "how often to check the certificate files for a renewal")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses the in-cluster service account")
	fs.Float64Var(&c.qps, "kube-api-qps", 0, "client-side limit of queries per second to the API server; 0: none, the API server's priority and fairness applies (a limit delays every admission once reached)")
	fs.IntVar(&c.burst, "kube-api-burst", 100, "burst above --kube-api-qps, when it is set")
	fs.StringVar(&c.namespace, "namespace", "confighash", "namespace confighash is installed in, holding the hash key Secret")
	fs.StringVar(&c.keySecret, "hash-key-secret", "confighash-hash-key", "Secret holding the HMAC key; created with a random key when absent")
	fs.StringVar(&c.hashKeyFile, "hash-key-file", "", "file holding the HMAC key (at least 32 bytes), instead of the Secret")
	fs.StringVar(&c.logFormat, "log-format", "json", "log format: json or console")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 20*time.Second, "how long in-flight admissions may take to finish on SIGTERM")
}

// restConfig returns the client configuration from a kubeconfig file or the cluster.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}

func runWebhook(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg webhookConfig
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	cfg.flags(fs)
	if err := parseFlags(fs, args, stdout, webhookSummary); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	log, lr, err := newLogger(stderr, cfg.logFormat, cfg.logLevel, "webhook")
	if err != nil {
		return err
	}
	ctx = logr.NewContext(ctx, lr)

	rc, err := restConfig(cfg.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubernetes client configuration: %w", err)
	}
	rc.UserAgent = "confighash-webhook/" + version
	// Protobuf halves the cost of the live reads on both ends compared with JSON.
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	rc.QPS, rc.Burst = float32(cfg.qps), cfg.burst
	if cfg.qps == 0 {
		rc.QPS = -1 // client-go's "no limit"; 0 would mean its default of 5
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	key, err := loadKey(ctx, client, cfg.hashKeyFile, cfg.namespace, cfg.keySecret)
	if err != nil {
		return err
	}

	reg := newRegistry()
	recorder, err := webhook.NewPrometheusRecorder(reg)
	if err != nil {
		return err
	}
	certMetrics := newCertMetrics(reg)
	serving := certs.NewServingCertificate(cfg.certFile, cfg.keyFile, cfg.certPoll, certs.Hooks{
		Loaded: func(leaf *x509.Certificate) {
			certMetrics.loaded(leaf)
			log.Info().Str("subject", leaf.Subject.String()).Time("not_after", leaf.NotAfter).Msg("serving certificate loaded")
		},
		Failed: func(err error) {
			log.Error().Err(err).Msg("serving certificate files unreadable; keeping the last one")
		},
	})
	sources := webhook.NewSourceCache(client)
	reader := webhook.NewCachedReader(sources, webhook.NewLiveReader(client, recorder), recorder)
	handler, err := webhook.NewHandler(webhook.NewMutator(key, reader, recorder), log)
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("/mutate", handler)
	admission := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       90 * time.Second,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: serving.GetCertificate},
		// HTTP/1.1 only: the API server's webhook client does not need HTTP/2, and
		// HTTP/2 brings its own resource-exhaustion issues.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	ops := &http.Server{Handler: opsHandler(reg, serving.Ready, sources.Synced), ReadHeaderTimeout: 5 * time.Second}
	admissionLn, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen for admissions: %w", err)
	}
	opsLn, err := net.Listen("tcp", cfg.ops)
	if err != nil {
		return fmt.Errorf("listen for ops: %w", err)
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serving.Run(ctx) })
	g.Go(func() error { return sources.Run(ctx) })
	g.Go(func() error {
		log.Info().Str("address", admissionLn.Addr().String()).Msg("admission server running")
		defer log.Info().Msg("admission server stopped")
		return serve(ctx, admission, admissionLn, true, cfg.shutdownTimeout)
	})
	g.Go(func() error {
		log.Info().Str("address", opsLn.Addr().String()).Msg("ops server running")
		defer log.Info().Msg("ops server stopped")
		return serve(ctx, ops, opsLn, false, cfg.shutdownTimeout)
	})
	return g.Wait()
}

// certMetrics reports serving-certificate reloads and the current certificate's expiry.
type certMetrics struct {
	reloads prometheus.Counter
	expiry  prometheus.Gauge
}

func newCertMetrics(reg prometheus.Registerer) *certMetrics {
	m := &certMetrics{
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "confighash", Name: "certificate_loads_total",
			Help: "Serving certificates loaded, the first one included.",
		}),
		expiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "confighash", Name: "certificate_expiry_timestamp_seconds",
			Help: "Expiry of the serving certificate in use, as a Unix time.",
		}),
	}
	reg.MustRegister(m.reloads, m.expiry)
	return m
}

func (m *certMetrics) loaded(leaf *x509.Certificate) {
	m.reloads.Inc()
	m.expiry.Set(float64(leaf.NotAfter.Unix()))
}
