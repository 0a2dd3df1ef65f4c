package confighash

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGatedWorkloadRollsOnlyWhenReleased: a workload whose changes are paced keeps its
// hash at every admission until the watcher releases it to the hash it is due, then
// rolls once; a changed pod template rolls it anyway, with the current data.
func TestGatedWorkloadRollsOnlyWhenReleased(t *testing.T) {
	cfg, other := SourceRef{ConfigMap, "cfg"}, SourceRef{ConfigMap, "other"}
	window, err := ParseWindows("Mon 09:00-10:00 UTC")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		annotations map[string]string
		pacing      Pacing
		waveSize    int // on the source
	}{
		{"waves on the workload", map[string]string{AnnotationInject: "true", AnnotationWaveSize: "5"}, Pacing{}, 0},
		{"waves on the source", map[string]string{AnnotationInject: "true"}, Pacing{}, 5},
		{"waves from the flags", map[string]string{AnnotationInject: "true"}, Pacing{WaveSize: 5}, 0},
		{"a window on the workload", map[string]string{AnnotationInject: "true", AnnotationRolloutWindow: "Mon 09:00-10:00 UTC"}, Pacing{}, 0},
		{"a window on the namespace", map[string]string{AnnotationInject: "true"}, Pacing{Windows: window}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			source := func(name, value string) Source {
				s := cmSource(name, value)
				s.WaveSize = tt.waveSize
				return s
			}
			w := newWorld(t, tt.annotations, envFrom("cfg", "other"), source("cfg", "1"), source("other", "1"))
			w.pacing = tt.pacing
			w.admit(Pods{Fresh: true})
			created := w.state.Hash

			w.sources[cfg] = source("cfg", "2")
			delete(w.sources, other) // deleting never rolls: recorded while held
			for i := range 2 {
				d := w.admit(Pods{})
				if !slices.Equal(d.Held, []SourceRef{cfg}) || d.Release == "" || d.Release == created {
					t.Fatalf("held %v, release %q; want cfg held, due to roll to a new hash", d.Held, d.Release)
				}
				if d.Hash != created || w.rollouts != 1 {
					t.Fatalf("an admission before the release rolled it: hash %q, %d rollouts", d.Hash, w.rollouts)
				}
				if d.Converged != (i == 1) {
					t.Fatalf("admission %d: converged %v; want it converged once the deletion is recorded", i+1, d.Converged)
				}
				if e := recordEntry(d.Record, other); !e.Absent {
					t.Fatalf("the deletion of other was not recorded while cfg was held: %+v", e)
				}
			}

			released := w.admit(Pods{}).Release
			w.state.Release = released
			if d := w.admit(Pods{}); d.Hash != released || d.Held != nil || w.rollouts != 2 {
				t.Fatalf("released: hash %q, held %v, %d rollouts; want hash %q, nothing held, 2 rollouts", d.Hash, d.Held, w.rollouts, released)
			}

			w.sources[cfg] = source("cfg", "3")
			if d := w.admit(Pods{}); len(d.Held) != 1 || w.rollouts != 2 {
				t.Fatalf("a release of an older change rolled a newer one: held %v, %d rollouts", d.Held, w.rollouts)
			}
			if d := w.admit(Pods{Fresh: true}); d.Held != nil || w.rollouts != 3 {
				t.Fatalf("a changed pod template: held %v, %d rollouts; want it rolled with the current data", d.Held, w.rollouts)
			}
		})
	}
}

func TestUngatedWorkloadRollsAtOnce(t *testing.T) {
	cfg := SourceRef{ConfigMap, "cfg"}
	w := newWorld(t, map[string]string{AnnotationInject: "true"}, envFrom("cfg"), cmSource("cfg", "1"))
	w.admit(Pods{Fresh: true})
	w.sources[cfg] = cmSource("cfg", "2")
	if d := w.admit(Pods{}); d.Held != nil || w.rollouts != 2 {
		t.Fatalf("held %v, %d rollouts; want it rolled at the admission", d.Held, w.rollouts)
	}
}

func TestGatedWorkloadMetForTheFirstTimeIsNotHeld(t *testing.T) {
	w := newWorld(t, map[string]string{AnnotationInject: "true", AnnotationWaveSize: "5"}, envFrom("cfg"), cmSource("cfg", "1"))
	if d := w.admit(Pods{}); d.Held != nil {
		t.Fatalf("held %v: adoption decides a workload met for the first time", d.Held)
	}
}

func TestBadPacingAnnotationsAreProblems(t *testing.T) {
	p, problems := Vocabulary{}.ParsePolicy(map[string]string{
		AnnotationInject: "true", AnnotationWaveSize: "five", AnnotationRolloutWindow: "Mon 9-5",
	}, nil)
	if p.Pacing.Gated() || len(problems) != 2 {
		t.Fatalf("pacing %+v, problems %v; want none set and two problems", p.Pacing, problems)
	}
}

