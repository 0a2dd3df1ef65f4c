package webhook

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash/watches"
)

// SnapshotCap bounds each namespace's snapshots, in number and in bytes, so that what
// one namespace's users write (or forged reviews make) costs that namespace alone and
// never fills etcd. It knows each namespace's totals from informers of the labelled
// ConfigMaps and Secrets that keep a name and a size per snapshot, never the data,
// summed when asked: a relist that reads a namespace again counts nothing twice.
type SnapshotCap struct {
	maxCount  int
	maxBytes  int64
	informers []*watches.Informers

	mu sync.Mutex
	// reserved are the snapshots admitted and not seen by the informers yet, by
	// namespace and name, so that admissions at the same moment cannot pass the cap
	// together; each is dropped once seen, or after reservedFor.
	reserved map[string]map[string]reservation
}

type reservation struct {
	bytes int64
	at    time.Time
}

// reservedFor is how long a reservation holds at most: longer than an admission, and
// than the informers take to see a create.
const reservedFor = time.Minute

type snapshotUsage struct {
	count int
	bytes int64
}

// NewSnapshotCap returns the cap of maxCount snapshots and maxBytes bytes of data per
// namespace, counted in the namespaces the door opens; 0 is no cap.
func NewSnapshotCap(client kubernetes.Interface, door watches.Door, maxCount int, maxBytes int64) (*SnapshotCap, error) {
	c := &SnapshotCap{maxCount: maxCount, maxBytes: maxBytes, reserved: map[string]map[string]reservation{}}
	byNamespace := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	for _, kind := range []struct {
		watches.Kind
		newInformer func(ns string) cache.SharedIndexInformer
	}{
		{watches.SnapshotConfigMaps, func(ns string) cache.SharedIndexInformer {
			return coreinformers.NewFilteredConfigMapInformer(client, ns, 0, byNamespace, watches.SnapshotConfigMaps.WithSelector)
		}},
		{watches.SnapshotSecrets, func(ns string) cache.SharedIndexInformer {
			return coreinformers.NewFilteredSecretInformer(client, ns, 0, byNamespace, watches.SnapshotSecrets.WithSelector)
		}},
	} {
		in, err := door.Open(kind.Kind, kind.newInformer, toSnapshotSize)
		if err != nil {
			return nil, err
		}
		seen := func(obj any) {
			if s, ok := obj.(*snapshotSize); ok {
				c.mu.Lock()
				defer c.mu.Unlock()
				c.release(s.namespace, s.name)
			}
		}
		if err := in.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) }}); err != nil {
			return nil, err
		}
		c.informers = append(c.informers, in)
	}
	return c, nil
}

// Informers are the cap's informers, for Relists.
func (c *SnapshotCap) Informers() map[string]*watches.Informers {
	return map[string]*watches.Informers{"snapshot ConfigMaps": c.informers[0], "snapshot Secrets": c.informers[1]}
}

// used is the count and bytes of the namespace's snapshots the informers hold.
func (c *SnapshotCap) used(namespace string) snapshotUsage {
	var u snapshotUsage
	for _, in := range c.informers {
		inf := in.For(namespace)
		if inf == nil {
			continue // not read yet: a namespace confighash just started acting in
		}
		objs, _ := inf.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
		for _, obj := range objs {
			if s, ok := obj.(*snapshotSize); ok {
				u.count, u.bytes = u.count+1, u.bytes+s.bytes
			}
		}
	}
	return u
}

// release drops the reservation of a snapshot; c.mu is held.
func (c *SnapshotCap) release(namespace, name string) {
	delete(c.reserved[namespace], name)
	if len(c.reserved[namespace]) == 0 {
		delete(c.reserved, namespace)
	}
}

// Run runs the informers until ctx is done.
func (c *SnapshotCap) Run(ctx context.Context) error {
	for _, in := range c.informers {
		in.Run(ctx)
	}
	<-ctx.Done()
	return nil
}

// Synced reports whether the informers have listed once: until then the totals are
// not known, and the webhook is not ready.
func (c *SnapshotCap) Synced() bool {
	for _, in := range c.informers {
		if !in.HasSynced() {
			return false
		}
	}
	return true
}

// SnapshotCapError is returned when new snapshots would take a namespace over its cap.
type SnapshotCapError struct {
	// Limit is the cap reached: "count" or "bytes".
	Limit string
	msg   string
}

func (e *SnapshotCapError) Error() string { return e.msg }

// reserve reserves room in the namespace for the snapshots, by name and bytes, or
// returns a *SnapshotCapError when they do not fit; a dry run only checks.
func (c *SnapshotCap) reserve(namespace string, snapshots map[string]int64, dryRun bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.used(namespace)
	for name, r := range c.reserved[namespace] {
		if time.Since(r.at) > reservedFor {
			c.release(namespace, name)
			continue
		}
		u.count, u.bytes = u.count+1, u.bytes+r.bytes
	}
	var count int
	var bytes int64
	for name, b := range snapshots {
		if _, held := c.reserved[namespace][name]; !held {
			count, bytes = count+1, bytes+b
		}
	}
	switch {
	case c.maxCount > 0 && u.count+count > c.maxCount:
		return &SnapshotCapError{"count", fmt.Sprintf("the namespace has %d snapshots, and %d more would exceed its cap of %d", u.count, count, c.maxCount)}
	case c.maxBytes > 0 && u.bytes+bytes > c.maxBytes:
		return &SnapshotCapError{"bytes", fmt.Sprintf("the namespace's snapshots hold %d bytes, and %d more would exceed its cap of %d", u.bytes, bytes, c.maxBytes)}
	}
	if dryRun {
		return nil
	}
	if c.reserved[namespace] == nil {
		c.reserved[namespace] = map[string]reservation{}
	}
	now := time.Now()
	for name, b := range snapshots {
		c.reserved[namespace][name] = reservation{b, now}
	}
	return nil
}

// snapshotSize is what the cap keeps of a snapshot: where it is and the bytes it holds.
type snapshotSize struct {
	namespace, name, resourceVersion string
	bytes                            int64
}

var (
	_ runtime.Object            = (*snapshotSize)(nil)
	_ metav1.ObjectMetaAccessor = (*snapshotSize)(nil)
)

func (s *snapshotSize) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object; a snapshotSize is never modified.
func (s *snapshotSize) DeepCopyObject() runtime.Object { c := *s; return &c }

// GetObjectMeta implements metav1.ObjectMetaAccessor, which the informers key objects by.
func (s *snapshotSize) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: s.namespace, Name: s.name, ResourceVersion: s.resourceVersion}
}

// toSnapshotSize is the informers' transform: the data is dropped as it arrives.
func toSnapshotSize(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		return &snapshotSize{o.Namespace, o.Name, o.ResourceVersion, dataBytes(o.Data) + dataBytes(o.BinaryData)}, nil
	case *corev1.Secret:
		return &snapshotSize{o.Namespace, o.Name, o.ResourceVersion, dataBytes(o.Data)}, nil
	}
	return obj, nil // tombstones and objects already transformed
}

// dataBytes is the size of a snapshot's data as the cap counts it: keys and values.
func dataBytes[V string | []byte](data map[string]V) int64 {
	var n int64
	for k, v := range data {
		n += int64(len(k) + len(v))
	}
	return n
}
