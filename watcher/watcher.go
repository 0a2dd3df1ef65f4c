// Package watcher sees ConfigMap and Secret data change and touches the workloads that
// use it, so that the webhook recomputes their hash at re-admission; when the webhook
// does not converge, it writes the same hash itself.
package watcher

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/bounded"
	"github.com/confighash/confighash/namespaces"
	"github.com/confighash/confighash/sourcecache"
	"github.com/confighash/confighash/watches"
)

// Config configures a Watcher.
type Config struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface // for the kinds without Go types, as Argo Rollouts; nil to skip them
	// Metadata lists snapshots without their data, for the sweep; nil: no sweep.
	Metadata metadata.Interface
	// Reads reads what a namespace user may make large, bounded in bytes before it is
	// decoded (lists of records, snapshots, revisions, pods); nil: through Client.
	Reads *bounded.Reader
	// SnapshotSweep is how often snapshots that nothing owns or names are deleted,
	// and how long one must have had no owner first; 0: never.
	SnapshotSweep time.Duration
	Key           confighash.Key
	// Vocabulary is which annotations workloads and sources are read in.
	Vocabulary confighash.Vocabulary
	// QuietPeriod and Debounce time a touch after changes: once no change reached the
	// workload for QuietPeriod, and at most Debounce after the first, so that changes
	// made together (one helm upgrade) roll it once and a lone change rolls at once.
	// A QuietPeriod of 0 or beyond Debounce waits Debounce.
	QuietPeriod time.Duration
	Debounce    time.Duration
	// TouchRate spreads the touches of one change over time: at most this many per
	// second for the workloads one source change reaches. Unrelated changes are not
	// held behind a large fan-out.
	TouchRate float64
	// Workers touch workloads in parallel.
	Workers int
	// HealAfter is how many touches may fail to converge before the watcher writes
	// the hash itself.
	HealAfter int
	// Pacing is how changes roll where neither a workload nor its namespace says;
	// the webhook must be given the same.
	Pacing confighash.Pacing
	// WaveThreshold: a change rolls in waves only when it reaches more workloads than
	// this, or than the wave size.
	WaveThreshold int
	// WaveTimeout is how long a workload a wave released may take to roll out before
	// it counts as failed.
	WaveTimeout time.Duration
	// MaxRolling caps the workloads waves let roll at once, across all namespaces;
	// 0: no cap beyond each wave's size.
	MaxRolling int
	// PendingTimeout is how long the new pods of a workload a wave let roll may stay
	// Pending before its MaxRolling slot goes to others.
	PendingTimeout time.Duration
	// Watched limits the watcher to these namespaces, for an install bound by
	// RoleBindings; empty means the whole cluster.
	Watched []string
	// NamespaceSelectors select the namespaces it acts in, and how.
	NamespaceSelectors namespaces.Selectors
	// Sources selects the sources that may count.
	Sources sourcecache.Filter
	// Kinds are the workload kinds handled; empty: the built-in kinds.
	Kinds confighash.Kinds
	// Lifecycle is what a source's creation and deletion roll; the webhook must be
	// given the same.
	Lifecycle confighash.Lifecycle
	// PauseDeployments keeps a Deployment's pause period Reloader's way: the write
	// that rolls it pauses it (spec.paused) until the period ends.
	PauseDeployments bool
	// RecreateFinishedJobs recreates a Job whose data changed even once it has
	// finished, as Reloader does; otherwise only one that asks to be.
	RecreateFinishedJobs bool
	// RunCronJobsOnChange starts a Job of a CronJob whose data changed at once, as
	// Reloader does; otherwise only for one that asks to.
	RunCronJobsOnChange bool
	// InPlace restarts in place the pods of workloads that ask for it; unset, those
	// workloads roll. The webhook must agree (its restarter image).
	InPlace bool
	// FlapLimit is how many changes of one source within FlapWindow roll its users;
	// past it they are held at their current revision until the source has not
	// changed for FlapQuiet, then roll once. 0: no limit.
	FlapLimit             int
	FlapWindow, FlapQuiet time.Duration
	// PrometheusURL is where the metric gates of bakes are read (AnnotationAnalysis),
	// and AnalysisQueries the queries they may name, by name; "$namespace" and
	// "$workload" in a query are the canary's.
	PrometheusURL   string
	AnalysisQueries map[string]string
	// Over is told of each object of a tenant read over its kind's bound
	// (watches.Overs); nil: no one.
	Over func(kind watches.Kind, namespace, name string, bytes int)
	// Alerts hears of what the watcher rolled, healed, or failed to; nil: no one.
	Alerts  Alerter
	Events  record.EventRecorder
	Metrics Recorder
	Log     zerolog.Logger
}

