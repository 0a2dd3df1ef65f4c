package watcher

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/confighash/confighash"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestAClosedWindowHoldsAChangeWithOneEvent: outside its rollout window a due change
// is neither touched nor rolled, even by the admission of the status that says so; the
// workload is told it is held until the window opens, with one Event however often it
// is checked. Inside the window it rolls at once.
func TestAClosedWindowHoldsAChangeWithOneEvent(t *testing.T) {
	// A window of a minute half a day away is closed now, however long the test runs.
	opens := time.Now().UTC().Add(12 * time.Hour).Truncate(time.Minute)
	closed := fmt.Sprintf("daily %s-%s UTC", opens.Format("15:04"), opens.Add(time.Minute).Format("15:04"))
	for _, tt := range []struct {
		name    string
		window  string
		touches int
		held    int
		act     confighash.Act
		until   time.Time
	}{
		{"a closed window holds it", closed, 0, 1, confighash.ActHeld, opens},
		{"an open window lets it roll", "daily 00:00-24:00 UTC", 1, 0, confighash.ActRolled, time.Time{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{}, harnessConfigMap("cfg", nil), harnessDeployment("web", map[string]string{confighash.AnnotationRolloutWindow: tt.window}, "cfg"))
			web := harnessKey(confighash.Deployment, "web")
			h.change(confighash.ConfigMap, "cfg")
			h.sync(web)
			h.caughtUp()
			h.sync(web)
			if n, r := h.touchesOf(web), h.rolloutsOf(web); n != tt.touches || r != tt.touches {
				t.Errorf("touched %d times, rolled %d times; want %d", n, r, tt.touches)
			}
			if got := h.events.count(web, "Held"); got != tt.held {
				t.Errorf("%d Held Events, want %d", got, tt.held)
			}
			if s := h.status(web); s.Act != tt.act || !s.Until.Equal(tt.until) {
				t.Errorf("status %q, want %s until %v", s.Text(), tt.act, tt.until)
			}
		})
	}
}

// TestAWaveGrantsItsSizeAtATimeAndHaltsOnAFailure: a change that reaches five
// workloads in waves of two rolls the first two, the next two once those rolled out,
// and none once one of those failed: the last is marked held, the failed one failed,
// each with an Event, and it stays held.
func TestAWaveGrantsItsSizeAtATimeAndHaltsOnAFailure(t *testing.T) {
	users := []string{"w1", "w2", "w3", "w4", "w5"}
	source := harnessConfigMap("cfg", map[string]string{confighash.AnnotationWaveSize: "2"})
	h := newHarness(t, Config{}, source, harnessDeployment("w1", nil, "cfg"), harnessDeployment("w2", nil, "cfg"),
		harnessDeployment("w3", nil, "cfg"), harnessDeployment("w4", nil, "cfg"), harnessDeployment("w5", nil, "cfg"))
	key := func(name string) workloadKey { return harnessKey(confighash.Deployment, name) }
	h.change(confighash.ConfigMap, "cfg")
	for _, step := range []struct {
		name         string
		done, failed []string // whose rollouts end first
		checked      []string
		touched      []string // each once, so far
		held         []int    // Held Events of each user, so far
	}{
		{"the first wave is the first two", nil, nil, users, users[:2], []int{0, 0, 1, 1, 1}},
		{"the next two once those rolled out", users[:2], nil, users[2:], users[:4], []int{0, 0, 1, 1, 1}},
		{"a failure of the second wave halts the last", users[3:4], users[2:3], users[4:], users[:4], []int{0, 0, 1, 1, 2}},
	} {
		for _, name := range step.done {
			h.rollOut(key(name), false)
		}
		for _, name := range step.failed {
			h.rollOut(key(name), true)
		}
		// Before any check: one made while a status is on its way to the watcher may
		// keep the wave waiting (its memo of the wave's standing).
		h.caughtUp()
		for _, name := range step.checked {
			h.sync(key(name))
		}
		for i, name := range users {
			want := 0
			if slices.Contains(step.touched, name) {
				want = 1
			}
			if n, r := h.touchesOf(key(name)), h.rolloutsOf(key(name)); n != want || r != want {
				t.Errorf("%s: %s touched %d times, rolled %d times; want %d", step.name, name, n, r, want)
			}
			if got := h.events.count(key(name), "Held"); got != step.held[i] {
				t.Errorf("%s: %s has %d Held Events, want %d", step.name, name, got, step.held[i])
			}
		}
	}
	h.caughtUp()
	h.sync(key("w5")) // held by the halt, not released
	if n := h.touchesOf(key("w5")); n != 0 {
		t.Errorf("w5 touched %d times once its wave halted", n)
	}
	if got := h.events.count(key("w5"), "Held"); got != 2 {
		t.Errorf("w5: %d Held Events once held by the halt, want 2: one while it waited, one for the halt", got)
	}
	if got := h.events.count(key("w3"), "RolloutFailed"); got != 1 {
		t.Errorf("w3: %d RolloutFailed Events, want 1", got)
	}
	if h.annotation(key("w5"), confighash.AnnotationHeld) == "" || h.status(key("w5")).Act != confighash.ActHeld {
		t.Errorf("w5 is not marked held: annotations %v", h.workload(key("w5")).GetAnnotations())
	}
	if h.annotation(key("w3"), confighash.AnnotationFailed) == "" {
		t.Errorf("w3 is not marked failed: annotations %v", h.workload(key("w3")).GetAnnotations())
	}
}

