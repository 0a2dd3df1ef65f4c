package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/alert"
	"github.com/confighash/confighash/metrics"
	"github.com/confighash/confighash/watcher"
	"github.com/confighash/confighash/watches"
)

const watcherSummary = "confighash watcher: touches the workloads whose ConfigMaps and Secrets changed."

type watcherConfig struct {
	common
	debounce, quietPeriod       time.Duration
	touchRate                   float64
	workers, healAfter          int
	waveThreshold, maxRolling   int
	waveTimeout, snapshotSweep  time.Duration
	pendingTimeout              time.Duration
	recreateFinishedJobs        bool
	restartInPlace              bool
	runCronJobsOnChange         bool
	pauseDeployments            bool
	flapLimit                   int
	flapWindow, flapQuiet       time.Duration
	leaderElect                 bool
	leaseName, identity         string
	leaseDuration, renew, retry time.Duration
	alerts                      alertConfig
	prometheusURL               string
	analysisQueries             analysisQueries
}

// analysisQueries are the queries the metric gates of bakes may name:
// --analysis-query NAME=QUERY, repeatable.
type analysisQueries map[string]string

func (q analysisQueries) String() string { return fmt.Sprint(map[string]string(q)) }

func (q analysisQueries) Set(v string) error {
	name, query, ok := strings.Cut(v, "=")
	if !ok || !confighash.IsQueryName(name) || strings.TrimSpace(query) == "" {
		return fmt.Errorf("%q: want NAME=QUERY, a name of lowercase letters, digits and dashes, and a PromQL query", v)
	}
	if _, dup := q[name]; dup {
		return fmt.Errorf("%q: a second query named %s", v, name)
	}
	q[name] = query
	return nil
}

// alertConfig is what the watcher's alerts need; flags named as Reloader's variables.
type alertConfig struct {
	on                              bool
	sink, url, proxy, info, cluster string
}

