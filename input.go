package confighash

import (
	"cmp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// What a decision reads: the namespace's mode, the workload's state as its annotations
// say, the object an update replaces, and the sources and pods it is decided against.

// Mode is how confighash acts in a namespace.
type Mode int

// The modes.
const (
	ModeOff     Mode = iota // not at all
	ModeOptedIn             // on the workloads that opt in
	ModeEvery               // on every workload that does not opt out
)

// State is what confighash reads of a workload: its policy, the sources its pod
// template uses, and what confighash last wrote on it.
type State struct {
	Policy   Policy
	Problems []Problem
	// References are the pod template's, unless the workload opts out.
	References []Reference
	// Record is the sources record, nil when the workload has none; RecordErr, why it
	// could not be read.
	Record    Record
	RecordErr error
	// Form is the form of Record's digests.
	Form Form
	// Hash is the hash on the pod template; Adopted, the hash the workload was adopted
	// at while its pod template carries none; Restarted, the hash an Argo Rollout's
	// pods were last restarted for from this pod template (AnnotationRestartedHash),
	// "" for none, one made stale by a later template, or one that cannot be read.
	Hash      string
	Adopted   string
	Restarted string
	// Pins are the snapshots its pod template names (AnnotationPinned).
	Pins Pins
	// Release is the hash the watcher last released a gated workload to roll to
	// (AnnotationRelease).
	Release string
	// Held and Failed are the markers of a halted wave: the change it holds the
	// workload for, or that failed in it (AnnotationHeld, AnnotationFailed). One that
	// cannot be read is none: it holds nothing.
	Held, Failed Marker
	// Flapping are the sources the watcher holds the workload for because they keep
	// changing (AnnotationFlapping); one that cannot be read holds nothing.
	Flapping []Trigger
	// Reverted is the change the watcher reverted the workload from, and the hash that
	// failed (AnnotationReverted); one that cannot be read is none.
	Reverted Marker
	// Baking marks it in a change's first wave, baking (AnnotationBaking); one that
	// cannot be read is none.
	Baking Baking
	// Others are the bytes of its annotations apart from those the webhook writes,
	// when they are many (see annotationBytesOf).
	Others AnnotationBytes
}

// Read reads a workload's state, its annotations in this vocabulary.
func (v Vocabulary) Read(w *Workload) State {
	s := State{Hash: w.Template.Annotations[AnnotationHash], Adopted: w.Annotations[AnnotationAdopted],
		Release: w.Annotations[AnnotationRelease], Others: annotationBytesOf(w)}
	s.Held, _ = ParseMarker(w.Annotations[AnnotationHeld])
	s.Failed, _ = ParseMarker(w.Annotations[AnnotationFailed])
	s.Flapping, _ = ParseFlapping(w.Annotations[AnnotationFlapping])
	s.Reverted, _ = ParseMarker(w.Annotations[AnnotationReverted])
	s.Baking, _ = ParseBaking(w.Annotations[AnnotationBaking])
	s.Policy, s.Problems = v.ParsePolicy(w.Annotations, w.Template.Annotations)
	if s.Policy.RolloutRestart && w.Kind.GroupVersionKind != Rollout.GroupVersionKind {
		s.Policy.RolloutRestart = false
		s.Problems = append(s.Problems, Problem{ReloaderRolloutStrategy, "restart", "restarts the pods of an Argo Rollout alone; a " + w.Kind.Kind + " rolls through its pod template"})
	}
	if restarted, from, ok := strings.Cut(w.Annotations[AnnotationRestartedHash], " "); s.Policy.RolloutRestart && ok && validHash(restarted) && from == s.Hash {
		s.Restarted = restarted
	}
	s.Pins = TemplatePins(w.Template)
	if !s.Policy.OptOut {
		s.References = References(w.Template)
	}
	if text, ok := w.Annotations[AnnotationSources]; ok {
		s.Record, s.RecordErr = ParseRecord(text)
		s.Form = RecordForm(text)
	}
	return s
}

// RestartedMark is AnnotationRestartedHash for pods restarted for the hash restart
// from the pod template of hash template.
func RestartedMark(restart, template string) string { return restart + " " + template }

// Runs returns the hash of the data the workload's pods were last started with: the
// one an Argo Rollout's were restarted for, or its pod template's.
func (s State) Runs() string { return cmp.Or(s.Restarted, s.Hash) }

// PolicyIn returns the workload's policy as it applies in a namespace of this mode,
// and whether confighash acts on the workload there.
func (s State) PolicyIn(mode Mode) (Policy, bool) {
	switch mode {
	case ModeOff:
		return s.Policy, false
	case ModeEvery:
		p := s.Policy.ForEveryWorkload()
		return p, p.Enabled()
	}
	return s.Policy, s.Policy.Enabled()
}

// met reports whether confighash has met the workload before: it carries a record, a
// hash or an adoption.
func (s State) met() bool {
	return s.Record != nil || s.RecordErr != nil || s.Hash != "" || s.Adopted != ""
}

// Equal reports whether two states are the same, and so get the same decision.
func (s State) Equal(o State) bool {
	return s.Policy.Equal(o.Policy) && slices.Equal(s.Problems, o.Problems) &&
		slices.EqualFunc(s.References, o.References, Reference.Equal) &&
		slices.Equal(s.Record, o.Record) && (s.Record == nil) == (o.Record == nil) && s.Form == o.Form &&
		errorText(s.RecordErr) == errorText(o.RecordErr) && s.Hash == o.Hash && s.Adopted == o.Adopted && s.Restarted == o.Restarted && slices.Equal(s.Pins, o.Pins) &&
		s.Release == o.Release && s.Held == o.Held && s.Failed == o.Failed &&
		slices.Equal(s.Flapping, o.Flapping) && s.Reverted == o.Reverted && s.Baking.Equal(o.Baking) && s.Others == o.Others
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Pods is what is known of the data the workload's pods hold.
type Pods struct {
	// Fresh is set when the pods that will run are created after this admission: a new
	// workload, or a changed pod template. They read the current data.
	Fresh bool
	// Proven tells, for sources new to the record, whether the running pods provably
	// hold their current data (see Running.Holds). A source it does not name is
	// unproven: the webhook knows nothing of the running pods, the watcher finds out.
	Proven map[SourceRef]bool
}

// Sources is how the decision sees the ConfigMaps and Secrets of the workload's
// namespace: the webhook's reads, the watcher's cache, explain's listing.
type Sources interface {
	// Names lists the names of the namespace's sources of a kind, for name patterns.
	Names(kind SourceKind) ([]string, error)
	// Read returns the sources as they are now; one missing from the map is absent.
	Read(refs []SourceRef) (map[SourceRef]Source, error)
}

// Input is what the decision takes.
type Input struct {
	Key Key
	// Namespace is the workload's: digests are bound to it (FormNamespaced).
	Namespace string
	State     State
	// Mode is how confighash acts in the workload's namespace.
	Mode Mode
	Pods Pods
	// Pacing is how changes roll in the workload's namespace, its annotations aside.
	Pacing Pacing
	// RemakeSnapshots asks for the snapshots of the pins kept, too, where the source
	// still holds their data: the watcher found one gone (AnnotationRemakeSnapshots).
	RemakeSnapshots bool
	// Previous is the object an update replaces, nil for none; Template, the pod
	// template the update brings.
	Previous *Previous
	Template *corev1.PodTemplateSpec
	// Unpinned decides the workload as if it were not pinned, this once: its
	// namespace holds as many snapshots as it may.
	Unpinned bool
	// Touched are the sources a touch of the watcher names as changed (its trigger
	// annotation), none for any other write.
	Touched []SourceRef
	// InPlace is set where pods can be restarted in place (AnnotationRestart):
	// elsewhere, a workload that asks for it rolls.
	InPlace bool
	// Lifecycle is what a source's creation and deletion roll.
	Lifecycle Lifecycle
	// Writes is the newest form a record may be written in: a due rollout switches a
	// record to it, and a new record starts in it. FormShared while a component that
	// reads no other may still run (rule 12); a record is never switched back.
	Writes Form
}

// MayUse reports whether the source may count for the workload: its pod template
// references it, or its policy names it or has a name pattern that matches it, as
// usedOrNamed has it for every source at once. A workload past MaxSources is left as it
// is, so none counts.
func (s State) MayUse(ref SourceRef) bool {
	if len(s.References)+len(s.Policy.Include) > MaxSources {
		return false
	}
	_, referenced := slices.BinarySearchFunc(s.References, ref, func(r Reference, t SourceRef) int { return r.Compare(t) })
	return referenced || slices.Contains(s.Policy.Include, ref) ||
		slices.ContainsFunc(s.Policy.Patterns, func(p NamePattern) bool { return p.Matches(ref) })
}

// Previous is the object an update replaces, as Decide reads it: an apply may drop
// what confighash wrote on it, a return to an earlier revision may bring back that
// revision's metadata, and a changed pod template rolls the workload by itself. Each
// part is decoded only when the decision needs it: most updates need none.
type Previous struct {
	// Annotations returns its metadata annotations, nil if it cannot be read.
	Annotations func() map[string]string
	// Workload returns it decoded, nil if it cannot be read.
	Workload func() *Workload
}

// carry returns the state of the update with what the previous object says.
func (p *Previous) carry(s State, pacing Pacing) State {
	s = p.inherit(s)
	if s.Policy.Pacing.Over(pacing).Pinned() || s.Pins != nil {
		s = p.pinned(s)
	}
	return s
}

// inherit takes the sources record and the adoption from the previous object when the
// new one lacks them: an apply that replaces the whole object drops them, and losing
// them would lose baselines, deleted sources' last digests and the adoption.
func (p *Previous) inherit(s State) State {
	if s.Record == nil && s.RecordErr == nil {
		if text, ok := p.Annotations()[AnnotationSources]; ok {
			s.Record, s.RecordErr = ParseRecord(text)
			s.Form = RecordForm(text)
		}
	}
	if s.Adopted == "" {
		s.Adopted = p.Annotations()[AnnotationAdopted]
	}
	return s
}

// pinned returns the state of a pinned workload from what the previous object was
// pinned to.
func (p *Previous) pinned(s State) State {
	var was Pins
	if old := p.Workload(); old != nil {
		was = TemplatePins(old.Template)
	}
	switch {
	case s.Pins == nil:
		// An apply of a manifest that names the sources: the pins stay as they were.
		s.Pins = was
	case !slices.Equal(s.Pins, was):
		// A return to an earlier revision (kubectl rollout undo), which may bring its
		// metadata back too: what the workload ran until now is what it returns from.
		text := p.Annotations()[AnnotationSources]
		if record, err := ParseRecord(text); err == nil {
			s.Record, s.RecordErr, s.Form = record, nil, RecordForm(text)
		}
	}
	return s
}

// templateChanged reports whether the update changes the pod template, apart from the
// hash: the workload rolls by itself, and its new pods read the current data.
func (p *Previous) templateChanged(now *corev1.PodTemplateSpec) bool {
	old := p.Workload()
	return old != nil && now != nil && TemplateChanged(old.Template, now)
}