func (c *Config) defaults() error {
	if c.Client == nil {
		return errors.New("a Kubernetes client is required")
	}
	if c.QuietPeriod <= 0 || c.QuietPeriod > c.Debounce {
		c.QuietPeriod = c.Debounce
	}
	if c.Debounce < 0 || c.TouchRate <= 0 || c.Workers <= 0 || c.HealAfter <= 0 || c.WaveThreshold < 0 || c.MaxRolling < 0 {
		return errors.New("debounce, the wave threshold and max rolling must be >= 0; touch rate, workers and heal-after must be > 0")
	}
	if len(c.Kinds) == 0 {
		c.Kinds = confighash.Builtin
	}
	if c.Reads == nil {
		c.Reads = bounded.New(c.Client.CoreV1().RESTClient())
	}
	if c.WaveTimeout <= 0 {
		c.WaveTimeout = DefaultWaveTimeout
	}
	if c.PendingTimeout <= 0 {
		c.PendingTimeout = DefaultPendingTimeout
	}
	if c.NamespaceSelectors.OptedIn == nil {
		c.NamespaceSelectors = namespaces.DefaultSelectors()
	}
	if c.Metrics == nil {
		c.Metrics = NoopRecorder{}
	}
	if c.Events == nil {
		c.Events = &record.FakeRecorder{}
	}
	return nil
}

// DefaultWaveTimeout is how long a released workload may take to roll out: the
// Deployment controller's own default progress deadline.
const DefaultWaveTimeout = 10 * time.Minute

// Watcher touches the workloads whose used sources changed.
type Watcher struct {
	cfg Config
	// sources and workloads are the caches every capability reads; queue, the
	// workloads to check; tracking, what is remembered of each between checks.
	sources   *sourcecache.Cache
	workloads *workloads
	queue     workqueue.TypedRateLimitingInterface[workloadKey]
	tracking  *tracking
	// decider decides as the webhook does; report tells what the watcher did.
	decider *decider
	report  *reporter
	// The capabilities: pacer paces releases (windows, waves, halts, --max-rolling,
	// flapping); proofs find out what running pods hold; jobs recreates Jobs and
	// starts CronJobs' runs; snapshots owns and sweeps pinned workloads' snapshots;
	// restarts restarts pods in place, nil unless InPlace.
	pacer     *pacer
	proofs    *proofs
	jobs      *jobs
	snapshots *snapshots
	restarts  *restarts
}

// New returns a Watcher; Run starts its caches and Lead its work.
func New(cfg Config) (*Watcher, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	var csi dynamic.Interface
	if cfg.Vocabulary.CSI {
		served, err := Served(cfg.Client, sourcecache.PodStatuses)
		if err != nil || !served {
			cfg.Log.Warn().AnErr("error", err).Msg("the Secrets Store CSI driver's SecretProviderClassPodStatuses are not served; SecretProviderClasses count as absent until they are")
		} else {
			csi = cfg.Dynamic
		}
	}
	w := &Watcher{
		cfg: cfg,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[workloadKey](500*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[workloadKey]{DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[workloadKey]{
				Name: "confighash-watcher", Queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[workloadKey]{Queue: newFairQueue[workloadKey]()}),
			})}),
		tracking: newTracking(cfg.QuietPeriod, cfg.Debounce, time.Duration(float64(time.Second)/cfg.TouchRate)),
	}
	// A namespace confighash starts acting in, or whose mode or pacing changes, has its
	// workloads checked: they have no hash yet, or one that may be out of date, or a
	// hold its namespace set or lifted. What was kept as keys alone there is read again
	// first.
	checkNamespace := func(ns string) {
		if w.workloads.modeChanged(ns) {
			w.enqueueSpread(w.workloads.inNamespace(ns, nil), time.Now(), false)
		}
	}
	gate, err := namespaces.NewGate(cfg.Client, cfg.NamespaceSelectors, cfg.Watched, checkNamespace, cfg.Log)
	if err != nil {
		return nil, err
	}
	door := watches.Door{Namespaces: cfg.Watched, Gate: gate, Over: cfg.Over, Turns: watches.NewTurns(watches.ListsAtOnce)}
	if w.sources, err = sourcecache.New(cfg.Client, door, cfg.Sources, csi); err != nil {
		return nil, err
	}
	if w.workloads, err = newWorkloads(cfg.Client, cfg.Dynamic, cfg.Reads, gate, door, cfg.Kinds, cfg.Vocabulary, cfg.Metrics, cfg.Log); err != nil {
		return nil, err
	}
	w.report = newReporter(cfg.Events, cfg.Alerts, w.workloads, cfg.Log)
	revisions := &revisionReader{client: cfg.Client, workloads: w.workloads, reads: cfg.Reads}
	w.proofs = &proofs{sources: w.sources, written: newDataWrites(), revisions: revisions, reads: cfg.Reads}
	w.decider = &decider{key: cfg.Key, pacing: cfg.Pacing, lifecycle: cfg.Lifecycle, inPlace: cfg.InPlace, gate: gate, sources: w.sources, later: newLaterRecords(), report: w.report}
	w.pacer = &pacer{sources: w.sources, workloads: w.workloads, decider: w.decider, reads: cfg.Reads, queue: w.queue, report: w.report, metrics: cfg.Metrics, log: cfg.Log,
		pauseEnd: w.tracking.pauseEnd, unreached: w.tracking.unreached,
		threshold: cfg.WaveThreshold, waveTimeout: cfg.WaveTimeout, pendingTimeout: cfg.PendingTimeout, maxRolling: cfg.MaxRolling,
		waves: newWaves(), flapping: newFlapBreaker(cfg.FlapLimit, cfg.FlapWindow, cfg.Debounce, cfg.FlapQuiet),
		reverter: &reverter{workloads: w.workloads, revisions: revisions, decider: w.decider, report: w.report, metrics: cfg.Metrics},
		baker:    &baker{sources: w.sources, workloads: w.workloads, report: w.report},
		analyst:  newAnalyst(cfg.PrometheusURL, cfg.AnalysisQueries, cfg.Metrics),
		pauses:   &deploymentPauses{on: cfg.PauseDeployments, workloads: w.workloads, report: w.report}}
	w.sources.Writes(w.pacer.wrote)
	w.jobs = &jobs{client: cfg.Client, reads: cfg.Reads, key: cfg.Key, sources: w.sources, workloads: w.workloads, queue: w.queue, report: w.report, metrics: cfg.Metrics, log: cfg.Log,
		recreateFinished: cfg.RecreateFinishedJobs, runOnChange: cfg.RunCronJobsOnChange, recreations: newRecreations()}
	w.snapshots = &snapshots{client: cfg.Client, reads: cfg.Reads, key: cfg.Key, sources: w.sources, workloads: w.workloads, revisions: revisions,
		queue: w.queue, metrics: cfg.Metrics, log: cfg.Log, every: cfg.SnapshotSweep,
		owned: map[workloadKey]ownership{}, candidates: map[types.UID]bool{}, from: map[string]string{}}
	if err := w.sources.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { w.sourceChanged(nil, obj, initial) },
		UpdateFunc: func(old, obj any) { w.sourceChanged(old, obj, false) },
		DeleteFunc: func(obj any) { w.sourceChanged(nil, obj, false) },
	}); err != nil {
		return nil, err
	}
	sets := w.sources.Informers()
	if cfg.InPlace {
		if w.restarts, err = newRestartsOf(w, door); err != nil {
			return nil, err
		}
		maps.Copy(sets, w.restarts.informers())
	}
	if err := w.workloads.handle(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { w.workloadChanged(nil, obj, initial) },
		UpdateFunc: func(old, obj any) { w.workloadChanged(old, obj, false) },
		// Its sync finds it gone, and forgets what was kept of it.
		DeleteFunc: func(obj any) {
			if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = gone.Obj
			}
			if v, ok := obj.(*view); ok {
				w.queue.Add(keyOf(v))
			}
		},
	}); err != nil {
		return nil, err
	}
	w.workloads.relistWith(sets, cfg.Log)
	return w, nil
}

