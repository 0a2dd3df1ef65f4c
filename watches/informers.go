package watches

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// Informers holds one informer per watched namespace, or a single one for the whole
// cluster. Per-namespace informers let a namespaced install work with RoleBindings
// alone: a list across namespaces needs a cluster-wide grant.
type Informers struct {
	newInformer func(namespace string) cache.SharedIndexInformer
	// transform makes the transform of each informer, which marks what it keeps as
	// keys alone on it.
	transform func(*informer) cache.TransformFunc
	// ready tells when the informers may start: once the gate knows the namespaces.
	ready func() bool
	// turns bounds the informers listing at once, with those of the component's other
	// kinds.
	turns    *Turns
	handlers []cache.ResourceEventHandler
	// runCtx is Run's, which informers started later run under too.
	runCtx context.Context

	mu          sync.RWMutex
	byNamespace map[string]*informer // "" for the whole cluster
}

// informer is one namespace's informer, or the whole cluster's.
type informer struct {
	cache.SharedIndexInformer
	// refused marks a watched namespace whose list was refused (no RoleBinding there,
	// or the namespace is gone). Until it can be listed, it counts as synced and is
	// not served, so that one of them does not keep the others from being served.
	refused *atomic.Bool
	// failed is closed once a list or watch of the informer failed: it gives its turn
	// back.
	failed   chan struct{}
	failOnce sync.Once
	stop     context.CancelFunc

	mu sync.Mutex
	// keyed are the namespaces it keeps objects of as their key alone, since
	// confighash did not act in them when it read those.
	keyed map[string]bool
}

func (inf *informer) keep(namespace string) {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	inf.keyed[namespace] = true
}

func (inf *informer) keeps(namespace string) bool {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	return inf.keyed[namespace]
}

// start runs the informer under ctx once it has a turn, and gives the turn back once
// its first list is done, or failed: one that cannot list, a kind whose CRD went, lists
// again without a turn, and does not hold the others back.
func (inf *informer) start(ctx context.Context, turns *Turns) {
	ctx, inf.stop = context.WithCancel(ctx)
	go func() {
		give, ok := turns.take(ctx)
		if !ok {
			return
		}
		defer give()
		go inf.RunWithContext(ctx)
		select {
		case <-inf.HasSyncedChecker().Done():
		case <-inf.failed:
		case <-ctx.Done():
		}
	}()
}

// newInformers calls newInformer for each namespace, or once with "" (all namespaces)
// when there are none; each informer stores what the transform made for it makes of
// each object, once ready, and lists when turns gives it a turn.
func newInformers(namespaces []string, newInformer func(namespace string) cache.SharedIndexInformer, transform func(*informer) cache.TransformFunc, ready func() bool, turns *Turns) (*Informers, error) {
	in := &Informers{newInformer: newInformer, transform: transform, ready: ready, turns: turns, byNamespace: map[string]*informer{}}
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		inf, err := in.build(ns)
		if err != nil {
			return nil, err
		}
		in.byNamespace[ns] = inf
	}
	return in, nil
}

// build returns a new informer of the namespace, with the transform and the handlers.
func (in *Informers) build(namespace string) (*informer, error) {
	inf := &informer{SharedIndexInformer: in.newInformer(namespace), refused: &atomic.Bool{}, failed: make(chan struct{}), keyed: map[string]bool{}}
	if err := inf.SetTransform(in.transform(inf)); err != nil {
		return nil, err
	}
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		inf.failOnce.Do(func() { close(inf.failed) })
		if namespace != metav1.NamespaceAll && (apierrors.IsForbidden(err) || apierrors.IsNotFound(err)) {
			inf.refused.Store(true)
		}
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}); err != nil {
		return nil, err
	}
	for _, h := range in.handlers {
		if _, err := inf.AddEventHandler(h); err != nil {
			return nil, err
		}
	}
	return inf, nil
}