// TestASourceThatKeepsChangingHoldsItsUsersPastFlapLimit: FlapLimit changes within
// FlapWindow each roll the workload that uses the source; the next is held, neither
// touched nor rolled, with one FlappingHeld Event on the workload and one Flapping Event
// on the source.
func TestASourceThatKeepsChangingHoldsItsUsersPastFlapLimit(t *testing.T) {
	const limit = 2
	for _, tt := range []struct {
		name     string
		changes  int
		rollouts int
		held     int
	}{
		{"FlapLimit changes each roll it", limit, limit, 0},
		{"the change past FlapLimit is held", limit + 1, limit, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{FlapLimit: limit, FlapWindow: time.Hour, FlapQuiet: time.Hour}, harnessConfigMap("cfg", nil), harnessDeployment("web", nil, "cfg"))
			web := harnessKey(confighash.Deployment, "web")
			for range tt.changes {
				h.change(confighash.ConfigMap, "cfg")
				h.sync(web)
			}
			h.caughtUp()
			h.sync(web)
			if n, r := h.touchesOf(web), h.rolloutsOf(web); n != tt.rollouts || r != tt.rollouts {
				t.Errorf("touched %d times, rolled %d times; want %d", n, r, tt.rollouts)
			}
			if got := h.events.count(web, "FlappingHeld"); got != tt.held {
				t.Errorf("%d FlappingHeld Events, want %d", got, tt.held)
			}
			if got := len(h.events.of("ConfigMap", "cfg", "Flapping")); got != tt.held {
				t.Errorf("%d Flapping Events on the ConfigMap, want %d", got, tt.held)
			}
		})
	}
}

