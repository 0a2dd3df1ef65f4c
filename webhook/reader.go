package webhook

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"golang.org/x/sync/errgroup"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
	"github.com/confighash/confighash/watches"
)

// LiveReader reads sources from the API server, in parallel. Values live only while
// their digests are computed.
type LiveReader struct {
	client  kubernetes.Interface
	door    watches.Door
	filter  sourcecache.Filter
	metrics Recorder
	// csi reads the Secrets Store CSI driver's pod statuses; nil: SecretProviderClasses
	// are absent.
	csi dynamic.Interface
	// slots bounds the reads in flight in the process (rule 9).
	slots chan struct{}
}

// Bounds on the live reads: of one admission, and of the process, whatever the number
// of sources and of admissions at once.
const (
	readsPerAdmission = 8
	readsInFlight     = 32
)

var _ SourceReader = (*LiveReader)(nil)

// inParallel calls f for 0 to n-1 at once, at most readsPerAdmission together and
// within the process's bound, slots; a panic is returned as an error, since the
// admission's recover does not reach these goroutines and the webhook never crashes.
func inParallel(ctx context.Context, slots chan struct{}, n int, f func(ctx context.Context, i int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(readsPerAdmission)
	for i := range n {
		g.Go(func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("internal error: %v", p)
				}
			}()
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			defer func() { <-slots }()
			return f(ctx, i)
		})
	}
	return g.Wait()
}

// NewLiveReader returns a reader that GETs every source; those filter does not admit
// are absent. With csi, it reads SecretProviderClasses from the pods' reports.
func NewLiveReader(client kubernetes.Interface, door watches.Door, filter sourcecache.Filter, metrics Recorder, csi dynamic.Interface) *LiveReader {
	if metrics == nil {
		metrics = NoopRecorder{}
	}
	return &LiveReader{client: client, door: door, filter: filter, metrics: metrics, slots: make(chan struct{}, readsInFlight), csi: csi}
}

