// Package watcher sees ConfigMap and Secret data change and touches the workloads that
// use it, so that the webhook recomputes their hash at re-admission; when the webhook
// does not converge, it writes the same hash itself.
package watcher

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/alert"
	"github.com/confighash/confighash/namespaces"
	"github.com/confighash/confighash/sourcecache"
)

// FieldManager owns the watcher's writes.
const FieldManager = "confighash-watcher"

// Config configures a Watcher.
type Config struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface // for Argo Rollouts; nil to skip them
	Key     confighash.Key
	// Vocabulary is which annotations workloads and sources are read in.
	Vocabulary confighash.Vocabulary
	// Debounce delays a touch after the first change, so that changes made together
	// roll a workload once.
	Debounce time.Duration
	// TouchRate spreads the touches of one change over time: at most this many per
	// second for the workloads one source change reaches. Unrelated changes are not
	// held behind a large fan-out.
	TouchRate float64
	// Workers touch workloads in parallel.
	Workers int
	// HealAfter is how many touches may fail to converge before the watcher writes
	// the hash itself.
	HealAfter int
	// Namespaces limits the watcher to these namespaces, for an install bound by
	// RoleBindings; empty means the whole cluster.
	Namespaces []string
	// NamespaceSelectors select the namespaces it acts in, and how.
	NamespaceSelectors namespaces.Selectors
	// Sources selects the sources that may count.
	Sources sourcecache.Filter
	// Kinds are the workload kinds handled; empty: every supported kind.
	Kinds []confighash.Kind
	// Alerts hears of what the watcher rolled, healed, or failed to; nil: no one.
	Alerts  Alerter
	Events  record.EventRecorder
	Metrics Recorder
	Log     zerolog.Logger
}

// Alerter hears of the workloads the watcher rolled, healed, or failed to heal. It
// must not block.
type Alerter interface {
	Notify(alert.Event)
}

// alert tells the Alerter, if any, what happened to the workload and which source
// changes caused it.
func (w *Watcher) alert(what alert.What, v *view, trig []confighash.Trigger, reason string) {
	if w.cfg.Alerts == nil {
		return
	}
	sources := make([]alert.Object, len(trig))
	for i, t := range trig {
		sources[i] = alert.Object{Kind: string(t.Kind), Name: t.Name, ResourceVersion: t.ResourceVersion}
	}
	w.cfg.Alerts.Notify(alert.Event{What: what, Namespace: v.Namespace, Workload: alert.Object{Kind: v.Kind.Kind, Name: v.Name}, Sources: sources, Reason: reason})
}

// handles reports whether the watcher handles the workload kind.
func (c *Config) handles(kind string) bool {
	return len(c.Kinds) == 0 || slices.ContainsFunc(c.Kinds, func(k confighash.Kind) bool { return k.Kind == kind })
}

// HandlesRollouts reports whether the configuration includes Argo Rollouts.
func (c Config) HandlesRollouts() bool { return c.handles(confighash.Rollout.Kind) }