func (c *watcherConfig) flags(fs *flag.FlagSet) {
	c.common.flags(fs, 10*time.Second)
	fs.DurationVar(&c.quietPeriod, "quiet-period", 100*time.Millisecond, "for a change that comes with others (an apply's, a burst), touch once no change reached a workload for this long, so that changes made together (a helm upgrade writes its objects some 10 ms apart) roll it once; a change alone is touched at once")
	fs.DurationVar(&c.debounce, "debounce", time.Second, "touch at most this long after the first change, however long changes go on")
	fs.Float64Var(&c.touchRate, "touch-rate", 50, "touches per second at most for the workloads one change reaches, after the first 10 at once; other changes are not held behind them")
	fs.IntVar(&c.workers, "workers", 4, "workloads touched in parallel")
	fs.BoolVar(&c.alerts.on, "alert-on-reload", false, "send an alert when workloads roll, are healed, or cannot be")
	fs.StringVar(&c.alerts.sink, "alert-sink", string(alert.Webhook), "where alerts go: slack, teams (a Workflows webhook), gchat, or webhook (a JSON body, see docs/alerts.md)")
	fs.StringVar(&c.alerts.url, "alert-webhook-url", "", "the sink's webhook URL; it may hold a token, so set it from a Secret through the environment; never logged")
	fs.StringVar(&c.alerts.proxy, "alert-webhook-proxy", "", "HTTP proxy for the alerts")
	fs.StringVar(&c.alerts.info, "alert-additional-info", "", "text added to every alert")
	fs.StringVar(&c.alerts.cluster, "cluster-name", "", "the cluster's name in alerts")
	fs.IntVar(&c.waveThreshold, "wave-threshold", 0, "a change rolls in waves only when it reaches more workloads than this, or than the wave size")
	fs.IntVar(&c.maxRolling, "max-rolling", 0, "at most this many workloads rolling in waves at once, across all namespaces; 0: no cap beyond the wave size")
	fs.BoolVar(&c.restartInPlace, "restart-in-place", true, "restart in place the pods of the workloads annotated "+confighash.AnnotationRestart+`: "in-place"`+"; false: those workloads roll; the webhook and the watcher must be given the same")
	fs.BoolVar(&c.recreateFinishedJobs, "recreate-finished-jobs", false, "recreate a Job whose data changed even once it has finished (Complete or Failed), as Reloader does; otherwise only a Job annotated "+confighash.AnnotationRecreateFinished+`: "true"`)
	fs.BoolVar(&c.pauseDeployments, "pause-deployments", false, "keep a Deployment's pause period ("+confighash.AnnotationPausePeriod+" or "+confighash.ReloaderPausePeriod+") as Reloader does: the change that rolls it pauses it (spec.paused, and "+confighash.ReloaderPausedAt+"), so that its rollout waits out the period with every change made meanwhile, and it is resumed when the period ends; otherwise the first change rolls at once and those within the period after it are held")
	fs.BoolVar(&c.runCronJobsOnChange, "run-cronjobs-on-change", false, "start a Job of a CronJob whose data changed at once, as Reloader does, besides its next run reading the new data; otherwise only for a CronJob annotated "+confighash.AnnotationRunOnChange+`: "true"`)
	fs.DurationVar(&c.pendingTimeout, "pending-timeout", watcher.DefaultPendingTimeout, "how long the new pods of a workload a wave rolled may stay Pending before its --max-rolling slot goes to other workloads")
	fs.IntVar(&c.flapLimit, "flap-limit", watcher.DefaultFlapLimit, "changes of one ConfigMap or Secret within --flap-window that roll the workloads using it; past it they are held at their current revision, with a Warning Event naming who writes it, until it has not changed for --flap-quiet, then roll once with its latest data; 0: no limit")
	fs.DurationVar(&c.flapWindow, "flap-window", watcher.DefaultFlapWindow, "the window --flap-limit counts a source's changes in")
	fs.DurationVar(&c.flapQuiet, "flap-quiet", watcher.DefaultFlapQuiet, "how long a source held by --flap-limit must go without a change before its users roll, once")
	fs.StringVar(&c.prometheusURL, "prometheus-url", "", "the Prometheus the metric gates of bakes are read from ("+confighash.AnnotationAnalysis+"); one that cannot be read halts the wave, and reverts nothing")
	c.analysisQueries = analysisQueries{}
	fs.Var(c.analysisQueries, "analysis-query", `NAME=QUERY: a PromQL query that `+confighash.AnnotationAnalysis+` may name, its "$namespace" and "$workload" the canary's; write it to read only them, for a namespace user picks the threshold; repeatable`)
	fs.DurationVar(&c.waveTimeout, "wave-timeout", watcher.DefaultWaveTimeout, "how long a workload a wave rolled may take to roll out before it counts as failed and halts the wave")
	fs.DurationVar(&c.snapshotSweep, "snapshot-sweep", 10*time.Minute, "how often to delete the snapshots of pinned workloads that nothing has owned or named for this long (left by a create the API server refused); 0: never")
	fs.IntVar(&c.healAfter, "heal-after", 3, "touches the webhook may leave unconverged before the watcher writes the hash itself")
	fs.BoolVar(&c.leaderElect, "leader-elect", true, "elect one active watcher among replicas with a Lease; standbys keep their caches warm")
	fs.StringVar(&c.leaseName, "leader-elect-lease-name", "confighash-watcher", "name of the Lease")
	fs.StringVar(&c.identity, "leader-elect-identity", "", "this replica's identity in the Lease; default: host name and a random suffix")
	fs.DurationVar(&c.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long standbys wait after the last renewal before taking over")
	fs.DurationVar(&c.renew, "leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing before giving up leadership")
	fs.DurationVar(&c.retry, "leader-elect-retry-period", 2*time.Second, "how often to try to acquire or renew the Lease")
}

// notifier returns the alert notifier, or nil when alerts are off.
func (c alertConfig) notifier(reg prometheus.Registerer, log zerolog.Logger) (*alert.Notifier, error) {
	if !c.on {
		return nil, nil
	}
	if c.url == "" {
		return nil, errors.New("--alert-on-reload needs --alert-webhook-url (or $ALERT_WEBHOOK_URL)")
	}
	metrics, err := alert.NewPrometheusRecorder(reg)
	if err != nil {
		return nil, err
	}
	return alert.New(alert.Config{
		Sink: alert.Sink(strings.ToLower(c.sink)), URL: c.url, Proxy: c.proxy, Cluster: c.cluster, AdditionalInfo: c.info,
		Metrics: metrics, Log: log.With().Str("component", "alerts").Logger(),
	})
}

// errServed stops the process when the API server starts serving a resource it would
// watch after it started, as when Argo Rollouts, a kind's CRD or the Secrets Store CSI
// driver is installed: the restart watches it too, and its resync converges.
var errServed = errors.New("restarting to watch a resource now served")

// awaitServed returns errServed once the API server serves one of the resources,
// asking discovery every interval. An error counts as not yet.
func awaitServed(ctx context.Context, client kubernetes.Interface, resources []schema.GroupVersionResource, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			for _, r := range resources {
				if served, _ := watcher.Served(client, r); served {
					return fmt.Errorf("%w: %s", errServed, r.GroupResource())
				}
			}
		}
	}
}

