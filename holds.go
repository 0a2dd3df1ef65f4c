package confighash

// A hold keeps a due change from rolling. Every hold is a row of Holds: the decision
// reads which of them gate a workload's changes, so that every admission keeps its old
// hash (gated), the watcher which it counts and says, restarts in place which they
// wait for, and explain the order to ask them in. A new hold is a row, its test
// (holds_test.go) and its docs (CONTRIBUTING.md, "Adding a hold").

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
	// HoldFlapping: a source whose change is due keeps changing (--flap-limit).
	HoldFlapping HoldReason = "flapping"
	// HoldPause: within the pause period after its last rollout (AnnotationPausePeriod).
	HoldPause HoldReason = "pause"
)

// Hold is a row of the table of holds.
type Hold struct {
	Reason HoldReason
	// Gates reports whether the hold may hold the workload's due changes, from its
	// pacing and whether a source that counts rolls in waves: then the decision keeps
	// the old digests of a due change (Decision.Held), every admission writes the old
	// hash, and only the watcher releases it. Nil for a hold that gates nothing of its
	// own: a halt holds only what a wave gated, and the watcher alone keeps the rest.
	Gates func(p Pacing, sourceWaves bool) bool
	// InPlace: a restart in place waits for it too (Restart).
	InPlace bool
	// Counted: the watcher counts the workloads it holds, a value of the metric
	// confighash_watcher_held_workloads{reason}.
	Counted bool
}

// Holds are the holds in the order the watcher and explain ask them: a halted wave,
// the window, the wave; then those the watcher alone keeps.
var Holds = []Hold{
	{Reason: HoldHalted, Counted: true},
	{Reason: HoldWindow, Gates: func(p Pacing, _ bool) bool { return p.Windows != nil }, InPlace: true, Counted: true},
	{Reason: HoldWave, Gates: func(p Pacing, sourceWaves bool) bool { return p.WaveSize > 0 || sourceWaves }, InPlace: true, Counted: true},
	{Reason: HoldFlapping, Counted: true},
	{Reason: HoldPause, InPlace: true},
}

// gates reports whether a hold of the table gates the changes of a workload of this
// pacing.
func gates(p Pacing, sourceWaves bool) bool {
	for _, h := range Holds {
		if h.Gates != nil && h.Gates(p, sourceWaves) {
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
func (p Pacing) Gated() bool { return gates(p, false) }