func recordEntry(r Record, ref SourceRef) RecordEntry {
	for _, e := range r {
		if e.SourceRef == ref {
			return e
		}
	}
	return RecordEntry{}
}

// A change rolls at the first moment its window is open and its pause period is over:
// a pause defers it within an open window, and one that outlasts the window defers it
// to the next opening.
func TestPausePeriodAndWindowsCompose(t *testing.T) {
	windows, err := ParseWindows("Mon-Fri 09:00-17:00 UTC")
	if err != nil {
		t.Fatal(err)
	}
	monday := func(hh, mm int) time.Time { return time.Date(2026, 11, 23, hh, mm, 0, 0, time.UTC) }
	tuesday9 := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		name             string
		windows          Windows
		now, pausedUntil time.Time
		want             time.Time
	}{
		{"open, not paused: now", windows, monday(10, 0), time.Time{}, monday(10, 0)},
		{"closed, not paused: at the opening", windows, monday(8, 0), time.Time{}, monday(9, 0)},
		{"open, paused: when the pause ends", windows, monday(10, 0), monday(10, 30), monday(10, 30)},
		{"closed, paused past the opening: when the pause ends", windows, monday(8, 0), monday(9, 15), monday(9, 15)},
		{"paused past the closing: at the next opening", windows, monday(16, 50), monday(17, 10), tuesday9},
		{"no window, paused: when the pause ends", nil, monday(3, 0), monday(3, 5), monday(3, 5)},
		{"no window, a pause that has ended: now", nil, monday(3, 0), monday(2, 0), monday(3, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (Pacing{Windows: tt.windows}).RollsAt(tt.now, tt.pausedUntil); !got.Equal(tt.want) {
				t.Errorf("RollsAt(%v, %v) = %v, want %v", tt.now, tt.pausedUntil, got, tt.want)
			}
		})
	}
}

// TestABadPacingValueDropsNoOther: each value is read on its own; a typo in one keeps
// the others, and the error names it.
func TestABadPacingValueDropsNoOther(t *testing.T) {
	for _, c := range []struct {
		text          PacingText
		wantWave      int
		wantWindow    bool
		wantPin       Pinning
		wantOnFailure OnFailure
		wantCanary    Canary
		wantBake      time.Duration
		wantAnalysis  Analysis
		wantErr       string
	}{
		{text: PacingText{Window: "daily 09:00-17:00 UTC", WaveSize: "five"}, wantWindow: true, wantErr: `wave size "five"`},
		{text: PacingText{Window: "daily 09:00-17:00 UTC", Pin: "yes"}, wantWindow: true, wantErr: `pin "yes"`},
		{text: PacingText{Window: "daily 25:00-17:00 UTC", WaveSize: "5", Pin: "true"}, wantWave: 5, wantPin: PinOn, wantErr: "25:00"},
		{text: PacingText{Window: "sometimes", WaveSize: "-1", Pin: "maybe"}, wantErr: `wave size "-1"`},
		{text: PacingText{Window: "daily 09:00-17:00 UTC", WaveSize: "5", Pin: "false"}, wantWave: 5, wantWindow: true, wantPin: PinOff},
		{text: PacingText{Pin: "true", OnFailure: "revert"}, wantPin: PinOn, wantOnFailure: FailRevert},
		{text: PacingText{WaveSize: "2", OnFailure: "undo"}, wantWave: 2, wantErr: `on-failure "undo"`},
		{text: PacingText{OnFailure: " halt "}, wantOnFailure: FailHalt},
		{text: PacingText{Canary: "1", Bake: "5m"}, wantCanary: Canary{N: 1}, wantBake: 5 * time.Minute},
		{text: PacingText{Canary: "10%", Bake: "soon"}, wantCanary: Canary{N: 10, Percent: true}, wantErr: `bake "soon"`},
		{text: PacingText{WaveSize: "2", Canary: "0", Bake: "48h"}, wantWave: 2, wantErr: `canary "0"`},
		{text: PacingText{Canary: "150%", Bake: "90s"}, wantBake: 90 * time.Second, wantErr: `canary "150%"`},
		{text: PacingText{Bake: "500ms"}, wantErr: `bake "500ms"`},
		{text: PacingText{Bake: "1m", Analysis: "error-ratio < 0.05"}, wantBake: time.Minute, wantAnalysis: Analysis{"error-ratio", "<", 0.05}},
		{text: PacingText{Bake: "1m", Analysis: " p99-latency>=1e3 "}, wantBake: time.Minute, wantAnalysis: Analysis{"p99-latency", ">=", 1000}},
		{text: PacingText{Bake: "1m", Analysis: `sum(rate(x[1m])) < 1`}, wantBake: time.Minute, wantErr: "want a query the install names"},
		{text: PacingText{Bake: "1m", Analysis: "error-ratio < NaN"}, wantBake: time.Minute, wantErr: "want a query the install names"},
		{text: PacingText{Bake: "1m", Analysis: "error-ratio = 1"}, wantBake: time.Minute, wantErr: "want a query the install names"},
		{text: PacingText{Bake: "1m", Analysis: "q < " + strings.Repeat("1", 300)}, wantBake: time.Minute, wantErr: "more than 256"},
	} {
		p, err := ParsePacing(c.text)
		if p.WaveSize != c.wantWave || (p.Windows != nil) != c.wantWindow || p.Pinning != c.wantPin || p.OnFailure != c.wantOnFailure ||
			p.Canary != c.wantCanary || p.Bake != c.wantBake || p.Analysis != c.wantAnalysis {
			t.Errorf("ParsePacing(%+v) = %+v; want wave %d, window %v, pin %v, on failure %v, canary %v, bake %v", c.text, p, c.wantWave, c.wantWindow, c.wantPin, c.wantOnFailure, c.wantCanary, c.wantBake)
		}
		if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("ParsePacing(%+v) error = %v; want one naming %q", c.text, err, c.wantErr)
		}
	}
}

