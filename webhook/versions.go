package webhook

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/metadata"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
	"github.com/confighash/confighash/watches"
)

// Version is what the API server has of a source now.
type Version struct {
	Exists          bool
	ResourceVersion string
}

// Versions reads the current version of sources with consistent, metadata-only GETs:
// they go to etcd, not to the API server's watch cache, and carry no values.
//
// The admissions of a namespace share rounds of GETs, but only a round sent after each
// of them arrived, so that each still sees every write made before it: one round per
// namespace is in flight, and those that arrive meanwhile join the next, which GETs
// what all of them want once the round in flight answers. An admission waits for one
// round, not for a GET of each of its sources.
type Versions struct {
	meta    metadata.Interface
	door    watches.Door
	filter  sourcecache.Filter
	timeout time.Duration
	metrics Recorder

	mu sync.Mutex
	// next has a namespace while a round of it is in flight: the round that follows,
	// nil until an admission waits for it.
	next map[string]*round
	// slots bounds the GETs in flight in the process.
	slots chan struct{}
}

// round is the GETs of a set of sources, sent together.
type round struct {
	refs     map[confighash.SourceRef]bool
	done     chan struct{}
	versions map[confighash.SourceRef]Version
	errs     map[confighash.SourceRef]error
}

func newRound() *round {
	return &round{refs: map[confighash.SourceRef]bool{}, done: make(chan struct{})}
}

// NewVersions returns a reader of versions through meta, of the sources filter
// admits (the others do not exist for confighash); a round shared by several
// admissions gives up after timeout.
func NewVersions(meta metadata.Interface, door watches.Door, filter sourcecache.Filter, timeout time.Duration, metrics Recorder) *Versions {
	if metrics == nil {
		metrics = NoopRecorder{}
	}
	return &Versions{meta: meta, door: door, filter: filter, timeout: timeout, metrics: metrics, next: map[string]*round{},
		slots: make(chan struct{}, readsInFlight)}
}

// Get returns the current version of each source, from GETs sent after Get was called.
func (v *Versions) Get(ctx context.Context, namespace string, refs []confighash.SourceRef) (map[confighash.SourceRef]Version, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	v.mu.Lock()
	call, inflight := v.next[namespace]
	if call == nil {
		call = newRound()
	}
	for _, ref := range refs {
		call.refs[ref] = true
	}
	if inflight {
		// The round in flight may have read before this admission's sources were
		// written: wait for the next one.
		v.next[namespace] = call
	} else {
		v.next[namespace] = nil
		go v.send(namespace, call)
	}
	v.mu.Unlock()
	select {
	case <-call.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := make(map[confighash.SourceRef]Version, len(refs))
	for _, ref := range refs {
		if err := call.errs[ref]; err != nil {
			return nil, err
		}
		out[ref] = call.versions[ref]
	}
	return out, nil
}

// send GETs the sources of call, then sends the round that waited behind it, if any.
func (v *Versions) send(namespace string, call *round) {
	// Shared by several admissions: bounded by its own timeout, not one caller's.
	ctx, cancel := context.WithTimeout(context.Background(), v.timeout)
	refs := slices.Collect(maps.Keys(call.refs))
	call.versions = make(map[confighash.SourceRef]Version, len(refs))
	call.errs = make(map[confighash.SourceRef]error, len(refs))
	var mu sync.Mutex
	// As many GETs at once as one admission makes; an error is its source's alone.
	err := inParallel(ctx, v.slots, len(refs), func(ctx context.Context, i int) error {
		version, err := v.get(ctx, namespace, refs[i])
		mu.Lock()
		defer mu.Unlock()
		call.versions[refs[i]], call.errs[refs[i]] = version, err
		return nil
	})
	// What did not answer (no slot in time, a panic) has the error, never a version.
	for _, ref := range refs {
		if _, answered := call.errs[ref]; !answered {
			call.errs[ref] = fmt.Errorf("read the version of %s: %w", ref, err)
		}
	}
	cancel()
	close(call.done)
	v.mu.Lock()
	defer v.mu.Unlock()
	next := v.next[namespace]
	if next == nil {
		delete(v.next, namespace)
		return
	}
	v.next[namespace] = nil
	go v.send(namespace, next)
}

func (v *Versions) get(ctx context.Context, namespace string, ref confighash.SourceRef) (Version, error) {
	v.metrics.VersionRead(ref.Kind)
	// No resourceVersion: a consistent read, served by etcd.
	obj, err := v.meta.Resource(sourcecache.Resource(ref.Kind)).Namespace(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return Version{}, nil
	case err != nil:
		return Version{}, fmt.Errorf("read the version of %s: %w", ref, err)
	case !v.filter.Admits(obj.Labels):
		return Version{}, nil
	}
	return Version{Exists: true, ResourceVersion: obj.ResourceVersion}, nil
}

// Names lists the sources of a kind that exist in the namespace now, with a
// consistent, metadata-only list through the door, in its pages: what Reloader's name
// patterns are matched against where the cache does not hold the namespace. The
// Secrets Helm keeps releases in are left out, as in the source cache.
func (v *Versions) Names(ctx context.Context, namespace string, kind confighash.SourceKind) ([]string, error) {
	names, err := v.door.Names(ctx, sourceKinds[kind], namespace, v.filter.ListOptions(kind), func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return v.meta.Resource(sourcecache.Resource(kind)).Namespace(namespace).List(ctx, o)
	})
	if err != nil {
		return nil, fmt.Errorf("list the %ss of namespace %s: %w", kind, namespace, err)
	}
	return names, nil
}

// sourceKinds are the registered kinds of the sources read live.
var sourceKinds = map[confighash.SourceKind]watches.Kind{
	confighash.ConfigMap: watches.ConfigMaps, confighash.Secret: watches.Secrets, confighash.SecretProviderClass: watches.ProviderClassPodStatuses,
}
