package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/certs"
	"github.com/confighash/confighash/metrics"
	"github.com/confighash/confighash/namespaces"
	"github.com/confighash/confighash/sourcecache"
	"github.com/confighash/confighash/watches"
	"github.com/confighash/confighash/webhook"
)

const webhookSummary = "confighash webhook: the mutating admission webhook that writes the config hash."

type webhookConfig struct {
	common
	listen            string
	certFile, keyFile string
	certPoll          time.Duration
	selfSignedSecret  string
	dnsNames          string
	configuration     string
	shutdownDelay     time.Duration
	clientCAFile      string
	clientNames       string
	snapshotMaxCount  int
	snapshotMaxBytes  int64
	maxInFlight       int
	callers           string
	maxInFlightBytes  int64
	watcherLease      string
	restarterImage    string
	restartInPlace    bool
}

func (c *webhookConfig) flags(fs *flag.FlagSet) {
	c.common.flags(fs, 20*time.Second)
	fs.DurationVar(&c.shutdownDelay, "shutdown-delay", 5*time.Second, "on SIGTERM, how long to go on serving, not ready, before closing: the Service sends admissions to a terminating pod until kube-proxy has removed it")
	fs.StringVar(&c.listen, "listen-address", ":8443", "address of the HTTPS admission server")
	fs.StringVar(&c.certFile, "tls-cert-file", "/etc/confighash/tls/tls.crt", "serving certificate (PEM); reloaded when it changes")
	fs.StringVar(&c.keyFile, "tls-key-file", "/etc/confighash/tls/tls.key", "serving certificate's private key (PEM)")
	fs.DurationVar(&c.certPoll, "tls-poll-interval", 10*time.Second, "how often to check the certificate files for a renewal")
	fs.StringVar(&c.selfSignedSecret, "tls-self-signed-secret", "", "without cert-manager: keep a self-signed CA and serving certificate in this Secret of --namespace, created when absent, and write the CA into the caBundle of --webhook-configuration; the --tls-*-file flags are then unused")
	fs.StringVar(&c.dnsNames, "tls-dns-names", "", "comma-separated names of the self-signed certificate; default: the Service confighash-webhook.<namespace>.svc and .svc.cluster.local")
	fs.StringVar(&c.clientCAFile, "client-ca-file", "", "CA bundle (PEM) of the client certificate the API server presents (AdmissionConfiguration); when set, a caller without a certificate it signed is refused before anything is read")
	fs.StringVar(&c.clientNames, "client-allowed-names", "", "comma-separated common or DNS names a client certificate must carry, with --client-ca-file; empty: any it signed")
	fs.IntVar(&c.snapshotMaxCount, "snapshot-max-count", 1000, "most snapshots of pinned workloads per namespace; beyond it a pinned workload is admitted unpinned, with a warning; 0: no cap")
	fs.Int64Var(&c.snapshotMaxBytes, "snapshot-max-bytes", 64<<20, "most bytes of data the snapshots of pinned workloads hold per namespace (keys and values); beyond it a pinned workload is admitted unpinned, with a warning; 0: no cap")
	fs.StringVar(&c.callers, "admission-callers", "", "addresses or CIDRs, comma-separated, the API server may call the webhook from besides those it finds (the endpoints of default/kubernetes, kube-system's konnectivity agents, the nodes' host addresses); a review from any other address is refused before it is read. \"any\": every address (the NetworkPolicy alone keeps callers out); unused with --client-ca-file")
	fs.IntVar(&c.maxInFlight, "admission-max-in-flight", webhook.DefaultMaxInFlight, "most admissions handled at once; beyond it one is answered at once, allowed unchanged with a warning, before its body is read, and the watcher updates the workload")
	fs.Int64Var(&c.maxInFlightBytes, "admission-max-in-flight-bytes", webhook.DefaultMaxInFlightBytes, fmt.Sprintf("most bytes of admission requests handled at once (a request of unknown length counts as %d, the largest read); beyond it one is answered as beyond --admission-max-in-flight; at least %d", webhook.MaxBodyBytes, webhook.MaxBodyBytes))
	fs.StringVar(&c.watcherLease, "watcher-lease", "confighash-watcher", "the watcher's leader Lease in --namespace (its --leader-elect-lease-name), which says what forms of the sources record the watcher that leads reads: only those are written")
	fs.BoolVar(&c.restartInPlace, "restart-in-place", true, "make the pods that ask for it ("+confighash.AnnotationRestart+`: "in-place"`+") restartable in place, with the restarter; false: their workloads roll; the webhook and the watcher must be given the same")
	fs.StringVar(&c.restarterImage, "restarter-image", "", "image of the restarter, the sidecar given to the pods restarted in place (confighash.dev/restart: in-place), which runs `confighash restarter`; empty: the image of the webhook's own container, read once at start from its pod ($POD_NAME in $POD_NAMESPACE); not found, no pod is made restartable in place and its workload rolls")
	fs.StringVar(&c.configuration, "webhook-configuration", "confighash", "the MutatingWebhookConfiguration whose caBundle a self-signed webhook sets")
}

