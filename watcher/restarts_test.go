package watcher

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/confighash/confighash"
)

// TestARestartWaitsForItsWindowAndForThePauseOfAnotherChange: a stale pod waits for
// its rollout window to open, and, within the pause period of its group's last
// restart, for the pause to end, unless that restart was for the same change.
func TestARestartWaitsForItsWindowAndForThePauseOfAnotherChange(t *testing.T) {
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	closed, err := confighash.ParseWindows("daily 22:00-23:00 UTC")
	if err != nil {
		t.Fatal(err)
	}
	stale := &podView{Name: "web-1", Token: "v1:old", RestartsAt: -1}
	restarted := &podView{Name: "web-2", Token: "v1:a", RestartsAt: 0, TokenWritten: now.Add(-time.Minute)}
	group := []*podView{stale, restarted}
	for _, tt := range []struct {
		name string
		want confighash.Restart
		wait time.Duration
	}{
		{"at any time, no pause", confighash.Restart{Token: "v1:b"}, 0},
		{"outside its window", confighash.Restart{Token: "v1:b", Windows: closed}, 12 * time.Hour},
		{"a new change within the pause", confighash.Restart{Token: "v1:b", PausePeriod: 5 * time.Minute}, 4 * time.Minute},
		{"the same change within the pause", confighash.Restart{Token: "v1:a", PausePeriod: 5 * time.Minute}, 0},
		{"a new change after the pause", confighash.Restart{Token: "v1:b", PausePeriod: 30 * time.Second}, 0},
	} {
		if got := held(restart{stale, tt.want}, group, restarted.TokenWritten, now); got != tt.wait {
			t.Errorf("%s: waits %v, want %v", tt.name, got, tt.wait)
		}
	}
}

// TestARestartTokenTellsTheRestartsItWasWrittenAt: the token the watcher writes carries
// the pod's restarts so far, and a pod is restarting until its containers restarted
// past them; the webhook's token (a hash alone) asks for nothing.
func TestARestartTokenTellsTheRestartsItWasWrittenAt(t *testing.T) {
	hash, at := parseToken(tokenOf("v1:abc", 3))
	if hash != "v1:abc" || at != 3 {
		t.Fatalf("parsed %q, %d", hash, at)
	}
	for _, tt := range []struct {
		token    string
		restarts int
		want     bool
	}{{"v1:abc", 0, false}, {"v1:abc 3", 3, true}, {"v1:abc 3", 4, false}, {"v1:abc x", 0, false}, {"v1:abc -1", 0, false}} {
		p := &podView{Restarts: tt.restarts}
		p.Token, p.RestartsAt = parseToken(tt.token)
		if p.restarting() != tt.want {
			t.Errorf("%q after %d restarts: restarting %v, want %v", tt.token, tt.restarts, !tt.want, tt.want)
		}
	}
}

// TestAReloadIsDoneOnceItsRestarterWasSeenNotReadyThenReady: a pod told to reload is
// pending until its restarter, not Ready for the reload, is Ready again; one never seen
// not Ready is taken as done after reloadSettle; a pod no watcher here told is not.
func TestAReloadIsDoneOnceItsRestarterWasSeenNotReadyThenReady(t *testing.T) {
	now := time.Now()
	r := &restarts{reloads: reloadWaits{"a": {token: "v1:b", since: now}, "b": {token: "v1:b", since: now.Add(-time.Minute)}}}
	a := &podView{UID: "a", Token: "v1:b", Reloads: true, RestarterReady: true}
	steps := []struct {
		ready, want bool
	}{{true, true}, {false, true}, {false, true}, {true, false}, {true, false}}
	for i, s := range steps {
		a.RestarterReady = s.ready
		if got := r.reloads.pending(a, now); got != s.want {
			t.Fatalf("step %d (restarter Ready %v): pending %v, want %v", i, s.ready, got, s.want)
		}
	}
	if r.reloads.pending(&podView{UID: "b", Token: "v1:b", Reloads: true, RestarterReady: true}, now) {
		t.Error("a reload never seen after reloadSettle is still pending")
	}
	if r.reloads.pending(&podView{UID: "c", Token: "v1:b", Reloads: true, RestarterReady: true}, now) {
		t.Error("a pod no watcher here told to reload is pending")
	}
}

