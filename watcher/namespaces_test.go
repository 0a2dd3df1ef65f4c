package watcher

import (
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/confighash/confighash"
)

func TestListedNamespacesActOnlyWhereLabelledAndNotTerminating(t *testing.T) {
	labelled := map[string]string{confighash.InjectionLabel: confighash.InjectionEnabled}
	now := metav1.Now()
	client := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "labelled", Labels: labelled}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "unlabelled"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "terminating", Labels: labelled, DeletionTimestamp: &now}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "not-listed", Labels: labelled}},
	)
	l := newListedNamespaces(client, []string{"labelled", "unlabelled", "terminating", "missing"}, time.Hour, zerolog.Nop())
	if l.hasSynced() {
		t.Fatal("synced before the first read")
	}
	l.refresh(t.Context())
	if !l.hasSynced() {
		t.Fatal("not synced after the first read")
	}
	want := map[string]bool{"labelled": true, "unlabelled": false, "terminating": false, "missing": false, "not-listed": false}
	for ns, enabled := range want {
		if got := l.enabled(ns); got != enabled {
			t.Errorf("enabled(%q) = %v, want %v", ns, got, enabled)
		}
	}

	// The next read sees a label removed.
	if _, err := client.CoreV1().Namespaces().Update(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "labelled"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	l.refresh(t.Context())
	if l.enabled("labelled") {
		t.Error("still enabled after its label was removed")
	}
}