// certSource serves the webhook's certificate.
type certSource interface {
	GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
	Ready() bool
	Run(context.Context) error
}

// servingCertificate returns the certificate from files cert-manager renews, or a
// self-signed one when asked.
func (c *webhookConfig) servingCertificate(e *env, metrics *certMetrics) (certSource, error) {
	log := e.log
	if c.selfSignedSecret == "" {
		return certs.NewServingCertificate(c.certFile, c.keyFile, c.certPoll, certs.Hooks{
			Loaded: func(leaf *x509.Certificate) {
				metrics.loaded(leaf)
				log.Info().Str("subject", leaf.Subject.String()).Time("not_after", leaf.NotAfter).Msg("serving certificate loaded")
			},
			Failed: func(err error) {
				log.Error().Err(err).Msg("serving certificate files unreadable; keeping the last one")
			},
		}), nil
	}
	svc := "confighash-webhook." + c.namespace + ".svc"
	names := []string{svc, svc + ".cluster.local"}
	if c.dnsNames != "" {
		names = strings.Split(c.dnsNames, ",")
	}
	cert, caPEM, err := certs.Bootstrap(e.ctx, e.client, c.namespace, c.selfSignedSecret, names)
	if err != nil {
		return nil, err
	}
	if leaf, err := x509.ParseCertificate(cert.Certificate[0]); err == nil {
		metrics.loaded(leaf)
		log.Info().Str("subject", leaf.Subject.String()).Time("not_after", leaf.NotAfter).Msg("self-signed serving certificate loaded")
	}
	return certs.NewSelfSigned(cert, caPEM, e.client, c.configuration, 5*time.Second, func(err error) {
		log.Warn().Err(err).Msg("could not set the webhook configuration's caBundle; retrying")
	}), nil
}