// For returns the informer that holds the namespace's objects; nil when none watches
// it, its list was refused, or it keeps them as their keys alone: what it does not
// hold, it cannot say is absent.
func (in *Informers) For(namespace string) cache.SharedIndexInformer {
	inf := in.serving(namespace)
	if inf == nil || inf.refused.Load() && !inf.HasSynced() || inf.keeps(namespace) {
		return nil
	}
	return inf
}

// serving is the informer that watches the namespace, nil if none.
func (in *Informers) serving(namespace string) *informer {
	in.mu.RLock()
	defer in.mu.RUnlock()
	if all, ok := in.byNamespace[metav1.NamespaceAll]; ok {
		return all
	}
	return in.byNamespace[namespace]
}

// Keyed reports whether the namespace's objects were kept as their keys alone, when
// confighash did not act in it: once it does, Relist reads them whole.
func (in *Informers) Keyed(namespace string) bool {
	inf := in.serving(namespace)
	return inf != nil && inf.keeps(namespace)
}

// List returns the objects of every namespace watched.
func (in *Informers) List() []any {
	in.mu.RLock()
	defer in.mu.RUnlock()
	var objs []any
	for _, inf := range in.byNamespace {
		objs = append(objs, inf.GetStore().List()...)
	}
	return objs
}

// AddEventHandler adds h to every informer, and to those Relist starts; call it
// before Run.
func (in *Informers) AddEventHandler(h cache.ResourceEventHandler) error {
	in.handlers = append(in.handlers, h)
	for _, inf := range in.byNamespace {
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
	}
	return nil
}

// Run starts every informer once they are ready, each listing in its turn; they stop
// when ctx is done.
func (in *Informers) Run(ctx context.Context) {
	go func() {
		if wait.PollUntilContextCancel(ctx, relistPoll, true, func(context.Context) (bool, error) { return in.ready(), nil }) != nil {
			return
		}
		in.mu.Lock()
		defer in.mu.Unlock()
		in.runCtx = ctx
		for _, inf := range in.byNamespace {
			inf.start(ctx, in.turns)
		}
	}()
}

// HasSynced reports whether every informer has listed once, or had its list refused.
func (in *Informers) HasSynced() bool {
	in.mu.RLock()
	defer in.mu.RUnlock()
	for ns, inf := range in.byNamespace {
		if !inf.HasSynced() && (ns == metav1.NamespaceAll || !inf.refused.Load()) {
			return false
		}
	}
	return true
}

// relistPoll is how often Relist checks whether the new informer has listed.
const relistPoll = 50 * time.Millisecond

// Relist lists the namespace's objects again, through a new informer that replaces
// the one holding them once it has listed, so that every object goes through the
// transform again; with a single informer for the whole cluster, that is every
// object. Until then the old informer serves, and keeps calling the handlers. Call it
// after Run. It returns whether the new informer was swapped in: not when ctx ended
// first, or the namespace is not watched or its list was refused.
func (in *Informers) Relist(ctx context.Context, namespace string) (bool, error) {
	in.mu.RLock()
	key, runCtx := namespace, in.runCtx
	if _, all := in.byNamespace[metav1.NamespaceAll]; all {
		key = metav1.NamespaceAll
	}
	_, watched := in.byNamespace[key]
	in.mu.RUnlock()
	if !watched || runCtx == nil {
		return false, nil
	}
	next, err := in.build(key)
	if err != nil {
		return false, fmt.Errorf("relist namespace %q: %w", namespace, err)
	}
	next.start(runCtx, in.turns)
	err = wait.PollUntilContextCancel(ctx, relistPoll, true, func(context.Context) (bool, error) {
		return next.HasSynced() || next.refused.Load(), nil
	})
	if err != nil || !next.HasSynced() {
		next.stop()
		return false, nil
	}
	in.mu.Lock()
	old := in.byNamespace[key]
	in.byNamespace[key] = next
	in.mu.Unlock()
	old.stop()
	return true, nil
}