// errLostLeadership stops the process: its queue is shut down, and a restart rejoins
// the election with fresh state.
var errLostLeadership = errors.New("lost leadership")

func runWatcher(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg watcherConfig
	fs := flag.NewFlagSet("watcher", flag.ContinueOnError)
	cfg.flags(fs)
	if done, err := parse(fs, args, stdout, watcherSummary); done || err != nil {
		return err
	}
	e, err := cfg.connect(ctx, "watcher", stderr)
	if err != nil {
		return err
	}
	ctx, log, client, reg := e.ctx, e.log, e.client, e.reg
	dyn, err := dynamic.NewForConfig(e.rest)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	meta, err := metadata.NewForConfig(e.rest)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	overs, err := watches.NewOvers(reg, "watcher", log)
	if err != nil {
		return err
	}
	recorder, err := watcher.NewPrometheusRecorder(reg)
	if err != nil {
		return err
	}
	m := metrics.On(reg)
	leader := m.Gauge("confighash_watcher_leader", "1 while this replica leads.")
	if err := m.Err(); err != nil {
		return err
	}
	// client-go keeps three caches of recent Events, by object and reason, to merge
	// repeats: 4,096 entries each by default, a few MiB that a tenant's create and delete
	// loop fills. A thousand is enough to merge what repeats.
	broadcaster := record.NewBroadcaster(record.WithContext(ctx), record.WithCorrelatorOptions(record.CorrelatorOptions{LRUCacheSize: eventCacheEntries}))
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	events := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: watcher.FieldManager})

	set, err := cfg.settings()
	if err != nil {
		return err
	}
	notifier, err := cfg.alerts.notifier(reg, log)
	if err != nil {
		return err
	}
	wcfg := watcher.Config{
		Client: client, Dynamic: dyn, Metadata: meta, SnapshotSweep: cfg.snapshotSweep, Key: e.key, Vocabulary: set.vocabulary,
		QuietPeriod: cfg.quietPeriod, Debounce: cfg.debounce, TouchRate: cfg.touchRate, Workers: cfg.workers, HealAfter: cfg.healAfter,
		Watched: cfg.watched, NamespaceSelectors: set.selectors, Kinds: set.kinds, Sources: set.sources,
		Pacing: set.pacing, WaveThreshold: cfg.waveThreshold, WaveTimeout: cfg.waveTimeout, MaxRolling: cfg.maxRolling,
		PendingTimeout: cfg.pendingTimeout, RecreateFinishedJobs: cfg.recreateFinishedJobs, Lifecycle: set.lifecycle, InPlace: cfg.restartInPlace && inPlaceServed(ctx, client, log),
		RunCronJobsOnChange: cfg.runCronJobsOnChange, PauseDeployments: cfg.pauseDeployments, FlapLimit: cfg.flapLimit, FlapWindow: cfg.flapWindow, FlapQuiet: cfg.flapQuiet,
		PrometheusURL: cfg.prometheusURL, AnalysisQueries: cfg.analysisQueries,
		Events: events, Metrics: recorder, Over: overs.Over, Log: log,
	}
	if notifier != nil {
		wcfg.Alerts = notifier
	}
	w, err := watcher.New(wcfg)
	if err != nil {
		return err
	}
	ops, err := listenOps(cfg.ops, reg, cfg.profiling, w.Synced)
	if err != nil {
		return err
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.Run(ctx) })
	if unwatched := w.Unwatched(); len(unwatched) > 0 {
		g.Go(func() error { return awaitServed(ctx, client, unwatched, 10*time.Second) })
	}
	g.Go(func() error { return ops.run(ctx, log, cfg.shutdownTimeout) })
	if notifier != nil {
		g.Go(func() error { return notifier.Run(ctx) })
	}
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
				// What the webhook may write while this replica leads.
				Labels: confighash.ReaderLabels(identity),
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

// eventCacheEntries bounds each of client-go's caches of recent Events.
const eventCacheEntries = 1024

func defaultIdentity() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "-" + hex.EncodeToString(b)
}
