package confighash

import (
	"fmt"
	"slices"
	"time"
)

// A hold keeps a due change from rolling. Every hold is a row of Holds: the decision
// reads which of them gate a workload's changes, so that every admission keeps its old
// hash (gated), the watcher which it counts and says, restarts in place which they
// wait for, and explain the order to ask them in; explain and the watcher's Events
// tell each in its row's words. A new hold is a row, its test (holds_test.go) and its
// docs (CONTRIBUTING.md, "Adding a hold").

// HoldReason names a hold.
type HoldReason string

const (
	// HoldHalted: its wave halted on a failure; a marker on the workload
	// (AnnotationHeld) holds it until the source changes again or it is resumed.
	HoldHalted HoldReason = "halted"
	// HoldWindow: outside its rollout window (AnnotationRolloutWindow).
	HoldWindow HoldReason = "window"
	// HoldWave: waiting for its wave (AnnotationWaveSize).
	HoldWave HoldReason = "wave"
	// HoldFlapping: the sources whose change is due keep changing (--flap-limit); a
	// marker on the workload (AnnotationFlapping) holds it until they are quiet.
	HoldFlapping HoldReason = "flapping"
	// HoldPause: within the pause period after its last rollout (AnnotationPausePeriod).
	HoldPause HoldReason = "pause"
)

// Hold is a row of the table of holds.
type Hold struct {
	Reason HoldReason
	// Gates reports whether the hold may hold the workload's due changes: then the
	// decision keeps the old digests of a due change (Decision.Held), every admission
	// writes the old hash, and only the watcher releases it. Nil for a hold that gates
	// nothing of its own: a halt holds only what a wave gated, and the watcher alone
	// keeps the pause.
	Gates func(Gating) bool
	// InPlace: a restart in place waits for it too (Restart).
	InPlace bool
	// Counted: the watcher counts the workloads it holds, a value of the metric
	// confighash_watcher_held_workloads{reason}.
	Counted bool
	// Says is how the hold is told, for people: why it holds a change, and when the
	// change rolls. explain's verdict and the watcher's Event both read it. Nil for a
	// hold explain learns of from the status the watcher writes.
	Says func(HoldFacts) (why, rolls string)
}

// Gating is what tells whether a hold gates a workload's changes: its pacing, whether
// a source that counts rolls in waves, and the sources the watcher marked it held for
// because they keep changing.
type Gating struct {
	Pacing      Pacing
	SourceWaves bool
	Flapping    []Trigger
}

// HoldFacts are what a hold's words tell of it: the change whose rollout failed, for
// a halt; the rollout windows and when they next open, for a window; the sources that
// keep changing, for flapping.
type HoldFacts struct {
	Failed   Trigger
	Windows  Windows
	Opens    time.Time
	Flapping []Trigger
}

// Holds are the holds in the order the watcher and explain ask them: a halted wave,
// the window, sources that keep changing, the wave; then the pause, which the watcher
// alone keeps.
var Holds = []Hold{
	{Reason: HoldHalted, Counted: true, Says: func(f HoldFacts) (string, string) {
		return fmt.Sprintf("its wave halted when the rollout of %s failed", f.Failed),
			fmt.Sprintf("at the next change of that source, or when resumed (confighash resume, or remove %s)", AnnotationHeld)
	}},
	{Reason: HoldWindow, Gates: func(g Gating) bool { return g.Pacing.Windows != nil }, InPlace: true, Counted: true, Says: func(f HoldFacts) (string, string) {
		return fmt.Sprintf("outside its rollout window (%s)", f.Windows), "when the window opens, at " + f.Opens.UTC().Format(time.RFC3339)
	}},
	{Reason: HoldFlapping, Gates: func(g Gating) bool { return len(g.Flapping) > 0 }, Counted: true, Says: func(f HoldFacts) (string, string) {
		refs := make([]SourceRef, len(f.Flapping))
		for i, t := range f.Flapping {
			refs[i] = t.SourceRef
		}
		return fmt.Sprintf("%s kept changing, past the watcher's --flap-limit", ListRefs(refs)),
			fmt.Sprintf("once, with the latest data, when no change has come for the watcher's --flap-quiet, or when resumed (confighash resume, or remove %s)", AnnotationFlapping)
	}},
	{Reason: HoldWave, Gates: func(g Gating) bool { return g.Pacing.Waves() || g.SourceWaves }, InPlace: true, Counted: true, Says: func(HoldFacts) (string, string) {
		return "waiting for its wave", "once the workloads before it have rolled out"
	}},
	{Reason: HoldPause, InPlace: true},
}

// HoldOf is the row of the reason.
func HoldOf(reason HoldReason) Hold {
	i := slices.IndexFunc(Holds, func(h Hold) bool { return h.Reason == reason })
	return Holds[i]
}

// Told is the hold in one sentence: "why: it rolls when".
func (h Hold) Told(f HoldFacts) string {
	why, rolls := h.Says(f)
	return why + ": it rolls " + rolls
}

// gates reports whether a hold of the table gates the changes of a workload.
func gates(g Gating) bool {
	for _, h := range Holds {
		if h.Gates != nil && h.Gates(g) {
			return true
		}
	}
	return false
}

// CountedHolds are the reasons the watcher counts, in the table's order.
func CountedHolds() []HoldReason {
	var out []HoldReason
	for _, h := range Holds {
		if h.Counted {
			out = append(out, h.Reason)
		}
	}
	return out
}

// Gated reports whether the watcher releases the workload's changes: a hold of the
// table gates them (Holds).
func (p Pacing) Gated() bool { return gates(Gating{Pacing: p}) }