// Read implements SourceReader. The trigger is not needed: a live read is current.
func (r *LiveReader) Read(ctx context.Context, namespace string, refs []confighash.SourceRef, _ []confighash.Trigger) (map[confighash.SourceRef]confighash.Source, error) {
	sources := make([]confighash.Source, len(refs))
	err := inParallel(ctx, r.slots, len(refs), func(ctx context.Context, i int) error {
		var err error
		sources[i], err = r.get(ctx, namespace, refs[i])
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make(map[confighash.SourceRef]confighash.Source, len(refs))
	for i, ref := range refs {
		out[ref] = sources[i]
	}
	return out, nil
}

// Names implements SourceReader with a list of whole objects through the door:
// LiveReader serves tests and SecretProviderClasses; the webhook lists the others
// through Versions, metadata only.
func (r *LiveReader) Names(ctx context.Context, namespace string, kind confighash.SourceKind) ([]string, error) {
	if r.filter.Ignored.Has(kind) {
		return nil, nil
	}
	if kind == confighash.SecretProviderClass {
		classes, err := sourcecache.ListProviderClasses(ctx, r.door, r.csi, namespace)
		return slices.Sorted(maps.Keys(classes)), err
	}
	return r.door.Names(ctx, sourceKinds[kind], namespace, r.filter.ListOptions(kind), func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		if kind == confighash.Secret {
			return r.client.CoreV1().Secrets(namespace).List(ctx, o)
		}
		return r.client.CoreV1().ConfigMaps(namespace).List(ctx, o)
	})
}

func (r *LiveReader) get(ctx context.Context, namespace string, ref confighash.SourceRef) (confighash.Source, error) {
	if r.filter.Ignored.Has(ref.Kind) {
		return confighash.AbsentSource(ref), nil // never read, as the watcher never caches it
	}
	r.metrics.SourceRead(ref.Kind, ReadFromLive)
	var src confighash.Source
	var err error
	switch ref.Kind {
	case confighash.ConfigMap:
		cm, e := r.client.CoreV1().ConfigMaps(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err = e; e == nil && r.filter.Admits(cm.Labels) {
			src = confighash.SourceOfConfigMap(cm)
		} else if e == nil {
			src = confighash.AbsentSource(ref)
		}
	case confighash.Secret:
		s, e := r.client.CoreV1().Secrets(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err = e; e == nil && r.filter.Admits(s.Labels) {
			src = confighash.SourceOfSecret(s)
		} else if e == nil {
			src = confighash.AbsentSource(ref)
		}
	case confighash.SecretProviderClass:
		classes, e := sourcecache.ListProviderClasses(ctx, r.door, r.csi, namespace)
		if err = e; e == nil {
			src = confighash.AbsentSource(ref)
			if d, ok := classes[ref.Name]; ok {
				src = d.Source
			}
		}
	default:
		return src, fmt.Errorf("unknown source kind %q", ref.Kind)
	}
	if apierrors.IsNotFound(err) {
		return confighash.AbsentSource(ref), nil
	}
	if err != nil {
		return src, fmt.Errorf("read %s: %w", ref, err)
	}
	return src, nil
}

// CachedReader answers from the cache when it can prove that the cache holds each
// source's current version (rule 4), and reads live what it cannot:
//   - A watcher's touch names what matters, the triggering source at its
//     resourceVersion: the cache answers once it holds that version.
//   - A create or update by a user or a tool names nothing, and a ConfigMap written just
//     before it, in the same apply, must be seen. A consistent, metadata-only GET of
//     each source tells its current resourceVersion (see Versions): the cache answers
//     for a source it holds at that version, waiting briefly for it to catch up, and a
//     source the API server does not have is absent.
type CachedReader struct {
	cache    *sourcecache.Cache
	live     *LiveReader
	versions *Versions
	metrics  Recorder
}

var _ SourceReader = (*CachedReader)(nil)

// NewCachedReader returns a reader over the cache that proves it current with versions
// and falls back to live. Make it before the cache runs: it asks the cache to tell it
// of each object stored.
func NewCachedReader(c *sourcecache.Cache, live *LiveReader, versions *Versions, metrics Recorder) *CachedReader {
	if metrics == nil {
		metrics = NoopRecorder{}
	}
	_ = c.NotifyStores() // cannot fail before the cache runs
	return &CachedReader{cache: c, live: live, versions: versions, metrics: metrics}
}

// Names implements SourceReader with the names the cache holds: a name pattern costs
// no list, however many or large a tenant's sources are (rules 10 and 11). What
// counts is still fresh (rule 4): Read proves each source a pattern matches current,
// or reads it live, and one deleted since is absent. What the cache may lack is a
// source created in the last milliseconds, before its watch event arrived: it is not
// matched at this admission. Its arrival in the watcher's cache makes the watcher look
// at the workload again, and a source that starts to count is met as rule 8 says:
// recorded without a rollout when the pods started after it was written, as in a
// `helm install` of both, rolled once otherwise. Where the cache does not hold the
// namespace, the names come from a list of metadata in small pages.
func (r *CachedReader) Names(ctx context.Context, namespace string, kind confighash.SourceKind) ([]string, error) {
	switch {
	case r.cache.Keeps(kind) && r.cache.Synced() && r.cache.Covers(namespace):
		return r.cache.Names(namespace, kind), nil
	case r.versions == nil || kind == confighash.SecretProviderClass:
		return r.live.Names(ctx, namespace, kind)
	}
	return r.versions.Names(ctx, namespace, kind)
}

// How long a source the API server has at a version the cache does not hold yet may
// take to reach the cache before it is read live: a watch event takes milliseconds.
const catchUpTimeout = 100 * time.Millisecond

// Read implements SourceReader.
func (r *CachedReader) Read(ctx context.Context, namespace string, refs []confighash.SourceRef, triggers []confighash.Trigger) (map[confighash.SourceRef]confighash.Source, error) {
	if !r.cache.Synced() || !r.cache.Covers(namespace) {
		return r.live.Read(ctx, namespace, refs, nil)
	}
	// The cache answers only for the kinds it keeps; for a SecretProviderClass, only at
	// the version a touch names: no object tells its current version, only the pods'
	// reports, which a live read lists.
	cached := func(ref confighash.SourceRef) bool {
		return r.cache.Keeps(ref.Kind) && (len(triggers) > 0 || ref.Kind != confighash.SecretProviderClass)
	}
	var fresh func(confighash.SourceRef) (confighash.Source, bool)
	if len(triggers) > 0 {
		fresh = r.freshAsTriggered(namespace, triggers)
	} else {
		var err error
		if fresh, err = r.freshAsServed(ctx, namespace, slices.DeleteFunc(slices.Clone(refs), func(ref confighash.SourceRef) bool { return !cached(ref) })); err != nil {
			return r.live.Read(ctx, namespace, refs, nil)
		}
	}
	out := make(map[confighash.SourceRef]confighash.Source, len(refs))
	var misses []confighash.SourceRef
	for _, ref := range refs {
		if !cached(ref) {
			misses = append(misses, ref)
		} else if src, ok := fresh(ref); ok {
			r.metrics.SourceRead(ref.Kind, ReadFromCache)
			out[ref] = src
		} else {
			misses = append(misses, ref)
		}
	}
	if len(misses) > 0 {
		live, err := r.live.Read(ctx, namespace, misses, nil)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, live)
	}
	return out, nil
}

// freshAsTriggered answers for a source from the cache unless a trigger names it at a
// version the cache does not hold yet. A source unknown to the synced cache is absent:
// if it was just created, its creation triggers a touch of its own.
func (r *CachedReader) freshAsTriggered(namespace string, triggers []confighash.Trigger) func(confighash.SourceRef) (confighash.Source, bool) {
	want := make(map[confighash.SourceRef]string, len(triggers))
	for _, t := range triggers {
		want[t.SourceRef] = t.ResourceVersion
	}
	return func(ref confighash.SourceRef) (confighash.Source, bool) {
		d, ok := r.cache.Lookup(namespace, ref)
		rv, triggered := want[ref]
		switch {
		case triggered && (!ok || !atLeast(d.ResourceVersion, rv)):
			return confighash.Source{}, false
		case ok:
			return d.Source, true
		default:
			return confighash.AbsentSource(ref), true
		}
	}
}

// freshAsServed reads the current version of each source and answers for it from the
// cache once the cache holds that version; a source the API server does not have is
// absent.
func (r *CachedReader) freshAsServed(ctx context.Context, namespace string, refs []confighash.SourceRef) (func(confighash.SourceRef) (confighash.Source, bool), error) {
	served, err := r.versions.Get(ctx, namespace, refs)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(catchUpTimeout)
	return func(ref confighash.SourceRef) (confighash.Source, bool) {
		v := served[ref]
		if !v.Exists {
			return confighash.AbsentSource(ref), true
		}
		for {
			stored := r.cache.Stored() // before the lookup, so no store is missed
			if d, ok := r.cache.Lookup(namespace, ref); ok && atLeast(d.ResourceVersion, v.ResourceVersion) {
				return d.Source, true
			}
			wait := time.Until(deadline)
			if wait <= 0 || ctx.Err() != nil {
				return confighash.Source{}, false
			}
			timer := time.NewTimer(wait)
			select {
			case <-stored:
			case <-timer.C:
			case <-ctx.Done():
			}
			timer.Stop()
		}
	}, nil
}

// atLeast reports whether resourceVersion have is provably as new as want. Kubernetes
// resourceVersions are etcd revisions: integers that grow. Anything else proves
// nothing.
func atLeast(have, want string) bool {
	h, err1 := strconv.ParseUint(have, 10, 64)
	w, err2 := strconv.ParseUint(want, 10, 64)
	return err1 == nil && err2 == nil && h >= w
}