func (c *Config) defaults() error {
	if c.Client == nil {
		return errors.New("a Kubernetes client is required")
	}
	if c.Debounce < 0 || c.TouchRate <= 0 || c.Workers <= 0 || c.HealAfter <= 0 {
		return errors.New("debounce must be >= 0; touch rate, workers and heal-after must be > 0")
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

// workloadKey names a workload in the queue.
type workloadKey struct {
	Kind, Namespace, Name string
}

func (k workloadKey) String() string { return k.Kind + " " + k.Namespace + "/" + k.Name }

// Watcher touches the workloads whose used sources changed.
type Watcher struct {
	cfg        Config
	toView     cache.TransformFunc
	sources    *sourcecache.Cache
	workloads  map[string]*sourcecache.Informers
	namespaces namespaces.Gate
	queue      workqueue.TypedRateLimitingInterface[workloadKey]
	// touchInterval spaces the touches of one fan-out: 1/TouchRate.
	touchInterval time.Duration

	mu sync.Mutex
	// firstSeen is when a change first reached a workload not yet converged: the start
	// of its convergence latency.
	firstSeen map[workloadKey]time.Time
	// warned remembers the resourceVersion a bad-annotation Event was sent for.
	warned map[workloadKey]string
	// pausedUntil is when the pause period after a workload's last touch ends.
	pausedUntil map[workloadKey]time.Time
}

// New returns a Watcher; Run starts its caches and Lead its work.
func New(cfg Config) (*Watcher, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	rollouts, err := RolloutsServed(cfg.Client)
	if err != nil {
		cfg.Log.Warn().Err(err).Msg("cannot tell whether Argo Rollouts is served; watching without Rollouts until it is")
	}
	toView := viewTransform(cfg.Vocabulary)
	workloads, err := newWorkloadInformers(cfg.Client, cfg.Dynamic, cfg.Namespaces, rollouts, toView)
	if err != nil {
		return nil, err
	}
	maps.DeleteFunc(workloads, func(kind string, _ *sourcecache.Informers) bool { return !cfg.handles(kind) })
	w := &Watcher{
		cfg:       cfg,
		toView:    toView,
		sources:   sourcecache.New(cfg.Client, cfg.Namespaces, cfg.Sources),
		workloads: workloads,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[workloadKey](500*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[workloadKey]{Name: "confighash-watcher"}),
		touchInterval: time.Duration(float64(time.Second) / cfg.TouchRate),
		firstSeen:     map[workloadKey]time.Time{},
		warned:        map[workloadKey]string{},
		pausedUntil:   map[workloadKey]time.Time{},
	}
	// A namespace confighash starts acting in has its opted-in workloads checked: they
	// have no hash yet, or one that may be out of date.
	checkNamespace := func(ns string) { w.enqueueIndexed(ns, cache.NamespaceIndex, ns, nil) }
	if w.namespaces, err = namespaces.NewGate(cfg.Client, cfg.NamespaceSelectors, cfg.Namespaces, checkNamespace, cfg.Log); err != nil {
		return nil, err
	}
	if err := w.sources.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { w.sourceChanged(nil, obj, initial) },
		UpdateFunc: func(old, obj any) { w.sourceChanged(old, obj, false) },
		DeleteFunc: func(obj any) { w.sourceChanged(nil, obj, false) },
	}); err != nil {
		return nil, err
	}
	for _, in := range workloads {
		if err := in.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    func(obj any, initial bool) { w.workloadChanged(nil, obj, initial) },
			UpdateFunc: func(old, obj any) { w.workloadChanged(old, obj, false) },
		}); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Run runs the caches until ctx is done. Standbys run them too, so that failover
// finds them warm.
func (w *Watcher) Run(ctx context.Context) error {
	w.namespaces.Run(ctx)
	for _, in := range w.workloads {
		in.Run(ctx)
	}
	go func() { _ = w.sources.Run(ctx) }()
	<-ctx.Done()
	w.queue.ShutDown()
	return nil
}

// WatchesRollouts reports whether the watcher has Argo Rollouts in its caches: only if
// they were served when it was created.
func (w *Watcher) WatchesRollouts() bool {
	_, ok := w.workloads[confighash.Rollout.Kind]
	return ok
}

// Synced reports whether every cache has listed once.
func (w *Watcher) Synced() bool {
	if !w.sources.Synced() || !w.namespaces.HasSynced() {
		return false
	}
	for _, in := range w.workloads {
		if !in.HasSynced() {
			return false
		}
	}
	return true
}

// Lead does the leader's work until ctx is done: it checks every workload once, since
// changes may have happened while no watcher was leading, then touches workloads as
// changes arrive.
func (w *Watcher) Lead(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), w.Synced) {
		return nil
	}
	w.resync()
	var wg sync.WaitGroup
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

// sourceChanged enqueues the workloads that may use a source whose data, existence or
// counting annotations changed.
func (w *Watcher) sourceChanged(old, obj any, initial bool) {
	if initial {
		return // the leader's resync covers what existed before
	}
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	d, ok := obj.(*sourcecache.Digested)
	if !ok {
		return
	}
	if prev, ok := old.(*sourcecache.Digested); ok && sameSource(prev.Source, d.Source) {
		return // metadata only
	}
	w.cfg.Metrics.SourceChanged(d.Source.Kind)
	w.enqueueUsers(d.Namespace, d.Source.SourceRef)
}

func sameSource(a, b confighash.Source) bool {
	return a.Present == b.Present && a.Ignore == b.Ignore && a.Match == b.Match &&
		maps.Equal(a.Data, b.Data) && maps.Equal(a.BinaryData, b.BinaryData)
}

// enqueueUsers enqueues every workload that may use the source, spread at TouchRate.
func (w *Watcher) enqueueUsers(namespace string, ref confighash.SourceRef) {
	if w.namespaces.Mode(namespace) != namespaces.Off {
		w.enqueueIndexed(namespace, sourceIndex, sourceKey(namespace, ref), nil)
		w.enqueueIndexed(namespace, sourceIndex, patternKey(namespace), func(v *view) bool {
			return slices.ContainsFunc(v.Policy.Patterns, func(p confighash.NamePattern) bool { return p.Matches(ref) })
		})
	}
}

