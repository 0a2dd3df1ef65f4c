package watcher

import (
	"sync"

	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/namespaces"
	"github.com/confighash/confighash/watches"
)

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
// act in never gets here: the door keeps its key alone, unread (watches.Door).
func (k *keptKeys) transform(full cache.TransformFunc) cache.TransformFunc {
	return func(obj any) (any, error) {
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
		return watches.KeyOf(v.Namespace, v.Name), nil
	}
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
