package webhook

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// Informers holds one informer per watched namespace, or a single one under "" for the
// whole cluster. Per-namespace informers let a namespaced install work with
// RoleBindings alone: a list across namespaces needs a cluster-wide grant.
type Informers map[string]cache.SharedIndexInformer

// NewInformers calls newInformer for each namespace, or once with "" (all namespaces)
// when there are none.
func NewInformers(namespaces []string, newInformer func(namespace string) cache.SharedIndexInformer) Informers {
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	in := make(Informers, len(namespaces))
	for _, ns := range namespaces {
		in[ns] = newInformer(ns)
	}
	return in
}

// For returns the informer that holds the namespace's objects; nil when none watches it.
func (in Informers) For(namespace string) cache.SharedIndexInformer {
	if all, ok := in[metav1.NamespaceAll]; ok {
		return all
	}
	return in[namespace]
}

// SetTransform sets the transform of every informer; call it before Run.
func (in Informers) SetTransform(t cache.TransformFunc) error {
	for _, inf := range in {
		if err := inf.SetTransform(t); err != nil {
			return err
		}
	}
	return nil
}

// AddEventHandler adds h to every informer; call it before Run.
func (in Informers) AddEventHandler(h cache.ResourceEventHandler) error {
	for _, inf := range in {
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
	}
	return nil
}

// Run starts every informer; they stop when ctx is done.
func (in Informers) Run(ctx context.Context) {
	for _, inf := range in {
		go inf.RunWithContext(ctx)
	}
}

// HasSynced reports whether every informer has listed once.
func (in Informers) HasSynced() bool {
	for _, inf := range in {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}