// enqueueIndexed enqueues the opted-in workloads of the namespace that an index of the
// workload informers lists under value, and that match when it is given, spread at
// TouchRate.
func (w *Watcher) enqueueIndexed(namespace, index, value string, match func(*view) bool) {
	i := 0
	for _, in := range w.workloads {
		inf := in.For(namespace)
		if inf == nil {
			continue
		}
		objs, _ := inf.GetIndexer().ByIndex(index, value)
		for _, obj := range objs {
			if v, ok := obj.(*view); ok && (match == nil || match(v)) {
				if _, enabled := w.policy(v); !enabled {
					continue
				}
				w.enqueue(v, w.cfg.Debounce+time.Duration(i)*w.touchInterval)
				i++
			}
		}
	}
}

// workloadChanged enqueues a workload whose opt-in, references or record changed, for
// a convergence check; status updates and our own touches do not change a view.
func (w *Watcher) workloadChanged(old, obj any, initial bool) {
	v, ok := obj.(*view)
	if !ok || initial {
		return
	}
	if prev, ok := old.(*view); ok && sameView(prev, v) {
		return
	}
	if _, enabled := w.policy(v); enabled {
		w.enqueue(v, w.cfg.Debounce)
	}
}

func keyOf(v *view) workloadKey { return workloadKey{v.Kind.Kind, v.Namespace, v.Name} }

// enqueue queues the workload for a check after the delay, or, while its pause
// period holds it, when that ends.
func (w *Watcher) enqueue(v *view, after time.Duration) {
	key := keyOf(v)
	now := time.Now()
	w.mu.Lock()
	if _, ok := w.firstSeen[key]; !ok {
		w.firstSeen[key] = now
	}
	if until, ok := w.pausedUntil[key]; ok {
		if held := until.Sub(now); held > after {
			after = held
		} else if held <= 0 {
			delete(w.pausedUntil, key)
		}
	}
	w.mu.Unlock()
	w.queue.AddAfter(key, after)
}

// unpause ends a pause set for a touch that did not roll the workload.
func (w *Watcher) unpause(key workloadKey) {
	w.mu.Lock()
	delete(w.pausedUntil, key)
	w.mu.Unlock()
}

// pause holds further touches of the workload for its pause period.
func (w *Watcher) pause(v *view) {
	if v.Policy.PausePeriod <= 0 {
		return
	}
	w.mu.Lock()
	w.pausedUntil[keyOf(v)] = time.Now().Add(v.Policy.PausePeriod)
	w.mu.Unlock()
}

// resync enqueues every workload that drifted while no watcher led.
func (w *Watcher) resync() {
	drifted := 0
	for _, in := range w.workloads {
		for _, obj := range in.List() {
			v, ok := obj.(*view)
			if !ok {
				continue
			}
			if p, enabled := w.policy(v); !enabled {
				continue
			} else if _, converged := w.expected(v, p); !converged {
				w.enqueue(v, time.Duration(drifted)*w.touchInterval)
				drifted++
			}
		}
	}
	w.cfg.Metrics.Resynced(drifted)
	w.cfg.Log.Info().Int("drifted", drifted).Msg("resync done")
}

// policy returns the workload's policy in its namespace, and whether the watcher acts
// on it: enabled there, and not being deleted.
func (w *Watcher) policy(v *view) (confighash.Policy, bool) {
	p := v.Policy
	switch w.namespaces.Mode(v.Namespace) {
	case namespaces.Off:
		return p, false
	case namespaces.Every:
		p = p.ForEveryWorkload()
	}
	return p, p.Enabled() && v.DeletionTimestamp == nil
}

// candidates returns the sources that may count for the workload, its name patterns
// matched against the cached names and those in its record.
func (w *Watcher) candidates(v *view, p confighash.Policy) []confighash.Reference {
	var names []confighash.SourceRef
	if len(p.Patterns) > 0 {
		names = append(w.sources.Names(v.Namespace), v.Record.Sources()...)
	}
	return p.Candidates(v.References, names)
}

// expected returns the record the workload must have for the sources as cached, and
// whether it has it, with the matching hash.
func (w *Watcher) expected(v *view, p confighash.Policy) (confighash.Record, bool) {
	candidates := w.candidates(v, p)
	sources := make(map[confighash.SourceRef]confighash.Source, len(candidates))
	for _, c := range candidates {
		if d, ok := w.sources.Lookup(v.Namespace, c.SourceRef); ok {
			sources[c.SourceRef] = d.Source
		}
	}
	want := confighash.Update(v.Record, confighash.Observe(w.cfg.Key, p, candidates, sources))
	return want, v.RecordErr == nil && slices.Equal(want, v.Record) && confighash.Settled(v.Hash, v.Adopted, want.Hash(w.cfg.Key))
}

