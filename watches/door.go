// Package watches is the one door through which both components watch the cluster
// (ARCHITECTURE.md, rule 13). Every informer either of them runs is opened here, from a
// Kind registered in Kinds: a tenant's kinds only for the namespaces confighash acts in
// (the objects of the others are kept as their key alone), every object bounded in
// bytes before the code reads it, a component's informers listing a few at a time
// (Turns), and the whole read set in one list, which the flood test reads. A layout
// test refuses an informer made anywhere else.
package watches

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash"
)

// Gate says how confighash acts in a namespace (namespaces.Gate).
type Gate interface {
	Known(namespace string) bool
	Mode(namespace string) confighash.Mode
	HasSynced() bool
}

// Door opens the informers of a tenant's kinds for one component.
type Door struct {
	// Namespaces are those the install watches; none, the whole cluster.
	Namespaces []string
	// Gate says where confighash acts: only there is a tenant's object read whole.
	Gate Gate
	// Over, when set, is told of an object over its kind's bound as it is read, once
	// for as long as it stays over.
	Over func(kind Kind, namespace, name string, bytes int)
	// Turns bounds the informers that list at once, across every kind opened through
	// the door (NewTurns(ListsAtOnce)); nil, no bound.
	Turns *Turns
}

// Open returns the informers of a tenant's kind, one for each namespace watched or one
// for the whole cluster, that store what transform makes of each object of a namespace
// confighash acts in and the key alone of the others, and of an object over the kind's
// bound. They run once the gate has synced: until then, no namespace's mode is known.
func (d Door) Open(kind Kind, newInformer func(namespace string) cache.SharedIndexInformer, transform cache.TransformFunc) (*Informers, error) {
	if !kind.registered() || kind.Scope != Tenant {
		return nil, fmt.Errorf("open %s: not a tenant's kind registered in watches.Kinds", kind.Name)
	}
	if d.Gate == nil {
		return nil, fmt.Errorf("open %s: a tenant's kind needs the namespaces' gate", kind.Name)
	}
	return newInformers(d.Namespaces, newInformer, func(inf *informer) cache.TransformFunc {
		return d.admit(kind, inf, transform)
	}, d.Gate.HasSynced, d.Turns)
}

// Informer returns inf, an informer of a kind no tenant writes (Cluster, Install or
// System), with what transform keeps of each object, and objects over the kind's
// bound kept as their key alone.
func Informer(kind Kind, inf cache.SharedIndexInformer, transform cache.TransformFunc) (cache.SharedIndexInformer, error) {
	if !kind.registered() || kind.Scope == Tenant || kind.Listed {
		return nil, fmt.Errorf("open %s: a tenant's kind, one only listed, or one not registered in watches.Kinds: use Door.Open or Door.List", kind.Name)
	}
	d := Door{}
	if err := inf.SetTransform(d.admit(kind, nil, transform)); err != nil {
		return nil, fmt.Errorf("open %s: %w", kind.Name, err)
	}
	return inf, nil
}

// admit is the transform of the informer inf: the key alone of an object of a
// namespace confighash does not act in, or over the bound, what transform makes of
// the others.
func (d Door) admit(kind Kind, inf *informer, transform cache.TransformFunc) cache.TransformFunc {
	if transform == nil {
		transform = func(obj any) (any, error) { return obj, nil }
	}
	return func(obj any) (any, error) {
		o, err := meta.Accessor(obj)
		if err != nil {
			return transform(obj) // a tombstone, or what the transform made already
		}
		ns, name := o.GetNamespace(), o.GetName()
		if inf != nil && ns != "" && d.off(ns) {
			inf.keep(ns)
			// Read again after the mark: a mode that rose meanwhile either is seen
			// here, or finds the mark and has the namespace read again.
			if d.off(ns) {
				return KeyOf(ns, name), nil
			}
		}
		if kind.MaxBytes > 0 {
			if n := sizeOf(obj); n > kind.MaxBytes {
				if d.Over != nil && !d.toldOver(inf, ns, name) {
					d.Over(kind, ns, name, n)
				}
				return &Key{key: cache.NewObjectName(ns, name).String(), Over: true}, nil
			}
		}
		return transform(obj)
	}
}

// off reports whether confighash does not act in the namespace, as far as the gate
// knows: a namespace it does not know yet is read whole.
func (d Door) off(namespace string) bool {
	return d.Gate.Known(namespace) && d.Gate.Mode(namespace) == confighash.ModeOff
}

// toldOver reports whether the object is held already as over its bound: it was told.
func (d Door) toldOver(inf *informer, namespace, name string) bool {
	if inf == nil {
		return false
	}
	held, ok, _ := inf.GetStore().GetByKey(cache.NewObjectName(namespace, name).String())
	k, isKey := held.(*Key)
	return ok && isKey && k.Over
}

// sizeOf is the object's size as the API server sends it in protobuf, or, for an
// object the API server sends only as JSON (a custom resource), its JSON.
func sizeOf(obj any) int {
	switch o := obj.(type) {
	case interface{ Size() int }:
		return o.Size()
	case *unstructured.Unstructured:
		b, err := o.MarshalJSON()
		if err != nil {
			return 0
		}
		return len(b)
	}
	return 0
}

// Key is all an informer keeps of an object confighash does not read: its key,
// "namespace/name". Handlers and lookups find no view in it, and pass it by.
type Key struct {
	key string
	// Over is set for an object over its kind's bound: it is not acted on.
	Over bool
}

var (
	_ runtime.Object            = (*Key)(nil)
	_ metav1.ObjectMetaAccessor = (*Key)(nil)
)

// String is the key, "namespace/name".
func (k *Key) String() string { return k.key }

// Namespace is the object's namespace.
func (k *Key) Namespace() string { ns, _, _ := strings.Cut(k.key, "/"); return ns }

// GetObjectKind implements runtime.Object.
func (k *Key) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// GetObjectMeta gives the key as the name with no namespace: the informers key the
// store by that string, the one Key holds, instead of joining a new one.
func (k *Key) GetObjectMeta() metav1.Object { return &metav1.ObjectMeta{Name: k.key} }

// DeepCopyObject implements runtime.Object.
func (k *Key) DeepCopyObject() runtime.Object { c := *k; return &c }

// KeyOf is the key alone of the namespace's object of this name.
func KeyOf(namespace, name string) *Key {
	return &Key{key: cache.NewObjectName(namespace, name).String()}
}

// NamespaceIndex indexes objects by namespace, as cache.MetaNamespaceIndexFunc does,
// and keys alone too: one over its bound may still have to be found.
func NamespaceIndex(obj any) ([]string, error) {
	if k, ok := obj.(*Key); ok {
		return []string{k.Namespace()}, nil
	}
	return cache.MetaNamespaceIndexFunc(obj)
}