func runWebhook(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg webhookConfig
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	cfg.flags(fs)
	if done, err := parse(fs, args, stdout, webhookSummary); done || err != nil {
		return err
	}
	if cfg.certPoll <= 0 {
		return fmt.Errorf("--tls-poll-interval must be positive, got %v", cfg.certPoll)
	}
	if cfg.snapshotMaxCount < 0 || cfg.snapshotMaxBytes < 0 {
		return fmt.Errorf("--snapshot-max-count and --snapshot-max-bytes must not be negative, got %d and %d", cfg.snapshotMaxCount, cfg.snapshotMaxBytes)
	}
	if cfg.maxInFlight < 1 || cfg.maxInFlightBytes < webhook.MaxBodyBytes {
		return fmt.Errorf("--admission-max-in-flight must be at least 1 and --admission-max-in-flight-bytes at least %d, got %d and %d", webhook.MaxBodyBytes, cfg.maxInFlight, cfg.maxInFlightBytes)
	}
	if cfg.restarterImage != strings.TrimSpace(cfg.restarterImage) {
		// The API server would refuse every pod given such a restarter.
		return fmt.Errorf("--restarter-image %q: leading or trailing space", cfg.restarterImage)
	}
	e, err := cfg.connect(ctx, "webhook", stderr)
	if err != nil {
		return err
	}
	ctx, log, client, reg := e.ctx, e.log, e.client, e.reg
	recorder, err := webhook.NewPrometheusRecorder(reg)
	if err != nil {
		return err
	}
	certMetrics, err := newCertMetrics(reg)
	if err != nil {
		return err
	}
	serving, err := cfg.servingCertificate(e, certMetrics)
	if err != nil {
		return err
	}
	set, err := cfg.settings()
	if err != nil {
		return err
	}
	// A namespace confighash starts acting in is read again where it was kept as keys
	// alone; until then, reviews there read live.
	var relists *watches.Relists
	gate, err := namespaces.NewGate(client, set.selectors, cfg.watched, func(ns string) {
		if relists != nil && relists.Needed(ns) {
			relists.Add(ns)
		}
	}, log)
	if err != nil {
		return err
	}
	overs, err := watches.NewOvers(reg, "webhook", log)
	if err != nil {
		return err
	}
	door := watches.Door{Namespaces: cfg.watched, Gate: gate, Over: overs.Over, Turns: watches.NewTurns(watches.ListsAtOnce)}
	csi, cached, err := cfg.csi(e)
	if err != nil {
		return err
	}
	sources, err := sourcecache.New(client, door, set.sources, cached)
	if err != nil {
		return err
	}
	meta, err := metadata.NewForConfig(e.rest)
	if err != nil {
		return fmt.Errorf("kubernetes metadata client: %w", err)
	}
	snapshotCap, err := webhook.NewSnapshotCap(client, door, cfg.snapshotMaxCount, cfg.snapshotMaxBytes)
	if err != nil {
		return err
	}
	sets := sources.Informers()
	maps.Copy(sets, snapshotCap.Informers())
	relists = watches.NewRelists(sets, log)
	// With a client certificate the API server proves who it is; otherwise its address
	// is what tells it from a pod posting forged reviews.
	var callers *webhook.Callers
	if cfg.clientCAFile == "" && cfg.callers != "any" {
		extra, err := webhook.ParseCallers(cfg.callers)
		if err != nil {
			return fmt.Errorf("--admission-callers: %w", err)
		}
		callers = webhook.NewCallers(client, extra, log)
	}
	restarterImage := cfg.restarter(ctx, client, cfg.restartInPlace && inPlaceServed(ctx, client, log), log)
	lease := webhook.NewWatcherLease(client, cfg.namespace, cfg.watcherLease, log)
	m := metrics.On(reg)
	m.GaugeFunc("confighash_webhook_watcher_lease_readable",
		"1 once the watcher's leader Lease has been read (or found absent), 0 while it cannot be: the webhook then writes the record form every release reads.",
		func() float64 { return boolGauge(lease.Readable()) })
	if err := m.Err(); err != nil {
		return err
	}
	reader := webhook.NewCachedReader(sources, webhook.NewLiveReader(client, door, set.sources, recorder, csi), webhook.NewVersions(meta, door, set.sources, webhook.Timeout, recorder), recorder)
	mutator, err := webhook.New(webhook.Config{
		Key: e.key, Vocabulary: set.vocabulary, Kinds: set.kinds, Reader: reader, Gate: gate, Pacing: set.pacing, Lifecycle: set.lifecycle, Metrics: recorder, Log: log,
		Snapshots: webhook.NewSnapshots(e.client, e.key, snapshotCap), Callers: callers, Writes: lease.Writes, MaxInFlight: cfg.maxInFlight, MaxInFlightBytes: cfg.maxInFlightBytes,
		RestarterImage: restarterImage,
	})
	if err != nil {
		return err
	}
	mux, err := webhook.NewServeMux(mutator, log)
	if err != nil {
		return err
	}
	var draining atomic.Bool
	admission := &http.Server{
		Handler:           closeWhenDraining(mux, &draining),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       90 * time.Second,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: serving.GetCertificate},
		// HTTP/1.1 only: the API server's webhook client does not need HTTP/2, and
		// HTTP/2 brings its own resource-exhaustion issues.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	if cfg.clientCAFile != "" {
		names := strings.FieldsFunc(cfg.clientNames, func(r rune) bool { return r == ',' || r == ' ' })
		if err := certs.RequireClients(admission.TLSConfig, cfg.clientCAFile, names); err != nil {
			return fmt.Errorf("--client-ca-file: %w", err)
		}
	}
	admissionServer, err := listen("admission", cfg.listen, admission, true)
	if err != nil {
		return err
	}
	ready := []func() bool{serving.Ready, sources.Synced, snapshotCap.Synced, gate.HasSynced, lease.Synced, func() bool { return !draining.Load() }}
	if callers != nil {
		ready = append(ready, callers.Synced)
	}
	ops, err := listenOps(cfg.ops, reg, cfg.profiling, ready...)
	if err != nil {
		return err
	}

	// A terminating pod stays behind the Service until the endpoints and kube-proxy
	// catch up: closing at once would fail the admissions sent to it meanwhile, which
	// failurePolicy Ignore lets through unmutated.
	ctx = drainAfter(ctx, cfg.shutdownDelay, func() {
		draining.Store(true)
		log.Info().Dur("delay", cfg.shutdownDelay).Msg("stopping: not ready, serving until the delay ends")
	})
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serving.Run(ctx) })
	g.Go(func() error { return sources.Run(ctx) })
	g.Go(func() error { return snapshotCap.Run(ctx) })
	go relists.Run(ctx, func(string) {}, func(ns string) {
		log.Info().Str("namespace", ns).Msg("namespace read again: confighash now acts in it")
	})
	gate.Run(ctx)
	lease.Run(ctx)
	if callers != nil {
		callers.Run(ctx)
	}
	g.Go(func() error { return admissionServer.run(ctx, log, cfg.shutdownTimeout) })
	g.Go(func() error { return ops.run(ctx, log, cfg.shutdownTimeout) })
	return g.Wait()
}