// TestTheFirstWaveIsTheCanary: the canary sizes the first wave, as a number or a
// percent rounded up, at least one; a bake alone makes it a wave, or one workload; the
// waves after it are the wave size, or all the rest at once.
func TestTheFirstWaveIsTheCanary(t *testing.T) {
	for _, c := range []struct {
		p                   Pacing
		users, first, later int
	}{
		{Pacing{WaveSize: 2}, 6, 2, 2},
		{Pacing{WaveSize: 2, Canary: Canary{N: 1}}, 6, 1, 2},
		{Pacing{Canary: Canary{N: 1}}, 6, 1, 6},
		{Pacing{Canary: Canary{N: 10, Percent: true}}, 6, 1, 6},
		{Pacing{Canary: Canary{N: 10, Percent: true}}, 25, 3, 25},
		{Pacing{Bake: time.Minute}, 6, 1, 6},
		{Pacing{Bake: time.Minute, WaveSize: 3}, 6, 3, 3},
	} {
		if first, later := c.p.FirstWave(c.users), c.p.LaterWaves(c.users); first != c.first || later != c.later {
			t.Errorf("%+v of %d users: first wave %d, later %d; want %d, %d", c.p, c.users, first, later, c.first, c.later)
		}
	}
	for _, c := range []struct {
		p            Pacing
		place, users int
		wave         int
	}{
		{Pacing{WaveSize: 2}, 0, 6, 1}, {Pacing{WaveSize: 2}, 2, 6, 2}, {Pacing{WaveSize: 2}, 5, 6, 3},
		{Pacing{Canary: Canary{N: 1}, WaveSize: 2}, 0, 6, 1}, {Pacing{Canary: Canary{N: 1}, WaveSize: 2}, 1, 6, 2}, {Pacing{Canary: Canary{N: 1}, WaveSize: 2}, 3, 6, 3},
		{Pacing{Canary: Canary{N: 1}}, 5, 6, 2},
	} {
		if got := c.p.WaveOf(c.place, c.users); got != c.wave {
			t.Errorf("%+v: number %d of %d is in wave %d, want %d", c.p, c.place+1, c.users, got, c.wave)
		}
	}
	src := Source{WaveSize: 4, Canary: Canary{N: 2}, Bake: time.Minute}
	if got := src.Paces(Pacing{WaveSize: 3, Bake: 5 * time.Minute}); got.WaveSize != 3 || got.Canary != src.Canary || got.Bake != 5*time.Minute {
		t.Errorf("Paces(%+v) = %+v; want the smaller wave, the source's canary, the longer bake", src, got)
	}
}

// TestOnlyAPinnedWorkloadReverts: revert asked of an unpinned workload, on itself or
// wider, is told, and it halts; a pinned one reverts; the workload's own setting wins.
func TestOnlyAPinnedWorkloadReverts(t *testing.T) {
	namespace := Pacing{OnFailure: FailRevert}
	unpinned := Pacing{}.Over(namespace)
	if unpinned.Reverts() || !strings.Contains(unpinned.NotReverted(), "nothing to go back to") {
		t.Errorf("unpinned, revert from its namespace: reverts %v, told %q; want it halts, told why", unpinned.Reverts(), unpinned.NotReverted())
	}
	pinned := Pacing{Pinning: PinOn}.Over(namespace)
	if !pinned.Reverts() || pinned.NotReverted() != "" {
		t.Errorf("pinned, revert from its namespace: reverts %v, told %q; want it reverts", pinned.Reverts(), pinned.NotReverted())
	}
	own := Pacing{Pinning: PinOn, OnFailure: FailHalt}.Over(namespace)
	if own.Reverts() || own.NotReverted() != "" {
		t.Errorf("pinned, halt of its own over revert: reverts %v, told %q; want it halts, untold", own.Reverts(), own.NotReverted())
	}
}
