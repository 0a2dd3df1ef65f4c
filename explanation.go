package confighash

import "time"

// Explanation says, for people and scripts, how confighash sees a workload: whether it
// is opted in and by what, every source it uses and whether it counts, the record
// against the sources now, and whether a rollout is due.
type Explanation struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// OptedIn says whether confighash acts on the workload; OptIn says by what, or why not.
	OptedIn  bool                `json:"optedIn"`
	OptIn    string              `json:"optIn"`
	Problems []string            `json:"problems,omitempty"`
	Sources  []SourceExplanation `json:"sources"`
	// TemplateHash is the hash on the pod template; Hash the one the webhook would
	// write now (empty without the key).
	TemplateHash string `json:"templateHash"`
	Hash         string `json:"hash,omitempty"`
	Adopted      string `json:"adopted,omitempty"`
	// Pacing says how its changes roll: waves, windows; empty for at once.
	Pacing string `json:"pacing,omitempty"`
	// NextOpening is when its rollout window next opens, for a change held by it.
	NextOpening *time.Time `json:"nextOpening,omitempty"`
	// Held and Failed are the markers of a halted wave: the change it holds the
	// workload for, and the one that failed in it.
	Held   string `json:"held,omitempty"`
	Failed string `json:"failed,omitempty"`
	// Watcher is what the watcher last decided for it (AnnotationStatus), in words;
	// Warnings, its latest Warning Events on it, newest first.
	Watcher  string   `json:"watcher,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Unseen says what could not be read, and what follows from it.
	Unseen []string `json:"unseen,omitempty"`
	// Verdict is one of VerdictUpToDate, VerdictRollout, VerdictNoRollout,
	// VerdictPending, VerdictUnknown, VerdictCreated, VerdictHeld, VerdictInPlace.
	Verdict string `json:"verdict"`
	// Why says what the verdict rests on.
	Why string `json:"why"`
}

// SourceExplanation is one source a workload uses or names.
type SourceExplanation struct {
	Kind string   `json:"kind"`
	Name string   `json:"name"`
	Uses []string `json:"uses"`
	// Counts says whether it enters the hash; Why, when it does not, or why it does.
	Counts bool   `json:"counts"`
	Why    string `json:"why,omitempty"`
	// Keys are the keys that count; empty means all of them.
	Keys []string `json:"keys,omitempty"`
	// Recorded is its entry in the sources record; Now, its digest now ("absent" when
	// it does not exist); both empty without the key.
	Recorded string `json:"recorded,omitempty"`
	Now      string `json:"now,omitempty"`
	// Snapshot is the snapshot a pinned pod template names for it: what its revision
	// runs; RollsTo, the one the next rollout names, when that differs.
	Snapshot string `json:"snapshot,omitempty"`
	RollsTo  string `json:"rollsTo,omitempty"`
}

// The verdicts.
const (
	VerdictUpToDate  = "up to date"
	VerdictRollout   = "rollout pending"
	VerdictNoRollout = "nothing will roll"
	VerdictUnknown   = "unknown"
	// VerdictPending is for sources that started to count: the watcher finds out
	// whether the running pods hold their data.
	VerdictPending = "pending"
	// VerdictCreated is for a manifest not yet applied: the webhook hashes it at its
	// creation.
	VerdictCreated = "hashed at creation"
	// VerdictHeld is for a change due that the watcher has not released: a halted
	// wave, a closed rollout window, a wave still to come, or a source that keeps
	// changing.
	VerdictHeld = "held"
	// VerdictInPlace is for a workload whose pods are restarted in place: its pod
	// template rolls for nothing.
	VerdictInPlace = "restarted in place"
)

// ExplainInput is what Explain needs of a workload and its namespace.
type ExplainInput struct {
	Vocabulary Vocabulary
	Workload   *Workload
	// New is set for a manifest not yet applied.
	New bool
	// Mode is how confighash acts in the namespace.
	Mode Mode
	// Sources are the namespace's sources that exist, by reference.
	Sources map[SourceRef]Source
	// Old, when set, are the sources as they were: the workload is taken as the
	// webhook left it with them, to tell what the change to Sources rolls.
	Old map[SourceRef]Source
	// Key, when HaveKey, lets digests and hashes be compared.
	Key     Key
	HaveKey bool
	// Pacing is the namespace's; Now, the time rollout windows are read at.
	Pacing Pacing
	// Lifecycle is the components' (--reload-on-create, --reload-on-delete).
	Lifecycle Lifecycle
	Now       time.Time
	// Flapping is what the watcher last said when it held the workload because a
	// source whose change is due keeps changing (its FlappingHeld Event); "" for none.
	Flapping string
	// Warnings are the watcher's latest Warning Events on the workload, in words.
	Warnings []string
	// InPlaceOff is set when the watcher said the install restarts no pod in place:
	// a workload that asks for it rolls instead.
	InPlaceOff bool
	// What could not be read, for someone with a namespace's view rights alone:
	// ModeUnseen, the namespace, whose mode is then taken from the workload; Hidden,
	// the source kinds that could not be listed, whose sources are neither present nor
	// absent; Unseen, a sentence for each read refused or absent.
	ModeUnseen bool
	Hidden     SourceKinds
	Unseen     []string
	// Written is the last write of each source read, and Admitted the workload's own
	// last write (not its status's): without the key, they tell which sources changed
	// since an admission hashed them.
	Written  map[SourceRef]Written
	Admitted time.Time
	// WaveUsers returns the users of a source that waves take, "Kind/name", in the
	// order they take them (WaveOrder); nil when the namespace's workloads were not
	// listed.
	WaveUsers func(SourceRef) []string
}
