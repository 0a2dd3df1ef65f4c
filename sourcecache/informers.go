package sourcecache

import (
	"context"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// Informers holds one informer per watched namespace, or a single one for the whole
// cluster. Per-namespace informers let a namespaced install work with RoleBindings
// alone: a list across namespaces needs a cluster-wide grant.
type Informers struct {
	byNamespace map[string]cache.SharedIndexInformer // "" for the whole cluster
	// refused marks the watched namespaces whose list was refused (no RoleBinding
	// there, or the namespace is gone). Until they can be listed, they count as
	// synced and are not served, so that one of them does not keep the others from
	// being served.
	refused map[string]*atomic.Bool
}

// NewInformers calls newInformer for each namespace, or once with "" (all namespaces)
// when there are none.
func NewInformers(namespaces []string, newInformer func(namespace string) cache.SharedIndexInformer) *Informers {
	in := &Informers{byNamespace: map[string]cache.SharedIndexInformer{}, refused: map[string]*atomic.Bool{}}
	if len(namespaces) == 0 {
		in.byNamespace[metav1.NamespaceAll] = newInformer(metav1.NamespaceAll)
		return in
	}
	for _, ns := range namespaces {
		inf, refused := newInformer(ns), &atomic.Bool{}
		// Cannot fail before the informer runs.
		_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
				refused.Store(true)
			}
			cache.DefaultWatchErrorHandler(ctx, r, err)
		})
		in.byNamespace[ns], in.refused[ns] = inf, refused
	}
	return in
}

// For returns the informer that holds the namespace's objects; nil when none watches
// it or its list was refused.
func (in *Informers) For(namespace string) cache.SharedIndexInformer {
	if all, ok := in.byNamespace[metav1.NamespaceAll]; ok {
		return all
	}
	inf, ok := in.byNamespace[namespace]
	if !ok || (in.refused[namespace].Load() && !inf.HasSynced()) {
		return nil
	}
	return inf
}

// List returns the objects of every namespace watched.
func (in *Informers) List() []any {
	var objs []any
	for _, inf := range in.byNamespace {
		objs = append(objs, inf.GetStore().List()...)
	}
	return objs
}

// SetTransform sets the transform of every informer; call it before Run.
func (in *Informers) SetTransform(t cache.TransformFunc) error {
	for _, inf := range in.byNamespace {
		if err := inf.SetTransform(t); err != nil {
			return err
		}
	}
	return nil
}

// AddEventHandler adds h to every informer; call it before Run.
func (in *Informers) AddEventHandler(h cache.ResourceEventHandler) error {
	for _, inf := range in.byNamespace {
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
	}
	return nil
}

// Run starts every informer; they stop when ctx is done.
func (in *Informers) Run(ctx context.Context) {
	for _, inf := range in.byNamespace {
		go inf.RunWithContext(ctx)
	}
}

// HasSynced reports whether every informer has listed once, or had its list refused.
func (in *Informers) HasSynced() bool {
	for ns, inf := range in.byNamespace {
		if !inf.HasSynced() && (ns == metav1.NamespaceAll || !in.refused[ns].Load()) {
			return false
		}
	}
	return true
}
