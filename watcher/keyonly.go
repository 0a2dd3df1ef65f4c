package watcher

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/namespaces"
)

// keyOnly is all the watcher keeps of a workload confighash does not act on in its
// namespace's mode: the informers' key, "namespace/name". Most workloads of a large
// cluster never opt in; a view of each would cost about 1 KiB.
type keyOnly struct{ key string }

var (
	_ runtime.Object            = (*keyOnly)(nil)
	_ metav1.ObjectMetaAccessor = (*keyOnly)(nil)
)

func (k *keyOnly) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// GetObjectMeta gives the key as the name with no namespace: the informers key the
// store by that string, the one keyOnly holds, instead of joining a new one.
func (k *keyOnly) GetObjectMeta() metav1.Object { return &metav1.ObjectMeta{Name: k.key} }

func (k *keyOnly) DeepCopyObject() runtime.Object { return &keyOnly{k.key} }

// byNamespace indexes the views by namespace; keys alone are not indexed, since
// nothing looks them up by namespace.
func byNamespace(obj any) ([]string, error) {
	if v, ok := obj.(*view); ok {
		return []string{v.Namespace}, nil
	}
	return nil, nil
}

// keptKeys remembers, per namespace, the lowest mode a workload there was kept as its
// key alone under: when the namespace's mode rises above it, those workloads must be
// read again, since what confighash now acts on was not kept.
type keptKeys struct {
	gate namespaces.Gate

	mu     sync.Mutex
	lowest map[string]confighash.Mode
}

func newKeptKeys(gate namespaces.Gate) *keptKeys {
	return &keptKeys{gate: gate, lowest: map[string]confighash.Mode{}}
}

// transform keeps only the key of a workload confighash does not act on in its
// namespace's current mode, and the view full makes of the others, and of every
// workload of a namespace not read yet. A workload of a namespace confighash does not
// act in is not read beyond its key: its annotations, whoever wrote them, cost nothing.
func (k *keptKeys) transform(full cache.TransformFunc) cache.TransformFunc {
	return func(obj any) (any, error) {
		if key, ok := k.offKey(obj); ok {
			return key, nil
		}
		out, err := full(obj)
		v, ok := out.(*view)
		if err != nil || !ok || !k.gate.Known(v.Namespace) {
			return out, err
		}
		mode := k.gate.Mode(v.Namespace)
		// One with bad annotations is kept whole, to be told: a typo may be what keeps
		// it from opting in. It costs its own namespace.
		if _, acts := v.PolicyIn(mode); acts || len(v.Problems) > 0 {
			return v, nil
		}
		k.keep(v.Namespace, mode)
		// Read again after the mark: a mode that rose meanwhile either is seen here,
		// or finds the mark and has the namespace read again.
		if k.gate.Mode(v.Namespace) != mode {
			return v, nil
		}
		return &keyOnly{v.Namespace + "/" + v.Name}, nil
	}
}

// offKey returns the key alone of a workload of a namespace confighash does not act
// in, as transform would after reading it whole.
func (k *keptKeys) offKey(obj any) (*keyOnly, bool) {
	o, err := meta.Accessor(obj)
	if err != nil {
		return nil, false
	}
	ns := o.GetNamespace()
	if ns == "" || !k.gate.Known(ns) || k.gate.Mode(ns) != confighash.ModeOff {
		return nil, false
	}
	k.keep(ns, confighash.ModeOff)
	if k.gate.Mode(ns) != confighash.ModeOff {
		return nil, false // it rose meanwhile: read it whole
	}
	return &keyOnly{ns + "/" + o.GetName()}, true
}

func (k *keptKeys) keep(namespace string, mode confighash.Mode) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if lowest, ok := k.lowest[namespace]; !ok || mode < lowest {
		k.lowest[namespace] = mode
	}
}

// rose reports whether the namespace's mode rose above one a workload there was kept
// as its key under, and forgets it: the caller reads the namespace again.
func (k *keptKeys) rose(namespace string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	lowest, ok := k.lowest[namespace]
	if !ok || lowest >= k.gate.Mode(namespace) {
		return false
	}
	delete(k.lowest, namespace)
	return true
}

// relists reads namespaces again for the watcher, one batch at a time: with
// informers of the whole cluster, one relist serves every namespace asked for meanwhile.
type relists struct {
	mu      sync.Mutex
	pending map[string]bool
	wake    chan struct{}
}

func newRelists() *relists {
	return &relists{pending: map[string]bool{}, wake: make(chan struct{}, 1)}
}

func (r *relists) add(namespace string) {
	r.mu.Lock()
	r.pending[namespace] = true
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *relists) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for ns := range r.pending {
		out = append(out, ns)
	}
	clear(r.pending)
	return out
}

// relist reads the workloads of namespaces whose mode rose again, then checks them as
// a namespace confighash starts acting in is checked, until ctx is done.
func (w *Watcher) relist(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.relists.wake:
		}
		batch := w.relists.take()
		// Informers of the whole cluster list it all again, once for the batch.
		listed := batch
		if len(w.cfg.Watched) == 0 {
			listed = []string{metav1.NamespaceAll}
		}
		for _, ns := range listed {
			for kind, in := range w.workloads {
				swapped, err := in.Relist(ctx, ns)
				if err != nil {
					w.cfg.Log.Error().Err(err).Str("namespace", ns).Str("kind", kind).Msg("cannot read the workloads again")
				}
				if swapped {
					w.workloadsGeneration.Add(1)
					w.cfg.Metrics.Relisted()
				}
			}
		}
		for _, ns := range batch {
			w.cfg.Log.Info().Str("namespace", ns).Msg("workloads read again: the namespace's mode now acts on more of them")
			w.enqueueSpread(w.inNamespace(ns, nil))
		}
	}
}
