// Package sourcecache is how both components see the cluster's ConfigMaps and Secrets:
// informers whose transform replaces each object by per-key digests as it arrives, so
// no value is ever kept. Its Informers, one per watched namespace or one for the whole
// cluster, also serve the watcher's workload informers in a namespaced install.
package sourcecache

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/watches"
)

// secretFieldSelector selects the Secrets that may count: all but those Helm keeps
// releases in, which are large, many, and never used by a pod, so they are filtered out
// on the server.
const secretFieldSelector = "type!=helm.sh/release.v1"

// Resource returns the API resource of a ConfigMap or Secret source kind.
func Resource(kind confighash.SourceKind) schema.GroupVersionResource {
	if kind == confighash.Secret {
		return corev1.SchemeGroupVersion.WithResource("secrets")
	}
	return corev1.SchemeGroupVersion.WithResource("configmaps")
}

// Filter selects the sources that may count at all, on the server where it can: the
// cache never even lists the others, and a live read treats them as absent.
type Filter struct {
	// Labels, when set, is the label selector a source must match.
	Labels labels.Selector
	// Ignored are the kinds never listed, cached or read: none of them counts
	// (confighash.Vocabulary.Ignored).
	Ignored confighash.SourceKinds
}

// ListOptions returns the options of a list or watch of sources of the kind.
func (f Filter) ListOptions(kind confighash.SourceKind) metav1.ListOptions {
	o := metav1.ListOptions{LabelSelector: f.selector().String()}
	if kind == confighash.Secret {
		o.FieldSelector = secretFieldSelector
	}
	return o
}

// Admits reports whether a source with these labels may count.
func (f Filter) Admits(sourceLabels map[string]string) bool {
	return f.selector().Matches(labels.Set(sourceLabels))
}

// notSnapshot selects what is not a pinned workload's snapshot: a copy, never a source.
var notSnapshot, _ = labels.NewRequirement(confighash.LabelSnapshotOf, selection.DoesNotExist, nil)

// selector is Labels, and not a snapshot.
func (f Filter) selector() labels.Selector {
	if f.Labels == nil {
		return labels.NewSelector().Add(*notSnapshot)
	}
	return f.Labels.Add(*notSnapshot)
}

// Digested is what the cache keeps of a ConfigMap or Secret: its namespace, name and
// resourceVersion, when it was created and last written, and its digest-only view.
// Never a value, and no more: the cache keeps one per source of the cluster.
type Digested struct {
	// key is "namespace/name", the informers' key; Namespace and Name are cut from it,
	// and so is a ConfigMap's or Secret's Source.Name, so all share one string.
	key             string
	ResourceVersion string
	Source          confighash.Source
	// created is its creation time, in Unix seconds; rewritten, how long after that
	// the API server recorded its last write (the latest of its managed fields' times),
	// in seconds. Both are to the second, as the API server keeps them; an offset, not
	// a second time, keeps a Digested in 144 bytes.
	created   int64
	rewritten uint32
	// Uniform, for a SecretProviderClass, says every pod that mounts it reports the
	// same versions (see ProviderClass).
	Uniform bool
	// Applied says a tool that writes a set of objects in turn writes it (see
	// appliedWithOthers): the others may follow its write by milliseconds.
	Applied bool
}

var (
	_ runtime.Object            = (*Digested)(nil)
	_ metav1.ObjectMetaAccessor = (*Digested)(nil)
)

// GetObjectKind implements runtime.Object.
func (d *Digested) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object. Cached objects are never modified, and
// Source's digests are built once by the transform, so sharing them is safe.
func (d *Digested) DeepCopyObject() runtime.Object {
	c := *d
	return &c
}

// GetObjectMeta implements metav1.ObjectMetaAccessor, which the informers key objects
// by; it is built when asked, not kept. Its name is the whole key and its namespace
// empty: the informers then key the object by the string it holds, where a namespace
// would have them join a new one for each source. The informers' namespace index is
// byNamespace, which reads Namespace.
func (d *Digested) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: d.key, ResourceVersion: d.ResourceVersion}
}

// Namespace is the object's namespace.
func (d *Digested) Namespace() string { ns, _, _ := strings.Cut(d.key, "/"); return ns }

// Name is the object's name: for a pod's report of a SecretProviderClass, the report's
// own, where Source.Name is the class's.
func (d *Digested) Name() string { _, name, _ := strings.Cut(d.key, "/"); return name }

// Created is when it was created.
func (d *Digested) Created() time.Time { return time.Unix(d.created, 0) }

// Written is when the API server recorded its last write.
func (d *Digested) Written() time.Time { return time.Unix(d.created+int64(d.rewritten), 0) }

// SetTimes sets when it was created and last written.
func (d *Digested) SetTimes(created, written time.Time) {
	d.created = created.Unix()
	d.rewritten = uint32(min(max(0, written.Unix()-d.created), math.MaxUint32))
}

