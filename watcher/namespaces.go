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

// namespaceMode is how confighash acts in a namespace.
type namespaceMode int

const (
	modeOff     namespaceMode = iota
	modeOptedIn               // on the workloads that opt in
	modeEvery                 // on every workload that does not opt out
)

// NamespaceSelectors select the namespaces confighash acts in.
type NamespaceSelectors struct {
	// OptedIn selects those where it acts on the workloads that opt in.
	OptedIn labels.Selector
	// Every selects those where it acts on every workload that does not opt out; it
	// wins where both select.
	Every labels.Selector
}

// DefaultNamespaceSelectors select namespaces by confighash's injection label.
func DefaultNamespaceSelectors() NamespaceSelectors {
	return NamespaceSelectors{
		OptedIn: labels.SelectorFromSet(labels.Set{confighash.InjectionLabel: confighash.InjectionEnabled}),
		Every:   labels.SelectorFromSet(labels.Set{confighash.InjectionLabel: confighash.InjectionEvery}),
	}
}

// modeOf is the namespace's mode. One being deleted is off: its sources and workloads
// are going away, and touching them is waste.
func (s NamespaceSelectors) modeOf(n *corev1.Namespace) namespaceMode {
	if n == nil || n.DeletionTimestamp != nil {
		return modeOff
	}
	set := labels.Set(n.Labels)
	switch {
	case s.Every != nil && s.Every.Matches(set):
		return modeEvery
	case s.OptedIn != nil && s.OptedIn.Matches(set):
		return modeOptedIn
	}
	return modeOff
}

// namespaceGate tells how confighash acts in a namespace.
type namespaceGate interface {
	mode(namespace string) namespaceMode
	hasSynced() bool
	run(ctx context.Context)
}

// clusterNamespaces watches every namespace: few, small objects.
type clusterNamespaces struct {
	informer  cache.SharedIndexInformer
	selectors NamespaceSelectors
}

// newClusterNamespaces calls onEnabled when a namespace starts being acted in, or in
// another mode, after the first list.
func newClusterNamespaces(client kubernetes.Interface, selectors NamespaceSelectors, onEnabled func(namespace string)) (*clusterNamespaces, error) {
	c := &clusterNamespaces{coreinformers.NewNamespaceInformer(client, 0, cache.Indexers{}), selectors}
	_, err := c.informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if n, ok := obj.(*corev1.Namespace); ok && !initial && selectors.modeOf(n) != modeOff {
				onEnabled(n.Name)
			}
		},
		UpdateFunc: func(old, obj any) {
			o, _ := old.(*corev1.Namespace)
			n, ok := obj.(*corev1.Namespace)
			if now := selectors.modeOf(n); ok && now != modeOff && now != selectors.modeOf(o) {
				onEnabled(n.Name)
			}
		},
	})
	return c, err
}

func (c *clusterNamespaces) mode(ns string) namespaceMode {
	obj, exists, err := c.informer.GetStore().GetByKey(ns)
	n, ok := obj.(*corev1.Namespace)
	if err != nil || !exists || !ok {
		return modeOff
	}
	return c.selectors.modeOf(n)
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
	selectors NamespaceSelectors
	names     []string
	interval  time.Duration
	onEnabled func(namespace string)
	log       zerolog.Logger
	// Only refresh uses these: the namespaces read at least once, and those whose
	// last read failed.
	read, failing map[string]bool

	mu     sync.RWMutex
	state  map[string]namespaceMode
	synced bool
}

func newListedNamespaces(client kubernetes.Interface, selectors NamespaceSelectors, names []string, interval time.Duration, onEnabled func(string), log zerolog.Logger) *listedNamespaces {
	return &listedNamespaces{client: client, selectors: selectors, names: names, interval: interval, onEnabled: onEnabled, log: log,
		read: map[string]bool{}, failing: map[string]bool{}, state: map[string]namespaceMode{}}
}

func (l *listedNamespaces) mode(ns string) namespaceMode {
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

// refresh reads every namespace once. One that is gone or refused counts as off;
// after any other error, such as a timeout, it keeps its last state. Once all have
// been read, a namespace that starts being acted in, or in another mode, is passed to
// onEnabled.
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
		now := modeOff
		if err == nil {
			now = l.selectors.modeOf(n)
		}
		if wasSynced && now != modeOff && now != state[name] {
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
