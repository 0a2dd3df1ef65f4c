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
	return newInformers(namespaces, newInformer, func(*informer) cache.TransformFunc { return transform }, func() bool { return true })
}
