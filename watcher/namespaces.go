package watcher

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash"
)

// namespaceGate tells whether confighash acts in a namespace: labelled for injection,
// and not being deleted (its sources and workloads are going away; touching them is
// waste).
type namespaceGate interface {
	enabled(namespace string) bool
	hasSynced() bool
	run(ctx context.Context)
}

func enabledNamespace(n *corev1.Namespace) bool {
	return n.Labels[confighash.InjectionLabel] == confighash.InjectionEnabled && n.DeletionTimestamp == nil
}

// clusterNamespaces watches every labelled namespace.
type clusterNamespaces struct{ informer cache.SharedIndexInformer }

// newClusterNamespaces calls onEnabled when a namespace is labelled after the first list.
func newClusterNamespaces(client kubernetes.Interface, onEnabled func(namespace string)) (*clusterNamespaces, error) {
	labelled := func(o *metav1.ListOptions) {
		o.LabelSelector = labels.Set{confighash.InjectionLabel: confighash.InjectionEnabled}.String()
	}
	c := &clusterNamespaces{coreinformers.NewFilteredNamespaceInformer(client, 0, cache.Indexers{}, labelled)}
	// A label added shows as an addition: the informer lists labelled namespaces only.
	_, err := c.informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if n, ok := obj.(*corev1.Namespace); ok && !initial && enabledNamespace(n) {
				onEnabled(n.Name)
			}
		},
	})
	return c, err
}

func (c *clusterNamespaces) enabled(ns string) bool {
	obj, exists, err := c.informer.GetStore().GetByKey(ns)
	n, ok := obj.(*corev1.Namespace)
	return err == nil && exists && ok && enabledNamespace(n)
}

func (c *clusterNamespaces) hasSynced() bool { return c.informer.HasSynced() }

func (c *clusterNamespaces) run(ctx context.Context) { go c.informer.RunWithContext(ctx) }

// namespacePollInterval is how soon a namespaced install sees a namespace labelled,
// unlabelled or deleted.
const namespacePollInterval = 10 * time.Second

// listedNamespaces reads each namespace of a namespaced install every interval. A
// RoleBinding in a namespace grants a get of that Namespace object, but a list or a
// watch of namespaces needs a cluster-wide grant, so an informer cannot be used.
type listedNamespaces struct {
	client    kubernetes.Interface
	names     []string
	interval  time.Duration
	onEnabled func(namespace string)
	log       zerolog.Logger
	// Only refresh uses these: the namespaces read at least once, and those whose
	// last read failed.
	read, failing map[string]bool

	mu     sync.RWMutex
	state  map[string]bool
	synced bool
}

func newListedNamespaces(client kubernetes.Interface, names []string, interval time.Duration, onEnabled func(string), log zerolog.Logger) *listedNamespaces {
	return &listedNamespaces{client: client, names: names, interval: interval, onEnabled: onEnabled, log: log,
		read: map[string]bool{}, failing: map[string]bool{}, state: map[string]bool{}}
}

func (l *listedNamespaces) enabled(ns string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.state[ns]
}

func (l *listedNamespaces) hasSynced() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.synced
}

func (l *listedNamespaces) run(ctx context.Context) {
	go func() {
		t := time.NewTicker(l.interval)
		defer t.Stop()
		for {
			l.refresh(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// refresh reads every namespace once. One that is gone or refused counts as not
// enabled; after any other error, such as a timeout, it keeps its last state. Once all
// have been read, a namespace that becomes enabled is passed to onEnabled.
func (l *listedNamespaces) refresh(ctx context.Context) {
	l.mu.RLock()
	state, wasSynced := maps.Clone(l.state), l.synced
	l.mu.RUnlock()
	var enabled []string
	for _, name := range l.names {
		n, err := l.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if ctx.Err() != nil {
			return
		}
		if err != nil && !l.failing[name] {
			l.log.Warn().Err(err).Str("namespace", name).Msg("cannot read a watched namespace")
		}
		l.failing[name] = err != nil
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
			continue
		}
		now := err == nil && enabledNamespace(n)
		if wasSynced && now && !state[name] {
			enabled = append(enabled, name)
		}
		state[name], l.read[name] = now, true
	}
	l.mu.Lock()
	l.state, l.synced = state, len(l.read) == len(l.names)
	l.mu.Unlock()
	for _, name := range enabled {
		l.onEnabled(name)
	}
}
