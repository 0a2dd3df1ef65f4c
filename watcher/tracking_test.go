package watcher

import (
	"testing"
	"time"
)

func TestAChangeIsCheckedOnceQuietAndAtMostTheDebounceAfterTheFirst(t *testing.T) {
	c := newTracking(100*time.Millisecond, time.Second, 0)
	key := workloadKey{"Deployment", "ns", "web"}
	t0 := time.Unix(1000, 0)
	if wait := c.changeReached(key, t0); wait != 100*time.Millisecond {
		t.Fatalf("a lone change waits %v, want the quiet period", wait)
	}
	// A second change 10 ms later, as helm writes a release's next object: the check
	// that comes out of the queue at 100 ms waits 10 ms more.
	c.changeReached(key, t0.Add(10*time.Millisecond))
	if wait := c.untilQuiet(key, t0.Add(100*time.Millisecond)); wait != 10*time.Millisecond {
		t.Fatalf("wait at 100 ms = %v, want 10 ms more", wait)
	}
	if wait := c.untilQuiet(key, t0.Add(110*time.Millisecond)); wait != 0 {
		t.Fatalf("wait at 110 ms = %v, want now", wait)
	}
	if wait := c.untilQuiet(key, t0.Add(120*time.Millisecond)); wait != 0 {
		t.Fatalf("a check not from a change waits %v, want none", wait)
	}
	// Changes every 50 ms go on: checked at the debounce after the first, not later.
	for i := range 30 {
		c.changeReached(key, t0.Add(time.Duration(i)*50*time.Millisecond))
	}
	if wait := c.untilQuiet(key, t0.Add(time.Second)); wait != 0 {
		t.Fatalf("changes that go on: wait at 1 s = %v, want now", wait)
	}
}
