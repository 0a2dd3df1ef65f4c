package watcher

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
)

// TestASourceThatKeepsChangingHoldsItsUsersUntilItIsQuiet: the breaker lets limit
// rounds of changes through within its window, holds at the next, and lets go once
// the source has not changed for its quiet period; changes closer than the spacing
// are one round.
func TestASourceThatKeepsChangingHoldsItsUsersUntilItIsQuiet(t *testing.T) {
	b := newFlapBreaker(3, time.Minute, time.Second, 10*time.Second)
	src := sourceIn{"shop", confighash.SourceRef{Kind: confighash.Secret, Name: "tls"}}
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for i := range 3 {
		if b.changed(src, at) {
			t.Fatalf("change %d tripped the breaker; want 3 let through", i+1)
		}
		if b.changed(src, at.Add(500*time.Millisecond)) {
			t.Fatalf("a change 500ms after change %d tripped the breaker; want it counted with it", i+1)
		}
		at = at.Add(2 * time.Second)
	}
	if held, _ := b.holds(src, at); held {
		t.Fatal("held after 3 rounds, within the limit")
	}
	if !b.changed(src, at) {
		t.Fatal("the 4th round did not trip the breaker")
	}
	for _, manager := range []string{"cert-manager", "external-secrets", "cert-manager"} {
		b.wrote(src, &metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: manager, Time: &metav1.Time{Time: at}, FieldsV1: metav1.NewFieldsV1(`{"f:data":{"f:tls.crt":{}}}`)},
		}})
	}
	if h, held := b.state(src); !held || h.String() != `"cert-manager" and "external-secrets"` || h.changes != 4 {
		t.Fatalf("state = %+v, %v; want held, 4 changes, written by cert-manager and external-secrets", h, held)
	}
	if _, news := b.announce(src); !news {
		t.Fatal("a new hold is not news")
	}
	if _, news := b.announce(src); news {
		t.Fatal("the same hold, by the same writers, announced twice")
	}
	at = at.Add(5 * time.Second)
	b.changed(src, at)
	if held, until := b.holds(src, at.Add(9*time.Second)); !held || !until.Equal(at.Add(10*time.Second)) {
		t.Fatalf("9s after its last change: held %v until %v; want held until 10s after it", held, until)
	}
	if held, _ := b.holds(src, at.Add(10*time.Second)); held {
		t.Fatal("still held once quiet for 10s")
	}
	if b.changed(src, at.Add(11*time.Second)) {
		t.Fatal("the first change after the hold tripped the breaker again; want its count to start over")
	}
}

func TestTheBreakerWithNoLimitHoldsNothing(t *testing.T) {
	b := newFlapBreaker(0, time.Minute, 0, time.Minute)
	src := sourceIn{"shop", confighash.SourceRef{Kind: confighash.ConfigMap, Name: "app"}}
	for i := range 100 {
		if b.changed(src, time.Unix(int64(i), 0)) {
			t.Fatal("tripped with no limit")
		}
	}
}

// TestTheDataWriterIsTheLatestManagerOfData: a write of labels alone names no writer
// of data.
func TestTheDataWriterIsTheLatestManagerOfData(t *testing.T) {
	at := func(s int) *metav1.Time { return &metav1.Time{Time: time.Unix(int64(s), 0)} }
	fields := metav1.NewFieldsV1
	m := &metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
		{Manager: "external-secrets", Time: at(10), FieldsV1: fields(`{"f:data":{"f:password":{}}}`)},
		{Manager: "cert-manager-certificates-issuing", Time: at(20), FieldsV1: fields(`{"f:data":{"f:tls.crt":{}}}`)},
		{Manager: "kubectl-label", Time: at(30), FieldsV1: fields(`{"f:metadata":{"f:labels":{"f:team":{}}}}`)},
	}}
	if got := dataWriter(m); got != "cert-manager-certificates-issuing" {
		t.Fatalf("dataWriter = %q, want the latest writer of data", got)
	}
}
