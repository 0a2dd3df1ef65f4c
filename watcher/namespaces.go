package watcher

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
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

func newClusterNamespaces(client kubernetes.Interface) *clusterNamespaces {
	labelled := func(o *metav1.ListOptions) {
		o.LabelSelector = labels.Set{confighash.InjectionLabel: confighash.InjectionEnabled}.String()
	}
	return &clusterNamespaces{coreinformers.NewFilteredNamespaceInformer(client, 0, cache.Indexers{}, labelled)}
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
	client   kubernetes.Interface
	names    []string
	interval time.Duration
	log      zerolog.Logger

	failing map[string]bool // only refresh uses it

	mu     sync.RWMutex
	state  map[string]bool
	synced bool
}

func newListedNamespaces(client kubernetes.Interface, names []string, interval time.Duration, log zerolog.Logger) *listedNamespaces {
	return &listedNamespaces{client: client, names: names, interval: interval, log: log, state: map[string]bool{}, failing: map[string]bool{}}
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

// refresh reads every namespace once. One that cannot be read counts as not enabled,
// and its error is logged when it starts failing.
func (l *listedNamespaces) refresh(ctx context.Context) {
	state := make(map[string]bool, len(l.names))
	for _, name := range l.names {
		n, err := l.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if ctx.Err() != nil {
			return
		}
		state[name] = err == nil && enabledNamespace(n)
		if err != nil && !l.failing[name] {
			l.log.Warn().Err(err).Str("namespace", name).Msg("cannot read a watched namespace; not acting in it")
		}
		l.failing[name] = err != nil
	}
	l.mu.Lock()
	l.state, l.synced = state, true
	l.mu.Unlock()
}