// toDigested is the informers' transform: it replaces a ConfigMap or Secret by its
// Digested form before it is stored, so values are dropped as they arrive.
func toDigested(obj any) (any, error) {
	var src confighash.Source
	var meta *metav1.ObjectMeta
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		src, meta = confighash.SourceOfConfigMap(o), &o.ObjectMeta
	case *corev1.Secret:
		src, meta = confighash.SourceOfSecret(o), &o.ObjectMeta
	case *unstructured.Unstructured:
		return PodStatus(o), nil
	default:
		return obj, nil // tombstones and objects already transformed
	}
	return NewDigested(meta, src), nil
}

// NewDigested returns the Digested of an object of this metadata and view.
func NewDigested(meta metav1.Object, src confighash.Source) *Digested {
	d := &Digested{key: meta.GetNamespace() + "/" + meta.GetName(), ResourceVersion: meta.GetResourceVersion(), Source: src}
	if src.Name == meta.GetName() {
		d.Source.Name = d.Name()
	}
	d.SetTimes(meta.GetCreationTimestamp().Time, lastWritten(meta))
	d.Applied = appliedWithOthers(meta)
	return d
}

// helmRelease is the annotation Helm puts on every object of a release.
const helmRelease = "meta.helm.sh/release-name"

// appliedWithOthers reports whether the object is written by a tool that writes a set
// of objects one after the other: Helm marks each with its release, kubectl apply
// with the configuration it applied, and a server-side apply (kubectl apply
// --server-side, Flux, Argo CD's, Helm 4's) records its manager as an Apply.
func appliedWithOthers(meta metav1.Object) bool {
	a := meta.GetAnnotations()
	if _, ok := a[helmRelease]; ok {
		return true
	}
	if _, ok := a[corev1.LastAppliedConfigAnnotation]; ok {
		return true
	}
	return slices.ContainsFunc(meta.GetManagedFields(), func(f metav1.ManagedFieldsEntry) bool {
		return f.Operation == metav1.ManagedFieldsOperationApply
	})
}

// sourceIndexers are the indexes of ConfigMaps and Secrets.
var sourceIndexers = cache.Indexers{cache.NamespaceIndex: byNamespace}

// byNamespace indexes Digested by namespace, as cache.MetaNamespaceIndexFunc does
// other objects (see GetObjectMeta).
func byNamespace(obj any) ([]string, error) {
	d, ok := obj.(*Digested)
	if !ok {
		return nil, nil // kept as its key alone: nothing looks it up by namespace
	}
	return []string{d.Namespace()}, nil
}

// lastWritten is when the object was last written, as far as its metadata tells.
func lastWritten(meta metav1.Object) time.Time {
	t := meta.GetCreationTimestamp().Time
	for _, f := range meta.GetManagedFields() {
		if f.Time != nil && f.Time.After(t) {
			t = f.Time.Time
		}
	}
	return t
}

// Cache keeps every ConfigMap and Secret of the watched namespaces as a Digested.
type Cache struct {
	informers map[confighash.SourceKind]*watches.Informers
	// generation counts the objects the informers took in, counted before they are
	// stored: what was read while it did not move is still what the cache holds.
	generation atomic.Uint64

	mu sync.Mutex
	// stored, while a reader waits on it, is closed at the next object the cache
	// stores (with NotifyStores); nil while none waits, so a store costs no channel.
	stored chan struct{}
	// written, set by Writes, is told of each ConfigMap and Secret taken in with its
	// metadata whole.
	written func(*Digested, metav1.Object)
}

// New returns a cache fed by informers on client, opened through the door for the
// namespaces it watches, of the sources filter admits; Run starts them. With csi, it
// also keeps the SecretProviderClasses that pods mount, from the Secrets Store CSI
// driver's pod statuses.
func New(client kubernetes.Interface, door watches.Door, filter Filter, csi dynamic.Interface) (*Cache, error) {
	options := func(kind confighash.SourceKind) func(*metav1.ListOptions) {
		want := filter.ListOptions(kind)
		return func(o *metav1.ListOptions) { o.LabelSelector, o.FieldSelector = want.LabelSelector, want.FieldSelector }
	}
	type source struct {
		kind        watches.Kind
		newInformer func(ns string) cache.SharedIndexInformer
	}
	sources := map[confighash.SourceKind]source{
		confighash.ConfigMap: {watches.ConfigMaps, func(ns string) cache.SharedIndexInformer {
			return coreinformers.NewFilteredConfigMapInformer(client, ns, 0, sourceIndexers, options(confighash.ConfigMap))
		}},
		confighash.Secret: {watches.Secrets, func(ns string) cache.SharedIndexInformer {
			return coreinformers.NewFilteredSecretInformer(client, ns, 0, sourceIndexers, options(confighash.Secret))
		}},
	}
	if csi != nil {
		byClass := cache.Indexers{cache.NamespaceIndex: byNamespace, providerClassIndex: indexByProviderClass}
		sources[confighash.SecretProviderClass] = source{watches.ProviderClassPodStatuses, func(ns string) cache.SharedIndexInformer {
			return dynamicinformer.NewFilteredDynamicInformer(csi, PodStatuses, ns, 0, byClass, nil).Informer()
		}}
	}
	for _, kind := range filter.Ignored.All() {
		delete(sources, kind)
	}
	c := &Cache{informers: map[confighash.SourceKind]*watches.Informers{}}
	counted := func(obj any) (any, error) {
		c.generation.Add(1)
		out, err := toDigested(obj)
		if d, ok := out.(*Digested); ok && c.written != nil {
			switch o := obj.(type) {
			case *corev1.ConfigMap:
				c.written(d, o)
			case *corev1.Secret:
				c.written(d, o)
			}
		}
		return out, err
	}
	for kind, s := range sources {
		in, err := door.Open(s.kind, s.newInformer, counted)
		if err != nil {
			return nil, err
		}
		c.informers[kind] = in
	}
	return c, nil
}

