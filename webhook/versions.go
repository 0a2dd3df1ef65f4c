package webhook

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
)

// Version is what the API server has of a source now.
type Version struct {
	Exists          bool
	ResourceVersion string
}

// Versions reads the current version of sources with consistent, metadata-only GETs:
// they go to etcd, not to the API server's watch cache, and carry no values.
//
// Admissions that want the same source at the same time share a GET, but only one sent
// after each of them arrived, so that each still sees every write made before it: at
// most one GET per source is in flight, and those that arrive meanwhile share the next.
type Versions struct {
	meta    metadata.Interface
	filter  sourcecache.Filter
	timeout time.Duration
	metrics Recorder

	mu    sync.Mutex
	calls map[versionKey]*versionCalls
	// slots bounds the GETs in flight in the process.
	slots chan struct{}
}

type versionKey struct {
	namespace string
	ref       confighash.SourceRef
}

// versionCalls are the GET in flight for one source and the one that follows it.
type versionCalls struct{ inflight, next *versionCall }

type versionCall struct {
	done    chan struct{}
	version Version
	err     error
}

// NewVersions returns a reader of versions through meta, of the sources filter
// admits (the others do not exist for confighash); a GET shared by several admissions
// gives up after timeout.
func NewVersions(meta metadata.Interface, filter sourcecache.Filter, timeout time.Duration, metrics Recorder) *Versions {
	if metrics == nil {
		metrics = NoopRecorder{}
	}
	return &Versions{meta: meta, filter: filter, timeout: timeout, metrics: metrics, calls: map[versionKey]*versionCalls{},
		slots: make(chan struct{}, readsInFlight)}
}

// Get returns the current version of the source, from a GET sent after Get was called.
func (v *Versions) Get(ctx context.Context, namespace string, ref confighash.SourceRef) (Version, error) {
	key := versionKey{namespace, ref}
	v.mu.Lock()
	calls, ok := v.calls[key]
	if !ok {
		calls = &versionCalls{}
		v.calls[key] = calls
	}
	var call *versionCall
	switch {
	case calls.inflight == nil:
		call = &versionCall{done: make(chan struct{})}
		calls.inflight = call
		go v.send(key, call)
	case calls.next != nil:
		call = calls.next
	default:
		// The GET in flight may have been read before this admission's sources were
		// written: wait for the next one.
		call = &versionCall{done: make(chan struct{})}
		calls.next = call
	}
	v.mu.Unlock()
	select {
	case <-call.done:
		return call.version, call.err
	case <-ctx.Done():
		return Version{}, ctx.Err()
	}
}

// send GETs the source for call, then sends the call that waited behind it, if any.
func (v *Versions) send(key versionKey, call *versionCall) {
	// Shared by several admissions: bounded by its own timeout, not one caller's.
	ctx, cancel := context.WithTimeout(context.Background(), v.timeout)
	select {
	case v.slots <- struct{}{}:
		call.version, call.err = v.get(ctx, key)
		<-v.slots
	case <-ctx.Done():
		call.err = fmt.Errorf("read the version of %s: %w", key.ref, ctx.Err())
	}
	cancel()
	close(call.done)
	v.mu.Lock()
	defer v.mu.Unlock()
	calls := v.calls[key]
	calls.inflight, calls.next = calls.next, nil
	if calls.inflight == nil {
		delete(v.calls, key)
		return
	}
	go v.send(key, calls.inflight)
}

func (v *Versions) get(ctx context.Context, key versionKey) (Version, error) {
	v.metrics.VersionRead(key.ref.Kind)
	// No resourceVersion: a consistent read, served by etcd.
	obj, err := v.meta.Resource(sourcecache.Resource(key.ref.Kind)).Namespace(key.namespace).Get(ctx, key.ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return Version{}, nil
	case err != nil:
		return Version{}, fmt.Errorf("read the version of %s: %w", key.ref, err)
	case !v.filter.Admits(obj.Labels):
		return Version{}, nil
	}
	return Version{Exists: true, ResourceVersion: obj.ResourceVersion}, nil
}

// Names lists the sources of a kind that exist in the namespace now, with a
// consistent, metadata-only list: what Reloader's name patterns are matched against.
// The Secrets Helm keeps releases in are left out, as in the source cache.
func (v *Versions) Names(ctx context.Context, namespace string, kind confighash.SourceKind) ([]string, error) {
	list, err := v.meta.Resource(sourcecache.Resource(kind)).Namespace(namespace).List(ctx, v.filter.ListOptions(kind))
	if err != nil {
		return nil, fmt.Errorf("list the %ss of namespace %s: %w", kind, namespace, err)
	}
	names := make([]string, len(list.Items))
	for i, item := range list.Items {
		names[i] = item.Name
	}
	return names, nil
}