// TestRestartsInPlaceGoInWavesAndUnderMaxRolling: a namespace's wave size caps its
// controllers restarted at once; --max-rolling caps them all, a namespace taking no
// more than its share while another waits; a slot freed wakes those that wait, and a
// group found under way keeps its slot whatever the caps.
func TestRestartsInPlaceGoInWavesAndUnderMaxRolling(t *testing.T) {
	a1, a2, a3 := podGroup{"a", "1"}, podGroup{"a", "2"}, podGroup{"a", "3"}
	b1, b2 := podGroup{"b", "1"}, podGroup{"b", "2"}

	waves := newRestartSlots(0)
	if why := waves.take(a1, 2); why != "" {
		t.Fatalf("the first of a wave of 2 waits: %s", why)
	}
	if why := waves.take(a2, 2); why != "" {
		t.Fatalf("the second of a wave of 2 waits: %s", why)
	}
	if why := waves.take(a3, 2); !strings.Contains(why, "wave size 2") {
		t.Fatalf("the third of a wave of 2 does not wait for its wave: %q", why)
	}
	if why := waves.take(b1, 2); why != "" {
		t.Fatalf("another namespace's wave waits for this one's: %s", why)
	}
	if woken := waves.release(a1); !slices.Contains(woken, a3) {
		t.Fatalf("a freed slot wakes %v, not the group that waits", woken)
	}
	if why := waves.take(a3, 2); why != "" {
		t.Fatalf("the third does not take the freed slot: %s", why)
	}

	capped := newRestartSlots(2)
	if capped.take(a1, 0) != "" || capped.take(a2, 0) != "" {
		t.Fatal("the first two of --max-rolling 2 wait")
	}
	if why := capped.take(b1, 0); !strings.Contains(why, "--max-rolling") {
		t.Fatalf("a third beyond --max-rolling 2 does not wait: %q", why)
	}
	capped.release(a1)
	if why := capped.take(a3, 0); !strings.Contains(why, "--max-rolling") {
		t.Fatalf("a namespace holding its share takes the slot another namespace waits for: %q", why)
	}
	if why := capped.take(b1, 0); why != "" {
		t.Fatalf("the namespace that waited does not get the slot: %s", why)
	}
	// A group its pods show under way takes no slot beyond the cap either: a tenant
	// writes its pods' tokens.
	if why := capped.take(b2, 0); why == "" || len(capped.under) != 2 {
		t.Fatalf("a group found under way takes a slot beyond --max-rolling 2: %q, %d under way", why, len(capped.under))
	}
}

// TestAHaltedRestartGivesItsMaxRollingSlotUp: a controller whose pod did not come back
// keeps its namespace's wave held, but gives its --max-rolling slot up and wakes those
// waiting for one; once no longer halted, it gives its wave up too, waking those of
// its namespace, and takes a slot again within the caps.
func TestAHaltedRestartGivesItsMaxRollingSlotUp(t *testing.T) {
	a1, a2, b1 := podGroup{"a", "1"}, podGroup{"a", "2"}, podGroup{"b", "1"}
	s := newRestartSlots(1)
	if why := s.take(a1, 1); why != "" {
		t.Fatal(why)
	}
	if why := s.take(b1, 1); why == "" {
		t.Fatal("a second controller takes the one slot of --max-rolling 1")
	}
	if woken := s.setHalted(a1, true); !slices.Contains(woken, b1) {
		t.Fatalf("the halt freed a --max-rolling slot and woke %v, not the controller waiting for it", woken)
	}
	if why := s.take(a2, 1); !strings.Contains(why, "wave size 1") {
		t.Fatalf("the halted controller's namespace goes on with its next wave: %q", why)
	}
	if why := s.take(b1, 1); why != "" {
		t.Fatalf("another namespace waits for a halted controller's slot: %s", why)
	}
	if woken := s.setHalted(a1, false); !slices.Contains(woken, a2) {
		t.Fatalf("once fixed, the controller's wave freed and woke %v, not the next of its namespace", woken)
	}
	if under, _ := s.counts(); under != 1 || s.rolling != 1 {
		t.Fatalf("once fixed: %d under way, %d counted; want 1 and 1", under, s.rolling)
	}
	if why := s.take(a1, 1); !strings.Contains(why, "--max-rolling") {
		t.Fatalf("the fixed controller takes a slot past --max-rolling 1: %q", why)
	}
}
