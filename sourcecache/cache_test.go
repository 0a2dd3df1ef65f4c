package sourcecache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
)

func TestDigestKeepsNoValues(t *testing.T) {
	big := bytes.Repeat([]byte("s"), 1<<20)
	obj, err := toDigested(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", ResourceVersion: "7",
			Labels: map[string]string{"l": "v"}, Annotations: map[string]string{confighash.AnnotationIgnore: "true", "big": string(big)},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Data: map[string][]byte{"password": big},
	})
	if err != nil {
		t.Fatal(err)
	}
	d, ok := obj.(*Digested)
	if !ok {
		t.Fatalf("toDigested() returned %T", obj)
	}
	if d.Name() != "db" || d.Namespace() != "ns" || d.Source.Name != "db" || d.ResourceVersion != "7" {
		t.Fatalf("kept %s/%s (%s) at %s, want ns/db at 7", d.Namespace(), d.Name(), d.Source.Name, d.ResourceVersion)
	}
	if !d.Source.Ignore || !d.Source.Present || len(d.Source.Data) != 1 {
		t.Fatalf("source = %+v", d.Source)
	}
	if sum, ok := d.Source.Data.Get("password"); !ok || sum != sha256.Sum256(big) {
		t.Fatal("the value is not replaced by its digest")
	}
}

func TestDigestPassesOtherObjectsThrough(t *testing.T) {
	in := "a tombstone"
	if out, err := toDigested(in); err != nil || out != in {
		t.Fatalf("toDigested(%v) = %v, %v", in, out, err)
	}
}

func TestInformersForAWatchedNamespaceOnly(t *testing.T) {
	client := fake.NewClientset()
	newInformer := func(ns string) cache.SharedIndexInformer {
		return coreinformers.NewConfigMapInformer(client, ns, 0, cache.Indexers{})
	}
	all, _ := NewInformers(nil, newInformer, nil)
	if all.For("a") == nil || all.For("a") != all.For("b") {
		t.Error("cluster-wide: want one informer for every namespace")
	}
	listed, _ := NewInformers([]string{"a", "b"}, newInformer, nil)
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
	in, _ := NewInformers([]string{"a", "refused"}, func(ns string) cache.SharedIndexInformer {
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
		in, err := NewInformers(namespaces, func(ns string) cache.SharedIndexInformer {
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

func TestProviderClassTakesEachObjectFromItsLatestReport(t *testing.T) {
	report := func(rv string, versions map[string]string) *Digested {
		u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"secretProviderClassName": "vault-db"}}}
		var objects []any
		for id, v := range versions {
			objects = append(objects, map[string]any{"id": id, "version": v})
		}
		_ = unstructured.SetNestedSlice(u.Object, objects, "status", "objects")
		u.SetResourceVersion(rv)
		u.SetNamespace("ns")
		return PodStatus(u)
	}
	old := report("10", map[string]string{"db-password": "1", "api-key": "7"})
	rotated := report("12", map[string]string{"db-password": "2", "api-key": "7"})
	d := ProviderClass([]*Digested{rotated, old})
	if d.Source.SourceRef != (confighash.SourceRef{Kind: confighash.SecretProviderClass, Name: "vault-db"}) || d.ResourceVersion != "12" || d.Name() != "vault-db" {
		t.Fatalf("ProviderClass() = %s (%s) at %s, want SecretProviderClass/vault-db at 12", d.Source.SourceRef, d.Name(), d.ResourceVersion)
	}
	if !slices.Equal(d.Source.Data, rotated.Source.Data) || d.Uniform {
		t.Fatalf("one pod rotated: data %v uniform %v, want the rotated versions, not uniform", d.Source.Data, d.Uniform)
	}
	both := ProviderClass([]*Digested{rotated, report("13", map[string]string{"db-password": "2", "api-key": "7"})})
	if !slices.Equal(both.Source.Data, d.Source.Data) || !both.Uniform {
		t.Fatalf("the rotation seen on a second pod: data %v uniform %v, want the same data, uniform", both.Source.Data, both.Uniform)
	}
	if ProviderClass(nil) != nil {
		t.Fatal("no report: want nil, absent")
	}
}

func TestDigestKeepsWhenCreatedAndLastWritten(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	written := created.Add(90 * 24 * time.Hour)
	obj, _ := toDigested(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "ns",
		CreationTimestamp: metav1.NewTime(created),
		ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: "kubectl", Time: ptr.To(metav1.NewTime(written))},
			{Manager: "helm", Time: ptr.To(metav1.NewTime(created.Add(time.Hour)))},
		}}})
	d := obj.(*Digested)
	if !d.Created().Equal(created) || !d.Written().Equal(written) {
		t.Fatalf("created %v, written %v; want %v, %v", d.Created(), d.Written(), created, written)
	}
}