// Writes has the cache tell written of each ConfigMap and Secret it takes in, with its
// metadata whole (who wrote it, its UID), before all but its Digested is dropped; a
// pod's report of a SecretProviderClass is not the class's write. Call it before Run.
// written runs on the informers' goroutines, and must be quick.
func (c *Cache) Writes(written func(d *Digested, meta metav1.Object)) { c.written = written }

// Informers are the cache's informers by kind, for Relists.
func (c *Cache) Informers() map[string]*watches.Informers {
	out := map[string]*watches.Informers{}
	for kind, in := range c.informers {
		out[string(kind)] = in
	}
	return out
}

// NotifyStores has the cache close Stored each time it stores an object; call it
// before Run. Only a reader that waits for a version to arrive needs it: the watcher,
// which never waits, leaves its informers without the handler.
func (c *Cache) NotifyStores() error {
	notify := func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.stored != nil {
			close(c.stored)
			c.stored = nil
		}
	}
	return c.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	})
}

// Stored is closed once the cache has stored an object after Stored was called, if
// NotifyStores was: one waiting for a version to arrive looks again then.
func (c *Cache) Stored() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stored == nil {
		c.stored = make(chan struct{})
	}
	return c.stored
}

// Generation moves whenever the cache takes in an object, before it holds it.
func (c *Cache) Generation() uint64 { return c.generation.Load() }

// Run runs the informers until ctx is done.
func (c *Cache) Run(ctx context.Context) error {
	for _, in := range c.informers {
		in.Run(ctx)
	}
	<-ctx.Done()
	return nil
}

// AddEventHandler adds a handler to every informer; add it before Run.
func (c *Cache) AddEventHandler(h cache.ResourceEventHandler) error {
	for _, in := range c.informers {
		if err := in.AddEventHandler(h); err != nil {
			return err
		}
	}
	return nil
}

// Synced reports whether every informer has listed once.
func (c *Cache) Synced() bool {
	for _, in := range c.informers {
		if !in.HasSynced() {
			return false
		}
	}
	return true
}

// WaitSynced waits until the informers have listed once, or ctx is done.
func (c *Cache) WaitSynced(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), func() bool { return c.Synced() })
}

// Covers reports whether the cache holds the namespace's ConfigMaps and Secrets. What
// it does not hold, it cannot say is absent.
func (c *Cache) Covers(namespace string) bool {
	for _, in := range c.informers {
		if in.For(namespace) == nil {
			return false
		}
	}
	return true
}

// Keeps reports whether the cache keeps sources of the kind.
func (c *Cache) Keeps(kind confighash.SourceKind) bool {
	_, ok := c.informers[kind]
	return ok
}

// Lookup returns the cached object, if any; for a SecretProviderClass, what the pods
// that mount it report (see ProviderClass).
func (c *Cache) Lookup(namespace string, ref confighash.SourceRef) (*Digested, bool) {
	in, ok := c.informers[ref.Kind]
	if !ok {
		return nil, false
	}
	inf := in.For(namespace)
	if inf == nil {
		return nil, false
	}
	if ref.Kind == confighash.SecretProviderClass {
		objs, _ := inf.GetIndexer().ByIndex(providerClassIndex, namespace+"/"+ref.Name)
		reports := make([]*Digested, 0, len(objs))
		for _, o := range objs {
			if d, ok := o.(*Digested); ok {
				reports = append(reports, d)
			}
		}
		d := ProviderClass(reports)
		return d, d != nil
	}
	obj, exists, err := inf.GetStore().GetByKey(namespace + "/" + ref.Name)
	if err != nil || !exists {
		return nil, false
	}
	d, ok := obj.(*Digested)
	return d, ok
}

// Names returns the names of the namespace's sources of a kind the cache holds.
func (c *Cache) Names(namespace string, kind confighash.SourceKind) []string {
	in, ok := c.informers[kind]
	if !ok {
		return nil
	}
	inf := in.For(namespace)
	if inf == nil {
		return nil
	}
	if kind == confighash.SecretProviderClass {
		var names []string
		for _, key := range inf.GetIndexer().ListIndexFuncValues(providerClassIndex) {
			if ns, name, _ := strings.Cut(key, "/"); ns == namespace {
				names = append(names, name)
			}
		}
		return names
	}
	keys, _ := inf.GetIndexer().IndexKeys(cache.NamespaceIndex, namespace)
	names := make([]string, len(keys))
	for i, key := range keys {
		_, names[i], _ = cache.SplitMetaNamespaceKey(key)
	}
	return names
}
