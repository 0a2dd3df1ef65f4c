package watches

import (
	"context"
	"errors"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

func TestInformersForAWatchedNamespaceOnly(t *testing.T) {
	client := fake.NewClientset()
	newInformer := func(ns string) cache.SharedIndexInformer {
		return coreinformers.NewConfigMapInformer(client, ns, 0, cache.Indexers{})
	}
	all, _ := testInformers(nil, newInformer, nil)
	if all.For("a") == nil || all.For("a") != all.For("b") {
		t.Error("cluster-wide: want one informer for every namespace")
	}
	listed, _ := testInformers([]string{"a", "b"}, newInformer, nil)
	if listed.For("a") == nil || listed.For("b") == nil || listed.For("a") == listed.For("b") {
		t.Error("listed: want one informer for each of a and b")
	}
	if listed.For("c") != nil {
		t.Error("listed: an informer for c, which is not listed")
	}
}

func TestInformersOfARefusedNamespaceDoNotHoldBackTheOthers(t *testing.T) {
	client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "cfg"}})
	client.PrependReactor("list", "configmaps", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if action.GetNamespace() == "refused" {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no RoleBinding"))
		}
		return false, nil, nil
	})
	in, _ := testInformers([]string{"a", "refused"}, func(ns string) cache.SharedIndexInformer {
		return coreinformers.NewConfigMapInformer(client, ns, 0, cache.Indexers{})
	}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	in.Run(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), in.HasSynced) {
		t.Fatal("a refused namespace keeps the informers from syncing")
	}
	if in.For("refused") != nil {
		t.Error("the refused namespace is served, from an empty cache")
	}
	if inf := in.For("a"); inf == nil || len(inf.GetStore().List()) != 1 {
		t.Error("namespace a is not served")
	}
	if swapped, err := in.Relist(ctx, "refused"); swapped || err != nil {
		t.Errorf("Relist(refused) = %v, %v; want the refused namespace left as it was", swapped, err)
	}
}

// TestInformersListInTurns: with one turn, one informer lists at a time, across the
// sets that share the turns, relists too; one whose list fails gives its turn back.
func TestInformersListInTurns(t *testing.T) {
	var listing, most atomic.Int32
	failing := make(chan struct{}, 1)
	newInformer := func(ns string) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(listsFirst{&cache.ListWatch{
			ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
				if ns == "failing" {
					select {
					case failing <- struct{}{}:
					default:
					}
					return nil, apierrors.NewInternalError(errors.New("etcd is down"))
				}
				n := listing.Add(1)
				defer listing.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(50 * time.Millisecond) // long enough for a list without a turn to overlap
				return &corev1.ConfigMapList{Items: []corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg"}}}}, nil
			},
			WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
				return watch.NewFake(), nil
			},
		}}, &corev1.ConfigMap{}, 0, cache.Indexers{})
	}
	turns := NewTurns(1)
	set := func(namespaces ...string) *Informers {
		in, err := newInformers(namespaces, newInformer, func(*informer) cache.TransformFunc { return nil }, func() bool { return true }, turns)
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	fails, lists := set("failing"), set("a", "b", "c")
	fails.Run(ctx)
	select {
	case <-failing: // it holds the one turn, and fails
	case <-ctx.Done():
		t.Fatal("the failing informer never listed")
	}
	lists.Run(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), lists.HasSynced) {
		t.Fatal("an informer whose list fails held its turn: the others never listed")
	}
	if swapped, err := lists.Relist(ctx, "a"); !swapped || err != nil {
		t.Fatalf("Relist(a) = %v, %v; want swapped", swapped, err)
	}
	if got := most.Load(); got != 1 {
		t.Errorf("%d informers listed at once, want 1: the turns", got)
	}
}

// listsFirst lists, then watches: the reflector streams the first list through a watch
// only from a client that says it can.
type listsFirst struct{ *cache.ListWatch }

func (listsFirst) IsWatchListSemanticsUnSupported() bool { return true }

// TestRelistPutsEveryObjectThroughTheTransformAgain: what the transform keeps may
// depend on more than the object (the watcher's on the namespace's mode); a relist
// replaces what the informer holds with what the transform makes of it now.
func TestRelistPutsEveryObjectThroughTheTransformAgain(t *testing.T) {
	for _, namespaces := range [][]string{nil, {"a", "b"}} {
		client := fake.NewClientset(
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "one"}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "two"}})
		var stamp atomic.Value
		stamp.Store("first")
		in, err := testInformers(namespaces, func(ns string) cache.SharedIndexInformer {
			return coreinformers.NewConfigMapInformer(client, ns, 0, cache.Indexers{})
		}, func(obj any) (any, error) {
			if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Labels == nil {
				cm.Labels = map[string]string{"stamp": stamp.Load().(string)}
			}
			return obj, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var initialAdds atomic.Int32
		if err := in.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(_ any, initial bool) {
			if initial {
				initialAdds.Add(1)
			}
		}}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		in.Run(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), in.HasSynced) {
			t.Fatal("not synced")
		}
		stamps := func() map[string]string {
			out := map[string]string{}
			for _, ns := range []string{"a", "b"} {
				for _, obj := range in.For(ns).GetStore().List() {
					cm := obj.(*corev1.ConfigMap)
					out[cm.Namespace+"/"+cm.Name] = cm.Labels["stamp"]
				}
			}
			return out
		}
		stamp.Store("second")
		swapped, err := in.Relist(ctx, "a")
		if !swapped || err != nil {
			t.Fatalf("%v: Relist(a) = %v, %v; want swapped", namespaces, swapped, err)
		}
		// One informer of the whole cluster lists everything again; one per namespace,
		// only that namespace.
		want, wantAdds := map[string]string{"a/one": "second", "b/two": "second"}, int32(4)
		if namespaces != nil {
			want["b/two"], wantAdds = "first", 3
			if swapped, _ := in.Relist(ctx, "c"); swapped {
				t.Errorf("%v: Relist(c) swapped an informer in, for a namespace not watched", namespaces)
			}
		}
		if got := stamps(); !maps.Equal(got, want) {
			t.Errorf("%v: after Relist(a), objects hold %v, want %v", namespaces, got, want)
		}
		if got := initialAdds.Load(); got != wantAdds {
			t.Errorf("%v: %d adds from a first list, want %d: each object's in the first list and in the relist", namespaces, got, wantAdds)
		}
		cancel()
	}
}

// testInformers are informers that start at once, with transform as it is.
func testInformers(namespaces []string, newInformer func(string) cache.SharedIndexInformer, transform cache.TransformFunc) (*Informers, error) {
	return newInformers(namespaces, newInformer, func(*informer) cache.TransformFunc { return transform }, func() bool { return true }, nil)
}
