package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"github.com/confighash/confighash/watcher"
)

const watcherSummary = "confighash watcher: touches the workloads whose ConfigMaps and Secrets changed."

type watcherConfig struct {
	ops                         string
	kubeconfig                  string
	qps                         float64
	burst                       int
	namespace, keySecret        string
	hashKeyFile                 string
	debounce                    time.Duration
	touchRate                   float64
	workers, healAfter          int
	leaderElect                 bool
	leaseName, identity         string
	leaseDuration, renew, retry time.Duration
	logFormat, logLevel         string
	shutdownTimeout             time.Duration
}

func (c *watcherConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.ops, "ops-address", ":8080", "address of the plain-HTTP server for /healthz, /readyz and /metrics")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses the in-cluster service account")
	fs.Float64Var(&c.qps, "kube-api-qps", 0, "client-side limit of queries per second to the API server; 0: none, the API server's priority and fairness applies")
	fs.IntVar(&c.burst, "kube-api-burst", 100, "burst above --kube-api-qps, when it is set")
	fs.StringVar(&c.namespace, "namespace", "confighash", "namespace confighash is installed in: the hash key Secret, the leader Lease")
	fs.StringVar(&c.keySecret, "hash-key-secret", "confighash-hash-key", "Secret holding the HMAC key shared with the webhook; created with a random key when absent")
	fs.StringVar(&c.hashKeyFile, "hash-key-file", "", "file holding the HMAC key (at least 32 bytes), instead of the Secret")
	fs.DurationVar(&c.debounce, "debounce", time.Second, "wait after a change before touching, so that changes made together roll once")
	fs.Float64Var(&c.touchRate, "touch-rate", 50, "touches per second at most for the workloads one change reaches; other changes are not held behind them")
	fs.IntVar(&c.workers, "workers", 4, "workloads touched in parallel")
	fs.IntVar(&c.healAfter, "heal-after", 3, "touches the webhook may leave unconverged before the watcher writes the hash itself")
	fs.BoolVar(&c.leaderElect, "leader-elect", true, "elect one active watcher among replicas with a Lease; standbys keep their caches warm")
	fs.StringVar(&c.leaseName, "leader-elect-lease-name", "confighash-watcher", "name of the Lease")
	fs.StringVar(&c.identity, "leader-elect-identity", "", "this replica's identity in the Lease; default: host name and a random suffix")
	fs.DurationVar(&c.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long standbys wait after the last renewal before taking over")
	fs.DurationVar(&c.renew, "leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing before giving up leadership")
	fs.DurationVar(&c.retry, "leader-elect-retry-period", 2*time.Second, "how often to try to acquire or renew the Lease")
	fs.StringVar(&c.logFormat, "log-format", "json", "log format: json or console")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long the ops server may take to finish on SIGTERM")
}

// errLostLeadership stops the process: its queue is shut down, and a restart rejoins
// the election with fresh state.
var errLostLeadership = errors.New("lost leadership")

func runWatcher(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg watcherConfig
	fs := flag.NewFlagSet("watcher", flag.ContinueOnError)
	cfg.flags(fs)
	if err := parseFlags(fs, args, stdout, watcherSummary); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	log, lr, err := newLogger(stderr, cfg.logFormat, cfg.logLevel, "watcher")
	if err != nil {
		return err
	}
	ctx = logr.NewContext(ctx, lr)

	rc, err := restConfig(cfg.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubernetes client configuration: %w", err)
	}
	rc.UserAgent = "confighash-watcher/" + version
	rc.QPS, rc.Burst = float32(cfg.qps), cfg.burst
	if cfg.qps == 0 {
		rc.QPS = -1
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	key, err := loadKey(ctx, client, cfg.hashKeyFile, cfg.namespace, cfg.keySecret)
	if err != nil {
		return err
	}

	reg := newRegistry()
	recorder, err := watcher.NewPrometheusRecorder(reg)
	if err != nil {
		return err
	}
	leader := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "confighash", Subsystem: "watcher", Name: "leader", Help: "1 while this replica leads."})
	reg.MustRegister(leader)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	events := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: watcher.FieldManager})

	w, err := watcher.New(watcher.Config{
		Client: client, Dynamic: dyn, Key: key,
		Debounce: cfg.debounce, TouchRate: cfg.touchRate, Workers: cfg.workers, HealAfter: cfg.healAfter,
		Events: events, Metrics: recorder, Log: log,
	})
	if err != nil {
		return err
	}
	ops := &http.Server{Handler: opsHandler(reg, w.Synced), ReadHeaderTimeout: 5 * time.Second}
	opsLn, err := net.Listen("tcp", cfg.ops)
	if err != nil {
		return fmt.Errorf("listen for ops: %w", err)
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.Run(ctx) })
	g.Go(func() error {
		log.Info().Str("address", opsLn.Addr().String()).Msg("ops server running")
		defer log.Info().Msg("ops server stopped")
		return serve(ctx, ops, opsLn, false, cfg.shutdownTimeout)
	})
	g.Go(func() error {
		lead := func(ctx context.Context) {
			leader.Set(1)
			log.Info().Msg("leading")
			if err := w.Lead(ctx); err != nil {
				log.Error().Err(err).Msg("leading failed")
			}
		}
		if !cfg.leaderElect {
			lead(ctx)
			return nil
		}
		identity := cfg.identity
		if identity == "" {
			identity = defaultIdentity()
		}
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.namespace, Name: cfg.leaseName},
				Client:     client.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
			},
			LeaseDuration:   cfg.leaseDuration,
			RenewDeadline:   cfg.renew,
			RetryPeriod:     cfg.retry,
			ReleaseOnCancel: true,
			Name:            cfg.leaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: lead,
				OnStoppedLeading: func() { leader.Set(0) },
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		log.Info().Str("identity", identity).Msg("standing for leader")
		le.Run(ctx)
		if ctx.Err() != nil {
			return nil
		}
		return errLostLeadership
	})
	return g.Wait()
}

func defaultIdentity() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "-" + hex.EncodeToString(b)
}
