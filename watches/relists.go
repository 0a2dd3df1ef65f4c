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
	// pending holds the namespaces to read again, each with whether every set reads it
	// again (the watcher's workloads kept as keys in a mode that rose) or only the sets
	// that keep its objects as keys.
	pending map[string]bool
	wake    chan struct{}
}

// NewRelists reads namespaces again through the sets of informers, by name.
func NewRelists(sets map[string]*Informers, log zerolog.Logger) *Relists {
	return &Relists{sets: sets, log: log, pending: map[string]bool{}, wake: make(chan struct{}, 1)}
}

// Add asks for the namespace to be read again by the sets that keep its objects as
// keys, and by every set with all.
func (r *Relists) Add(namespace string, all bool) {
	r.mu.Lock()
	r.pending[namespace] = r.pending[namespace] || all
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

func (r *Relists) take() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	batch := r.pending
	r.pending = map[string]bool{}
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
			for ns, all := range batch {
				inf := in.serving(ns)
				if inf == nil || listed[inf] || !all && !inf.keeps(ns) {
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
