package sourcecache

import (
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/watches"
)

// TestWritesTellsOfEachConfigMapAndSecretOnly: the field managers and UID of a write
// are a ConfigMap's or a Secret's; a pod's report of a SecretProviderClass is not a
// write of the class, and is not told.
func TestWritesTellsOfEachConfigMapAndSecretOnly(t *testing.T) {
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}
	}
	client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: meta("app")}, &corev1.Secret{ObjectMeta: meta("db")})
	report := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "secrets-store.csi.x-k8s.io/v1", "kind": "SecretProviderClassPodStatus",
		"metadata": map[string]any{"namespace": "ns", "name": "web-0-vault", "uid": "uid-report"},
		"status":   map[string]any{"secretProviderClassName": "vault"},
	}}
	csi := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{PodStatuses: "SecretProviderClassPodStatusList"}, report)
	c, err := New(client, watches.Door{Gate: actsEverywhere{}}, Filter{}, csi)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	told := map[string]string{}
	c.Writes(func(d *Digested, m metav1.Object) {
		mu.Lock()
		defer mu.Unlock()
		told[string(d.Source.Kind)+"/"+d.Name()] = string(m.GetUID())
	})
	go func() { _ = c.Run(t.Context()) }()
	for deadline := time.Now().Add(5 * time.Second); !c.Synced(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the cache did not sync")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]string{"ConfigMap/app": "uid-app", "Secret/db": "uid-db"}
	if len(told) != len(want) || told["ConfigMap/app"] != want["ConfigMap/app"] || told["Secret/db"] != want["Secret/db"] {
		t.Fatalf("told of %v, want %v: each ConfigMap and Secret, not the pod's report", told, want)
	}
}

// actsEverywhere is a gate by which confighash acts in every namespace.
type actsEverywhere struct{}

func (actsEverywhere) Known(string) bool           { return true }
func (actsEverywhere) Mode(string) confighash.Mode { return confighash.ModeOptedIn }
func (actsEverywhere) HasSynced() bool             { return true }