// TestTheFlappingHoldLivesOnTheWorkload: the breaker's hold is written on the workload,
// where the webhook reads it: a user's write of the held workload rolls nothing, a new
// leader holds it on while the source goes on changing, and lets it roll once, with
// the latest data, when the source has been quiet.
func TestTheFlappingHoldLivesOnTheWorkload(t *testing.T) {
	const limit, quiet = 2, 3 * time.Second
	h := newHarness(t, Config{FlapLimit: limit, FlapWindow: time.Hour, FlapQuiet: quiet}, harnessConfigMap("cfg", nil), harnessDeployment("web", nil, "cfg"))
	web := harnessKey(confighash.Deployment, "web")
	for range limit + 1 {
		h.change(confighash.ConfigMap, "cfg")
		h.sync(web)
	}
	if got := h.annotation(web, confighash.AnnotationFlapping); !strings.HasPrefix(got, "ConfigMap/cfg@") {
		t.Fatalf("held, %s = %q; want the ConfigMap's change", confighash.AnnotationFlapping, got)
	}
	h.caughtUp()
	h.write(web)
	if r := h.rolloutsOf(web); r != limit {
		t.Fatalf("a user's write of the held workload: %d rollouts, want %d", r, limit)
	}

	h.failOver()
	h.change(confighash.ConfigMap, "cfg")
	h.caughtUp()
	h.sync(web)
	if r := h.rolloutsOf(web); r != limit {
		t.Fatalf("a new leader, the source still changing: %d rollouts, want %d", r, limit)
	}
	h.write(web)
	if r := h.rolloutsOf(web); r != limit {
		t.Fatalf("a user's write after the failover: %d rollouts, want %d", r, limit)
	}

	time.Sleep(quiet)
	h.sync(web)
	if r := h.rolloutsOf(web); r != limit+1 {
		t.Fatalf("quiet for --flap-quiet: %d rollouts, want %d: one more, with the latest data", r, limit+1)
	}
	if got := h.annotation(web, confighash.AnnotationFlapping); got != "" {
		t.Errorf("released, %s = %q; want it removed", confighash.AnnotationFlapping, got)
	}
}

// TestAForgedFlappingMarkerHoldsItsOwnWorkloadForTheQuietPeriod: anyone who may
// annotate a workload may write the flapping marker. It holds that workload alone, and
// only for --flap-quiet after the change it meets: another user of the source rolls at
// once, and the forged one rolls once the quiet period has passed.
func TestAForgedFlappingMarkerHoldsItsOwnWorkloadForTheQuietPeriod(t *testing.T) {
	const quiet = 2 * time.Second
	forged := map[string]string{confighash.AnnotationFlapping: "ConfigMap/cfg@1"}
	h := newHarness(t, Config{FlapLimit: 10, FlapWindow: time.Hour, FlapQuiet: quiet}, harnessConfigMap("cfg", nil),
		harnessDeployment("forged", forged, "cfg"), harnessDeployment("other", nil, "cfg"))
	marked, other := harnessKey(confighash.Deployment, "forged"), harnessKey(confighash.Deployment, "other")
	h.change(confighash.ConfigMap, "cfg")
	h.sync(marked)
	h.sync(other)
	if r, o := h.rolloutsOf(marked), h.rolloutsOf(other); r != 0 || o != 1 {
		t.Fatalf("a change: the marked one rolled %d times, the other %d; want 0 and 1", r, o)
	}
	time.Sleep(quiet)
	h.sync(marked)
	if r := h.rolloutsOf(marked); r != 1 {
		t.Fatalf("quiet for --flap-quiet: the marked one rolled %d times, want 1", r)
	}
	if got := h.annotation(marked, confighash.AnnotationFlapping); got != "" {
		t.Errorf("released, %s = %q; want it removed", confighash.AnnotationFlapping, got)
	}
}

