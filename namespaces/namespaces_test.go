package namespaces

import (
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/confighash/confighash"
)

var labelled = map[string]string{confighash.InjectionLabel: confighash.InjectionEnabled}

func TestListedNamespacesActOnlyWhereLabelledAndNotTerminating(t *testing.T) {
	now := metav1.Now()
	client := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "labelled", Labels: labelled}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "unlabelled"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "terminating", Labels: labelled, DeletionTimestamp: &now}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "not-listed", Labels: labelled}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "every", Labels: map[string]string{confighash.InjectionLabel: confighash.InjectionEvery}}},
	)
	var enabled []string
	l := NewListed(client, DefaultSelectors(), []string{"labelled", "unlabelled", "terminating", "missing", "every"}, time.Hour,
		func(ns string) { enabled = append(enabled, ns) }, zerolog.Nop())
	if l.HasSynced() {
		t.Fatal("synced before the first read")
	}
	l.refresh(t.Context())
	if !l.HasSynced() {
		t.Fatal("not synced after the first read")
	}
	want := map[string]confighash.Mode{"labelled": confighash.ModeOptedIn, "every": confighash.ModeEvery, "unlabelled": confighash.ModeOff, "terminating": confighash.ModeOff, "missing": confighash.ModeOff, "not-listed": confighash.ModeOff}
	for ns, mode := range want {
		if got := l.Mode(ns); got != mode {
			t.Errorf("mode(%q) = %v, want %v", ns, got, mode)
		}
	}
	if len(enabled) != 0 {
		t.Errorf("the first read reported %v as newly enabled; the leader's resync covers them", enabled)
	}

	// The next read sees a label removed and another added.
	setLabels := func(name string, labels map[string]string) {
		t.Helper()
		if _, err := client.CoreV1().Namespaces().Update(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setLabels("labelled", nil)
	setLabels("unlabelled", labelled)
	l.refresh(t.Context())
	if l.Mode("labelled") != confighash.ModeOff || l.Mode("unlabelled") != confighash.ModeOptedIn {
		t.Errorf("after relabelling: labelled %v, unlabelled %v; want off, opted in", l.Mode("labelled"), l.Mode("unlabelled"))
	}
	if !slices.Equal(enabled, []string{"unlabelled"}) {
		t.Errorf("newly enabled: %v, want [unlabelled]", enabled)
	}
}

func TestListedNamespacesKeepTheirStateThroughATransientError(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: labelled}})
	failing := false
	client.PrependReactor("get", "namespaces", func(clienttesting.Action) (bool, runtime.Object, error) {
		if failing {
			return true, nil, apierrors.NewServerTimeout(schema.GroupResource{Resource: "namespaces"}, "get", 1)
		}
		return false, nil, nil
	})
	l := NewListed(client, DefaultSelectors(), []string{"shop"}, time.Hour, func(string) {}, zerolog.Nop())

	failing = true
	l.refresh(t.Context())
	if l.HasSynced() {
		t.Fatal("synced although the namespace could not be read")
	}
	failing = false
	l.refresh(t.Context())
	if !l.HasSynced() || l.Mode("shop") != confighash.ModeOptedIn {
		t.Fatalf("after a good read: synced %v, mode %v", l.HasSynced(), l.Mode("shop"))
	}
	failing = true
	l.refresh(t.Context())
	if l.Mode("shop") != confighash.ModeOptedIn {
		t.Error("a timeout turned the namespace off: changes in it would be dropped")
	}
}

// TestAPinLabelIsAChangeOfPacing: what PacingOf reads is what a namespace's change of
// pacing is told by, its pin label included.
func TestAPinLabelIsAChangeOfPacing(t *testing.T) {
	plain := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: labelled}}
	pinned := plain.DeepCopy()
	pinned.Labels[confighash.AnnotationPin] = "true"
	if samePacing(plain, pinned) {
		t.Fatal("a namespace labelled confighash.dev/pin has the same pacing as before")
	}
	p, err := PacingOf(pinned)
	if err != nil || !p.Pinned() {
		t.Fatalf("PacingOf(pinned) = %+v, %v", p, err)
	}
	if !samePacing(plain, plain.DeepCopy()) {
		t.Fatal("an unchanged namespace has another pacing")
	}
	// A bad value for another bad value: its workloads are checked again, to tell it.
	five, six := plain.DeepCopy(), plain.DeepCopy()
	five.Annotations = map[string]string{confighash.AnnotationWaveSize: "five"}
	six.Annotations = map[string]string{confighash.AnnotationWaveSize: "six"}
	if samePacing(five, six) {
		t.Fatal(`a wave size of "five" changed to "six" is not told`)
	}
}
