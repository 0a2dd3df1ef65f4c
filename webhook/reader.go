package webhook

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
)

// LiveReader reads sources from the API server, in parallel. Values live only while
// their digests are computed.
type LiveReader struct {
	client  kubernetes.Interface
	metrics Recorder
}

var _ SourceReader = (*LiveReader)(nil)

// NewLiveReader returns a reader that GETs every source.
func NewLiveReader(client kubernetes.Interface, metrics Recorder) *LiveReader {
	if metrics == nil {
		metrics = NoopRecorder{}
	}
	return &LiveReader{client: client, metrics: metrics}
}

// Read implements SourceReader. The trigger is not needed: a live read is current.
func (r *LiveReader) Read(ctx context.Context, namespace string, refs []confighash.SourceRef, _ []confighash.Trigger) (map[confighash.SourceRef]confighash.Source, error) {
	sources := make([]confighash.Source, len(refs))
	errs := make([]error, len(refs))
	var wg sync.WaitGroup
	for i, ref := range refs {
		wg.Go(func() { sources[i], errs[i] = r.get(ctx, namespace, ref) })
	}
	wg.Wait()
	out := make(map[confighash.SourceRef]confighash.Source, len(refs))
	for i, ref := range refs {
		if errs[i] != nil {
			return nil, errs[i]
		}
		out[ref] = sources[i]
	}
	return out, nil
}

func (r *LiveReader) get(ctx context.Context, namespace string, ref confighash.SourceRef) (confighash.Source, error) {
	r.metrics.SourceRead(ref.Kind, ReadFromLive)
	var src confighash.Source
	var err error
	switch ref.Kind {
	case confighash.ConfigMap:
		cm, e := r.client.CoreV1().ConfigMaps(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err = e; e == nil {
			src = confighash.SourceOfConfigMap(cm)
		}
	case confighash.Secret:
		s, e := r.client.CoreV1().Secrets(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err = e; e == nil {
			src = confighash.SourceOfSecret(s)
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

// CachedReader answers from the cache when it provably holds what matters and reads
// live otherwise (DESIGN rule 4). Only a watcher's touch names what matters: the
// triggering source at its resourceVersion. A create or update by a user or a tool
// names nothing, so the ConfigMap created just before in the same apply is read live.
type CachedReader struct {
	cache   *sourcecache.Cache
	live    *LiveReader
	metrics Recorder
}

var _ SourceReader = (*CachedReader)(nil)

// NewCachedReader returns a reader over cache that falls back to live.
func NewCachedReader(c *sourcecache.Cache, live *LiveReader, metrics Recorder) *CachedReader {
	if metrics == nil {
		metrics = NoopRecorder{}
	}
	return &CachedReader{cache: c, live: live, metrics: metrics}
}

// Read implements SourceReader.
func (r *CachedReader) Read(ctx context.Context, namespace string, refs []confighash.SourceRef, triggers []confighash.Trigger) (map[confighash.SourceRef]confighash.Source, error) {
	if len(triggers) == 0 || !r.cache.Synced() || !r.cache.Covers(namespace) {
		return r.live.Read(ctx, namespace, refs, nil)
	}
	want := make(map[confighash.SourceRef]string, len(triggers))
	for _, t := range triggers {
		want[t.SourceRef] = t.ResourceVersion
	}
	out := make(map[confighash.SourceRef]confighash.Source, len(refs))
	var misses []confighash.SourceRef
	for _, ref := range refs {
		d, ok := r.cache.Lookup(namespace, ref)
		rv, triggered := want[ref]
		switch {
		case triggered && (!ok || !atLeast(d.ResourceVersion, rv)):
			// The cache may not have seen the change that triggered the touch yet.
			misses = append(misses, ref)
		case ok:
			r.metrics.SourceRead(ref.Kind, ReadFromCache)
			out[ref] = d.Source
		default:
			// Unknown to a synced cache: absent. If it was just created, its creation
			// triggers a touch of its own.
			r.metrics.SourceRead(ref.Kind, ReadFromCache)
			out[ref] = confighash.AbsentSource(ref)
		}
	}
	if len(misses) > 0 {
		live, err := r.live.Read(ctx, namespace, misses, nil)
		if err != nil {
			return nil, err
		}
		for ref, src := range live {
			out[ref] = src
		}
	}
	return out, nil
}

// atLeast reports whether resourceVersion have is provably as new as want. Kubernetes
// resourceVersions are etcd revisions: integers that grow. Anything else proves
// nothing.
func atLeast(have, want string) bool {
	h, err1 := strconv.ParseUint(have, 10, 64)
	w, err2 := strconv.ParseUint(want, 10, 64)
	return err1 == nil && err2 == nil && h >= w
}
