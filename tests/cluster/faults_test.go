package cluster_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/confighash/confighash/tests/cluster"
)

// The fault tests rely on these: a killed API server comes back with etcd's data, and
// after a compaction a watch resumed from an earlier resourceVersion gets 410 Gone.
func TestFaultKilledAPIServerComesBackAndOldWatchesExpire(t *testing.T) {
	c := cluster.Require(t, testCluster)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	ns, err := c.CreateNamespace(ctx, "apiserver-kill", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteNamespace(context.Background(), ns) })
	cms := c.Client.CoreV1().ConfigMaps(ns)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := c.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "kept", metav1.GetOptions{}); err == nil {
		t.Fatal("the API server answered after it was killed")
	}
	if _, err := c.CompactEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}

	kept, err := cms.Get(ctx, "kept", metav1.GetOptions{})
	if err != nil || kept.Data["k"] != "v" {
		t.Fatalf("after the restart: %v, %v; want the ConfigMap kept", kept.Data, err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err == nil {
		defer w.Stop()
		ev := <-w.ResultChan()
		if ev.Type != watch.Error {
			t.Fatalf("a watch from before the compaction got %s, want an error", ev.Type)
		}
		err = apierrors.FromObject(ev.Object)
	}
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("a watch from before the compaction: %v; want 410 Gone", err)
	}
}