// TestTheFirstWaveBakesBeforeTheNext: a source with a canary of one and a bake rolls
// its change to the first user alone; once that one has rolled out it is marked baking,
// from when, and the others wait until the bake ends; then they roll at once (no wave
// size), each once, and are not marked. A new leader keeps the bake the marker says.
func TestTheFirstWaveBakesBeforeTheNext(t *testing.T) {
	users := []string{"w1", "w2", "w3", "w4"}
	const bake = 2 * time.Second
	source := harnessConfigMap("cfg", map[string]string{confighash.AnnotationCanary: "1", confighash.AnnotationBake: bake.String()})
	objects := []runtime.Object{source}
	for _, name := range users {
		objects = append(objects, harnessDeployment(name, nil, "cfg"))
	}
	h := newHarness(t, Config{}, objects...)
	key := func(name string) workloadKey { return harnessKey(confighash.Deployment, name) }
	touched := func(want ...int) {
		t.Helper()
		for i, name := range users {
			if n, r := h.touchesOf(key(name)), h.rolloutsOf(key(name)); n != want[i] || r != want[i] {
				t.Errorf("%s touched %d times, rolled %d times; want %d", name, n, r, want[i])
			}
		}
	}
	h.change(confighash.ConfigMap, "cfg")
	for _, name := range users {
		h.sync(key(name))
	}
	touched(1, 0, 0, 0)
	marker, err := confighash.ParseBaking(h.annotation(key("w1"), confighash.AnnotationBaking))
	if err != nil || marker.Bake != bake || !marker.Since.IsZero() || marker.Hash != h.hash(key("w1")) {
		t.Fatalf("the canary's marker at its release: %+v, %v; want its hash, the bake, no start", marker, err)
	}

	h.rollOut(key("w1"), false)
	h.caughtUp()
	h.sync(key("w1"))
	marker, _ = confighash.ParseBaking(h.annotation(key("w1"), confighash.AnnotationBaking))
	if marker.Since.IsZero() || h.status(key("w1")).Act != confighash.ActBaking || h.events.count(key("w1"), "Baking") != 1 {
		t.Fatalf("the canary rolled out: marker %+v, status %+v, %d Baking Events; want baking since now, one Event", marker, h.status(key("w1")), h.events.count(key("w1"), "Baking"))
	}
	h.failOver() // a new leader reads the bake from the marker
	h.caughtUp()
	for _, name := range users[1:] {
		h.sync(key(name))
	}
	touched(1, 0, 0, 0)

	time.Sleep(time.Until(marker.Until()))
	waitUntil(t, func() bool {
		for _, name := range users[1:] {
			h.sync(key(name))
		}
		return h.touchesOf(key("w4")) > 0
	})
	touched(1, 1, 1, 1)
	for _, name := range users[1:] {
		if m := h.annotation(key(name), confighash.AnnotationBaking); m != "" {
			t.Errorf("%s, of a later wave, is marked baking: %q", name, m)
		}
	}
}

// TestAForgedBakingMarkerSkipsNoCanary: a baking marker written by whoever edits a
// workload, for the source's change, before the watcher released anything, names no
// hash the watcher released: the change still rolls its canary alone first.
func TestAForgedBakingMarkerSkipsNoCanary(t *testing.T) {
	users := []string{"w1", "w2", "w3"}
	source := harnessConfigMap("cfg", map[string]string{confighash.AnnotationCanary: "1", confighash.AnnotationBake: "1h"})
	objects := []runtime.Object{source}
	for _, name := range users {
		objects = append(objects, harnessDeployment(name, nil, "cfg"))
	}
	h := newHarness(t, Config{}, objects...)
	key := func(name string) workloadKey { return harnessKey(confighash.Deployment, name) }
	h.change(confighash.ConfigMap, "cfg")
	cm, err := h.client.CoreV1().ConfigMaps(harnessNamespace).Get(h.ctx, "cfg", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forged := confighash.Baking{Marker: confighash.Marker{Change: confighash.Trigger{SourceRef: confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, ResourceVersion: cm.ResourceVersion},
		Hash: h.hash(key("w3"))}, Bake: time.Hour}
	d, err := h.client.AppsV1().Deployments(harnessNamespace).Get(h.ctx, "w3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Annotations[confighash.AnnotationBaking] = forged.String()
	if _, err := h.client.AppsV1().Deployments(harnessNamespace).Update(h.ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.caughtUp()
	for _, name := range users {
		h.sync(key(name))
	}
	for i, name := range users {
		want := map[bool]int{true: 1, false: 0}[i == 0]
		if n := h.rolloutsOf(key(name)); n != want {
			t.Errorf("%s rolled %d times, want %d: the canary alone first", name, n, want)
		}
	}
}
