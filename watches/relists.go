package watches

import (
	"context"
	"sync"

	"github.com/rs/zerolog"
)

// Relists reads namespaces again, one batch at a time, through the informers that
// kept their objects as keys alone: once confighash acts in a namespace, what it did
// not read there must be read. With informers of the whole cluster, one relist serves
// every namespace of the batch.
type Relists struct {
	sets map[string]*Informers
	log  zerolog.Logger

	mu sync.Mutex
	// pending holds the namespaces to read again, each with the sets that read it again
	// whether or not they keep its objects as keys (the watcher's workloads kept as
	// keys in a mode that rose).
	pending map[string]map[string]bool
	wake    chan struct{}
}

// NewRelists reads namespaces again through the sets of informers, by name.
func NewRelists(sets map[string]*Informers, log zerolog.Logger) *Relists {
	return &Relists{sets: sets, log: log, pending: map[string]map[string]bool{}, wake: make(chan struct{}, 1)}
}

// Add asks for the namespace to be read again by the sets that keep its objects as
// keys, and by the sets named.
func (r *Relists) Add(namespace string, sets ...string) {
	r.mu.Lock()
	if r.pending[namespace] == nil {
		r.pending[namespace] = map[string]bool{}
	}
	for _, s := range sets {
		r.pending[namespace][s] = true
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Needed reports whether a set keeps the namespace's objects as keys alone.
func (r *Relists) Needed(namespace string) bool {
	for _, in := range r.sets {
		if in.Keyed(namespace) {
			return true
		}
	}
	return false
}

func (r *Relists) take() map[string]map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	batch := r.pending
	r.pending = map[string]map[string]bool{}
	return batch
}

// Run reads the namespaces asked for again until ctx is done; swapped is called for
// each set whose informer was swapped in, then done with each namespace of the batch.
func (r *Relists) Run(ctx context.Context, swapped func(set string), done func(namespace string)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		batch := r.take()
		for name, in := range r.sets {
			listed := map[*informer]bool{}
			for ns, named := range batch {
				inf := in.serving(ns)
				if inf == nil || listed[inf] || !named[name] && !inf.keeps(ns) {
					continue
				}
				listed[inf] = true
				ok, err := in.Relist(ctx, ns)
				if err != nil {
					r.log.Error().Err(err).Str("namespace", ns).Str("kind", name).Msg("cannot read the namespace again")
				}
				if ok {
					swapped(name)
				}
			}
		}
		for ns := range batch {
			done(ns)
		}
	}
}