// Run runs the caches until ctx is done. Standbys run them too, so that failover
// finds them warm.
func (w *Watcher) Run(ctx context.Context) error {
	w.workloads.run(ctx)
	go func() { _ = w.sources.Run(ctx) }()
	w.restarts.run(ctx)
	go w.workloads.relist(ctx, func(ns string) {
		w.cfg.Log.Info().Str("namespace", ns).Msg("namespace read again: confighash now acts on more of it")
		w.enqueueSpread(w.workloads.inNamespace(ns, nil), time.Now(), false)
	})
	<-ctx.Done()
	w.queue.ShutDown()
	return nil
}

// Synced reports whether every cache has listed once.
func (w *Watcher) Synced() bool {
	return w.sources.Synced() && w.restarts.synced() && w.workloads.synced()
}

// Unwatched returns the resources the watcher would cache, of workloads or of the
// CSI driver's pod statuses, that the API server did not serve when it was created.
func (w *Watcher) Unwatched() []schema.GroupVersionResource {
	var missing []schema.GroupVersionResource
	for _, k := range w.cfg.Kinds {
		if !w.workloads.watches(k.Kind) {
			missing = append(missing, k.GroupVersion().WithResource(k.Resource))
		}
	}
	if w.cfg.Vocabulary.CSI && !w.sources.Keeps(confighash.SecretProviderClass) {
		missing = append(missing, sourcecache.PodStatuses)
	}
	return missing
}

// Lead does the leader's work until ctx is done: it checks every workload once, since
// changes may have happened while no watcher was leading, then touches workloads as
// changes arrive.
func (w *Watcher) Lead(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), w.Synced) {
		return nil
	}
	w.resync()
	if err := w.jobs.find(ctx); err != nil {
		w.cfg.Log.Warn().Err(err).Msg("recreations of Jobs a watcher did not finish are finished at the next start")
	}
	var wg sync.WaitGroup
	wg.Go(func() { w.restarts.lead(ctx) })
	if w.cfg.Metadata != nil && w.cfg.SnapshotSweep > 0 {
		wg.Go(func() {
			tick := time.NewTicker(w.cfg.SnapshotSweep)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					w.snapshots.sweep(ctx)
				}
			}
		})
	}
	for range w.cfg.Workers {
		wg.Go(func() {
			for w.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	w.queue.ShutDown()
	wg.Wait()
	return nil
}
