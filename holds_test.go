package confighash

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEachHoldDoesWhatItsRowSays: for each row of Holds, a workload held by it alone.
// A due change of a workload is held at admission (its old hash kept, the watcher to
// release it) exactly where the row gates, and a pod of it restarted in place carries
// what it needs to wait for the hold exactly where the row says InPlace. A row without
// a case fails: a new hold comes with its case here.
func TestEachHoldDoesWhatItsRowSays(t *testing.T) {
	marker := Marker{Change: Trigger{SourceRef: SourceRef{ConfigMap, "cfg"}}, Hash: "v1:0"}.String()
	cases := map[HoldReason]map[string]string{
		HoldHalted:   {AnnotationHeld: marker}, // a marker alone, on a workload no wave gates
		HoldWindow:   {AnnotationRolloutWindow: "Mon 09:00-10:00 UTC"},
		HoldWave:     {AnnotationWaveSize: "5"},
		HoldFlapping: {AnnotationFlapping: "ConfigMap/cfg@7"}, // the watcher's breaker's marker
		HoldPause:    {AnnotationPausePeriod: "10m"},
	}
	// What a restart in place carries to wait for each hold.
	waits := func(r Restart) map[HoldReason]bool {
		return map[HoldReason]bool{HoldWindow: r.Windows != nil, HoldWave: r.WaveSize > 0, HoldPause: r.PausePeriod > 0}
	}
	for _, h := range Holds {
		t.Run(string(h.Reason), func(t *testing.T) {
			annotations, ok := cases[h.Reason]
			if !ok {
				t.Fatalf("hold %s has no case here: add one", h.Reason)
			}
			workload := map[string]string{AnnotationInject: "true"}
			for k, v := range annotations {
				workload[k] = v
			}
			cfg := SourceRef{ConfigMap, "cfg"}
			w := newWorld(t, workload, envFrom("cfg"), cmSource("cfg", "1"))
			w.admit(Pods{Fresh: true})
			w.sources[cfg] = cmSource("cfg", "2")
			d := w.admit(Pods{})
			if held := len(d.Held) > 0; held != (h.Gates != nil) {
				t.Errorf("a due change held at admission: %v; the row gates: %v", held, h.Gates != nil)
			}

			pod := inPlacePod(annotations, "cfg")
			r, err := RestartOf(Input{Key: testKey, Namespace: pod.Namespace, State: Vocabulary{}.Read(PodWorkload(pod)), Mode: ModeOptedIn},
				listedSources(map[SourceRef]Source{cfg: cmSource("cfg", "2")}))
			if err != nil {
				t.Fatal(err)
			}
			if got := waits(r)[h.Reason]; got != h.InPlace {
				t.Errorf("a restart in place waits for it: %v; the row says %v", got, h.InPlace)
			}
		})
	}
}

// TestHoldsAreAskedInOneOrder: the watcher and explain ask a gated workload's holds in
// the table's order, a halt before the window before sources that keep changing before
// the wave; the metric's values are
// the counted rows, each once.
func TestHoldsAreAskedInOneOrder(t *testing.T) {
	var order []HoldReason
	for _, h := range Holds {
		order = append(order, h.Reason)
	}
	if i, j, f, k := slices.Index(order, HoldHalted), slices.Index(order, HoldWindow), slices.Index(order, HoldFlapping), slices.Index(order, HoldWave); !(i < j && j < f && f < k) {
		t.Errorf("holds in the order %v, want halted, window, flapping, wave", order)
	}
	counted := CountedHolds()
	if len(slices.Compact(slices.Sorted(slices.Values(counted)))) != len(counted) {
		t.Errorf("counted holds %v: each once", counted)
	}
	for _, want := range []HoldReason{HoldHalted, HoldWindow, HoldWave, HoldFlapping} {
		if !slices.Contains(counted, want) {
			t.Errorf("counted holds %v: %s missing, a value of confighash_watcher_held_workloads", counted, want)
		}
	}
	// A window that gates is one the watcher waits for: RollsAt says when it opens.
	p := Pacing{}
	if p.Gated() {
		t.Error("no pacing gates")
	}
	p.Windows, _ = ParseWindows("daily 00:00-00:01 UTC")
	if !p.Gated() || !p.RollsAt(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC), time.Time{}).After(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)) {
		t.Error("a closed window gates and rolls when it opens")
	}
}

// TestAHoldIsToldInItsRowsWords: explain tells each hold it sees in the decision in the
// words of its row, which the watcher's Event reads too; every hold that gates has words.
func TestAHoldIsToldInItsRowsWords(t *testing.T) {
	windows, err := ParseWindows("Mon 09:00-10:00 UTC")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, time.December, 1, 12, 0, 0, 0, time.UTC) // a Tuesday
	change := Trigger{SourceRef: SourceRef{ConfigMap, "cfg"}, ResourceVersion: "42"}
	held := Decision{Held: []SourceRef{{ConfigMap, "cfg"}}, Release: "v1:1"}
	inWindow := held
	inWindow.Pacing.Windows = windows
	cases := []struct {
		reason HoldReason
		d      Decision
		state  State
		facts  HoldFacts
	}{
		{HoldHalted, held, State{Held: Marker{Change: change, Hash: "v1:1"}}, HoldFacts{Failed: change}},
		{HoldWindow, inWindow, State{}, HoldFacts{Windows: windows, Opens: windows.NextOpen(now)}},
		{HoldWave, held, State{}, HoldFacts{}},
		{HoldFlapping, held, State{Flapping: []Trigger{change}}, HoldFacts{Flapping: []Trigger{change}}},
	}
	for _, c := range cases {
		got := heldWhy(c.d, c.state, ExplainInput{Now: now}, &Explanation{})
		why, rolls := HoldOf(c.reason).Says(c.facts)
		if !strings.Contains(got, why) || !strings.Contains(got, rolls) {
			t.Errorf("explain tells a %s hold as %q, want the row's words %q and %q", c.reason, got, why, rolls)
		}
	}
	for _, h := range Holds {
		if h.Gates != nil && h.Says == nil {
			t.Errorf("hold %s gates and has no words: explain could not tell it", h.Reason)
		}
	}
}
