package watcher

import (
	"fmt"
	"testing"
)

func TestNamespacesShareMaxRolling(t *testing.T) {
	w := &pacer{maxRolling: 4, waves: newWaves()}
	key := func(ns string, i int) workloadKey { return workloadKey{"Deployment", ns, fmt.Sprint(i)} }
	admit := func(ns string, from, n int) {
		for i := range n {
			w.waves.grants[key(ns, from+i)] = grant{}
		}
	}
	admit("a", 0, 3)
	if got := w.room(key("b", 0), 3); got != 1 {
		t.Fatalf("b, asking for 3 of 4 with 3 held, gets %d; want the 1 left", got)
	}
	admit("b", 0, 1)
	delete(w.waves.grants, key("a", 0))
	if got := w.room(key("a", 3), 2); got != 0 {
		t.Fatalf("a, holding 2 while b waits, gets %d more; want none beyond its share of 2", got)
	}
	if got := w.room(key("b", 1), 2); got != 1 {
		t.Fatalf("b, holding 1 while a waits, gets %d; want the 1 free, within its share of 2", got)
	}
	admit("b", 1, 1)
	for k, a := range w.waves.grants {
		if k.Namespace == "a" {
			a.slotFreed = true // its pods stayed Pending
			w.waves.grants[k] = a
		}
	}
	if got := w.room(key("b", 2), 2); got != 0 {
		t.Fatalf("b, holding 2 while a waits, gets %d more; want none beyond its share of 2", got)
	}
	w.waves.stopWaiting(key("a", 3)) // a's wave waits for its Pending ones, not for room
	if got := w.room(key("b", 2), 2); got != 2 {
		t.Fatalf("b, once a's Pending workloads gave their places up and a waits no more, gets %d; want the 2 free", got)
	}
	if _, waits := w.waves.capped["b"]; waits {
		t.Fatal("b still waits for room after it got all it asked for")
	}
}
