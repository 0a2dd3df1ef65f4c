package sourcecache

import (
	"bytes"
	"context"
	"errors"
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
	want := Digested{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", ResourceVersion: "7"}}
	if d.Name != want.Name || d.Namespace != want.Namespace || d.ResourceVersion != want.ResourceVersion ||
		d.Labels != nil || d.Annotations != nil || d.ManagedFields != nil {
		t.Fatalf("kept metadata %+v, want only name, namespace and resourceVersion", d.ObjectMeta)
	}
	if !d.Source.Ignore || !d.Source.Present || len(d.Source.Data) != 1 {
		t.Fatalf("source = %+v", d.Source)
	}
	if _, isSum := any(d.Source.Data["password"]).(confighash.Sum); !isSum {
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
	all := NewInformers(nil, newInformer)
	if all.For("a") == nil || all.For("a") != all.For("b") {
		t.Error("cluster-wide: want one informer for every namespace")
	}
	listed := NewInformers([]string{"a", "b"}, newInformer)
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
	in := NewInformers([]string{"a", "refused"}, func(ns string) cache.SharedIndexInformer {
		return coreinformers.NewConfigMapInformer(client, ns, 0, cache.Indexers{})
	})
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
}