func (w *Watcher) processNext(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	w.cfg.Metrics.QueueDepth(w.queue.Len())
	if err := w.sync(ctx, key); err != nil {
		if ctx.Err() != nil {
			return true
		}
		w.cfg.Log.Warn().Err(err).Str("workload", key.String()).Int("attempt", w.queue.NumRequeues(key)+1).Msg("workload not converged; retrying")
		w.queue.AddRateLimited(key)
		return true
	}
	w.queue.Forget(key)
	return true
}

// errNotConverged means the touch was admitted without the webhook's hash: the
// webhook failed open.
var errNotConverged = errors.New("the webhook did not write the hash")

// sync converges one workload: nothing when it already is, a touch otherwise, and past
// HealAfter failed touches, the watcher's own write.
func (w *Watcher) sync(ctx context.Context, key workloadKey) error {
	inf := w.workloads[key.Kind].For(key.Namespace)
	if inf == nil {
		return nil
	}
	obj, exists, err := inf.GetStore().GetByKey(key.Namespace + "/" + key.Name)
	v, isView := obj.(*view)
	// A namespace whose sources cannot be listed is left alone: the record computed
	// from a cache without them would be wrong, and healing would write it.
	if err != nil || !exists || !isView || !w.sources.Covers(key.Namespace) {
		w.done(key)
		return nil
	}
	p, enabled := w.policy(v)
	if !enabled {
		w.done(key)
		return nil
	}
	ref := objectRef(v)
	tooMany := confighash.CheckCandidates(w.candidates(v, p))
	if (len(v.Problems) > 0 || tooMany != nil) && w.warnOnce(key, v.ResourceVersion) {
		msgs := make([]string, len(v.Problems))
		for i, p := range v.Problems {
			msgs[i] = "ignored: " + p.Error()
		}
		if tooMany != nil {
			msgs = append(msgs, "not hashed: "+tooMany.Error())
		}
		w.cfg.Events.Event(ref, corev1.EventTypeWarning, "BadAnnotation", strings.Join(msgs, "; "))
	}
	if tooMany != nil {
		// Nothing to do until it changes; the warning stays sent for this version.
		w.mu.Lock()
		delete(w.firstSeen, key)
		w.mu.Unlock()
		return nil
	}
	want, converged := w.expected(v, p)
	w.cfg.Log.Debug().Str("workload", key.String()).Bool("converged", converged).Str("record", v.Record.String()).Str("want", want.String()).Msg("checked")
	if converged {
		w.converged(key)
		return nil
	}
	if firstMet(v) {
		adopt, err := w.adoptable(ctx, v, want)
		if err != nil {
			return err
		}
		if adopt {
			return w.adopt(ctx, key, v, want)
		}
	}
	if w.queue.NumRequeues(key) >= w.cfg.HealAfter {
		return w.heal(ctx, key, v, want)
	}
	// The pause starts before the touch: the touch's own update event, and changes
	// that follow it at once, must already find the workload held.
	rolls := !confighash.Settled(v.Hash, v.Adopted, want.Hash(w.cfg.Key))
	if rolls {
		w.pause(v)
	}
	trig := triggers(v, want, w.sources)
	admitted, err := w.touch(ctx, v, trig)
	if err != nil {
		w.unpause(key)
		w.cfg.Metrics.Touch(TouchError)
		return err
	}
	if admitted == nil {
		w.done(key) // deleted meanwhile
		return nil
	}
	if admitted.RecordErr != nil || !slices.Equal(admitted.Record, want) || !confighash.Settled(admitted.Hash, admitted.Adopted, want.Hash(w.cfg.Key)) {
		w.unpause(key)
		w.cfg.Metrics.Touch(TouchNotConverged)
		return errNotConverged
	}
	w.cfg.Metrics.Touch(TouchConverged)
	if admitted.Hash != v.Hash {
		w.cfg.Events.Event(ref, corev1.EventTypeNormal, "ConfigChanged", "rolling: "+changedSources(v.Record, want))
		w.alert(alert.Rolled, v, trig, "")
	}
	w.converged(key)
	return nil
}

func (w *Watcher) warnOnce(key workloadKey, rv string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.warned[key] == rv {
		return false
	}
	w.warned[key] = rv
	return true
}

// converged records the convergence latency of a workload a change reached.
func (w *Watcher) converged(key workloadKey) {
	w.mu.Lock()
	start, ok := w.firstSeen[key]
	delete(w.firstSeen, key)
	w.mu.Unlock()
	if ok {
		w.cfg.Metrics.Converged(time.Since(start))
	}
}

// done forgets a workload that no longer needs converging.
func (w *Watcher) done(key workloadKey) {
	w.mu.Lock()
	delete(w.firstSeen, key)
	delete(w.warned, key)
	delete(w.pausedUntil, key)
	w.mu.Unlock()
}