// restarter returns the image of the restarter: none when restart in place is off,
// by hand or not served here (then no pod is made restartable in place), else the one
// given, else the webhook's own.
func (c *webhookConfig) restarter(ctx context.Context, client kubernetes.Interface, on bool, log zerolog.Logger) string {
	switch {
	case !on:
		return ""
	case c.restarterImage != "":
		return c.restarterImage
	}
	return ownImage(ctx, client, log)
}

// ownImage returns the image of the webhook's own container, for the restarter:
// confighash's image, at the version of the webhook that admits the pod, as the
// install pulls it (its registry, mirror or digest). It is read once, from the pod
// the downward API names in POD_NAME and POD_NAMESPACE; outside a cluster, or when
// the pod cannot be read, it returns "" and restart in place is off.
func ownImage(ctx context.Context, client kubernetes.Interface, log zerolog.Logger) string {
	name, namespace := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	if name == "" || namespace == "" {
		log.Warn().Msg("restart in place is off: no --restarter-image, and $POD_NAME or $POD_NAMESPACE is unset, so the webhook's own image is unknown")
		return ""
	}
	image, err := podImage(ctx, client, namespace, name, webhookContainer)
	if err != nil {
		log.Warn().Err(err).Str("namespace", namespace).Str("name", name).Msg("restart in place is off: no --restarter-image, and the webhook's own image could not be read")
		return ""
	}
	log.Info().Str("image", image).Msg("restarter image: the webhook's own")
	return image
}

// webhookContainer names the webhook's container in the install manifests and the chart.
const webhookContainer = "webhook"

// podImage reads the image of a pod's container: the one named container, or else
// the pod's only one. The pod is listed by name, one at most (the webhook may list
// pods, not get them), within a few seconds.
func podImage(ctx context.Context, client kubernetes.Interface, namespace, name, container string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var pod *corev1.Pod
	err := watches.Door{}.List(ctx, watches.OwnPod, namespace, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().Pods(namespace).List(ctx, o)
		},
		func(obj runtime.Object) error {
			if p, ok := obj.(*corev1.Pod); ok && p.Name == name {
				pod = p
			}
			return nil
		})
	if err != nil {
		return "", fmt.Errorf("read pod %s/%s: %w", namespace, name, err)
	}
	if pod == nil {
		return "", fmt.Errorf("pod %s/%s not found", namespace, name)
	}
	containers := pod.Spec.Containers
	if j := slices.IndexFunc(containers, func(c corev1.Container) bool { return c.Name == container }); j >= 0 {
		return containers[j].Image, nil
	}
	if len(containers) == 1 {
		return containers[0].Image, nil
	}
	return "", fmt.Errorf("pod %s/%s has no container %q", namespace, name, container)
}

// certMetrics reports serving-certificate reloads and the current certificate's expiry.
type certMetrics struct {
	reloads prometheus.Counter
	expiry  prometheus.Gauge
}

func newCertMetrics(reg prometheus.Registerer) (*certMetrics, error) {
	m := metrics.On(reg)
	c := &certMetrics{
		reloads: m.Counter("confighash_certificate_loads_total", "Serving certificates loaded, the first one included."),
		expiry:  m.Gauge("confighash_certificate_expiry_timestamp_seconds", "Expiry of the serving certificate in use, as a Unix time."),
	}
	return c, m.Err()
}

func (m *certMetrics) loaded(leaf *x509.Certificate) {
	m.reloads.Inc()
	m.expiry.Set(float64(leaf.NotAfter.Unix()))
}

// boolGauge is a gauge's value for a fact: 1 when it holds.
func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
