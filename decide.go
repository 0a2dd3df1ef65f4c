package confighash

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

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
	// at while its pod template carries none.
	Hash    string
	Adopted string
	// Pins are the snapshots its pod template names (AnnotationPinned).
	Pins Pins
	// Release is the hash the watcher last released a gated workload to roll to
	// (AnnotationRelease).
	Release string
	// Held and Failed are the markers of a halted wave: the change it holds the
	// workload for, or that failed in it (AnnotationHeld, AnnotationFailed). One that
	// cannot be read is none: it holds nothing.
	Held, Failed Marker
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
	s.Policy, s.Problems = v.ParsePolicy(w.Annotations, w.Template.Annotations)
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
		errorText(s.RecordErr) == errorText(o.RecordErr) && s.Hash == o.Hash && s.Adopted == o.Adopted && slices.Equal(s.Pins, o.Pins) &&
		s.Release == o.Release && s.Held == o.Held && s.Failed == o.Failed && s.Others == o.Others
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
	// Writes is the newest form a record may be written in: a due rollout switches a
	// record to it, and a new record starts in it. FormShared while a component that
	// reads no other may still run (rule 12); a record is never switched back.
	Writes Form
}

// Decision is what a workload must carry, and whether it does.
type Decision struct {
	// Policy is the workload's policy as it applies in its namespace.
	Policy Policy
	// Acts is set when confighash acts on the workload: it opts in, or its namespace
	// opts every workload in, and it does not opt out. The rest, but RecordErr, is set
	// only then.
	Acts bool
	// InPlace is set, and Acts not, for a workload whose pods are restarted in place
	// (AnnotationRestart): its pod template is left as it is. RollsInstead says why
	// one that asks for it rolls instead.
	InPlace      bool
	RollsInstead string
	// RecordErr is why the sources record the workload carries could not be read: a
	// new one replaces it.
	RecordErr error
	// Observations are the sources the workload uses or names, as they are now,
	// whether they count or not, sorted by kind and name.
	Observations []Observation
	// Record is the sources record to write on its metadata; nil when nothing is to be
	// written yet, for a workload met for the first time whose pods are not known to
	// hold the current data. Hash is the hash to write on its pod template, "" for none:
	// then Adopted is the hash it is adopted at, without a rollout.
	Record  Record
	Hash    string
	Adopted string
	// Form is the form of Record's digests: the state's, until a rollout is due.
	Form Form
	// Unproven are the sources that started to count, left out of Record until the
	// running pods are known to hold their current data (Pods.Proven).
	Unproven []SourceRef
	// Converged is set when the workload already carries Record and Hash, or is
	// adopted at Record's hash, and nothing is unproven.
	Converged bool
	// Pacing is how the workload's changes roll. Held are the sources whose changes
	// are due to roll a gated workload, kept out of Record until the watcher releases
	// the workload to roll to Release, the hash it then gets.
	Pacing  Pacing
	Held    []SourceRef
	Release string
	// Pins are the snapshots the pod template of a pinned workload must name, once it
	// has rolled out pinned; Snapshots, those of the sources' current data that must
	// exist first.
	Pins      Pins
	Snapshots []Snapshot
}

// ErrTooManySources is returned by Decide for a workload that uses or names more than
// MaxSources.
var ErrTooManySources = errors.New("too many sources")

// ErrSourceTooLarge is returned by Decide for a workload that uses a source of more
// than MaxSourceKeys keys.
var ErrSourceTooLarge = errors.New("source too large")

// MaxSources is how many sources one workload may use or name. A workload with more is
// left as it is, with a warning, rather than hashed from a partial list: each source
// costs a read at every admission (rule 9).
const MaxSources = 256

// Decide decides what a workload must carry, for an update from what it replaces too;
// see decide.
func Decide(in Input, sources Sources) (Decision, error) {
	if in.Previous != nil {
		in.State = in.Previous.carry(in.State, in.Pacing)
	}
	if in.Unpinned {
		in.Pacing.Pinning = PinOff
		in.State.Policy.Pacing.Pinning = PinOff
	}
	d, err := decide(in, sources)
	if err == nil && len(d.Unproven) > 0 && in.Previous != nil && in.Previous.templateChanged(in.Template) {
		// The new pods will read the current data: nothing to find out.
		in.Pods.Fresh = true
		d, err = decide(in, sources)
	}
	d.RecordErr = in.State.RecordErr
	return d, err
}

// decide decides what a workload must carry: which sources count, the record of their
// digests, and the pod-template hash, which changes only when the running pods may
// hold data other than the current data of a source that counts (rules 1, 2
// and 8). A change of what counts rolls nothing: a source that stops counting keeps
// its entry, and one that starts to count is recorded without a rollout when the pods
// hold its current data. The webhook, the watcher and explain all decide here.
func decide(in Input, sources Sources) (Decision, error) {
	s := in.State
	d := Decision{}
	if d.Policy, d.Acts = s.PolicyIn(in.Mode); !d.Acts {
		return d, nil
	}
	if d.Policy.over != "" {
		return d, fmt.Errorf("%w: %s; it is left as it is", ErrTooManySources, d.Policy.over)
	}
	if d.Pacing = d.Policy.Pacing.Over(in.Pacing); d.Policy.Restart.PodByPod() {
		switch {
		case d.Pacing.Pinned():
			d.RollsInstead = "a pinned workload's pods run the snapshots it names, which only a rollout changes: it rolls instead"
		case !in.InPlace:
			d.RollsInstead = "this install restarts no pod in place (below Kubernetes 1.36, or --restart-in-place=false): it rolls instead"
		default:
			// Its pods are restarted where they run: its pod template rolls for nothing.
			d.Acts, d.InPlace = false, true
			return d, nil
		}
	}
	names, err := d.Policy.patternNames(s.Record, sources)
	if err != nil {
		return d, err
	}
	candidates := d.Policy.Candidates(s.References, names)
	used := usedOrNamed(s.References, candidates)
	if len(used) > MaxSources {
		return d, fmt.Errorf("%w: the workload uses or names %d ConfigMaps and Secrets, more than the %d allowed; it is left as it is", ErrTooManySources, len(used), MaxSources)
	}
	refs := make([]SourceRef, len(used))
	for i, u := range used {
		refs[i] = u.SourceRef
	}
	if errors.Is(s.RecordErr, ErrLaterForm) && !in.Pods.Fresh && !slices.ContainsFunc(in.Touched, func(t SourceRef) bool { return slices.Contains(refs, t) }) {
		// A later release wrote it: left as it is until a source it uses changes, or
		// its pod template does (rule 12).
		d.Form, d.Converged = FormLater, true
		return d, nil
	}
	current, err := sources.Read(refs)
	if err != nil {
		return d, fmt.Errorf("read the sources: %w", err)
	}
	for _, ref := range refs {
		if current[ref].TooLarge {
			return d, fmt.Errorf("%w: %s has more than the %d keys whose digests confighash keeps; it is left as it is", ErrSourceTooLarge, ref, MaxSourceKeys)
		}
	}
	form := s.form(in.Writes)
	d.Observations = d.Policy.observe(digester{in.Key, in.Namespace, form}, used, candidates, current)

	// A pinned template says which data its pods run: a return to an earlier revision
	// declines the data it returned from.
	prev := s.Record.withoutDeclines()
	if d.Pacing.Pinned() {
		prev = s.Record.returnedTo(s.Pins)
	}
	first := !s.met() && !in.Pods.Fresh
	st := step{rolling: in.Pods.Fresh || s.RecordErr != nil, proven: in.Pods.Proven}
	next, unproven := st.next(prev, d.Observations)
	if !st.rolling && next.Hash(in.Key) != prev.Hash(in.Key) {
		// A rollout is due: the new pods will hold every source's current data.
		rolling := step{rolling: true, proven: in.Pods.Proven}
		rolled, rolledUnproven := rolling.next(prev, d.Observations)
		rolled, rolledObservations, rolledForm := in.namespaced(rolled, d.Observations, form, current)
		if release := rolled.Hash(in.Key); prev != nil && in.State.Release != release && d.gated(current) {
			// Not released yet: the watcher rolls it when its wave or window comes.
			if kept, held, ok := heldBack(in.Key, prev, next); ok {
				next, d.Held, d.Release = kept, held, release
			}
		}
		if d.Held == nil {
			st, next, unproven = rolling, rolled, rolledUnproven
			d.Observations, form = rolledObservations, rolledForm
		}
	} else if st.rolling {
		next, d.Observations, form = in.namespaced(next, d.Observations, form, current)
	}
	d.Form = form
	if first && len(unproven) > 0 {
		d.Unproven = unproven
		return d, nil
	}
	hash := next.Hash(in.Key)
	if s.Hash == "" && !st.rolling && (first || s.Adopted == hash) {
		d.Record, d.Adopted = next, hash
	} else {
		d.Record, d.Hash = next, hash
	}
	// Pinned, and no longer, from a rollout on, never by adoption: pinning changes the
	// pod template.
	switch pinned := d.Pacing.Pinned(); {
	case d.Hash == "":
	case pinned && (st.rolling || len(s.Pins) > 0):
		d.Pins, d.Snapshots = pinsOf(next, s.Pins, d.Observations, in.RemakeSnapshots, digester{in.Key, in.Namespace, form}.pin(current))
	case !pinned && !st.rolling:
		d.Pins = s.Pins
	}
	d.Unproven = unproven
	d.Converged = d.Carried(s) && len(unproven) == 0 && slices.Equal(d.Pins, s.Pins)
	return d, d.fits(s.Others)
}

// Carried reports whether a workload's state carries the decision's record, in its
// form, and its hash or an adoption at that hash: what an admission that meets the
// decision writes, pins aside, which the webhook leaves out past the snapshot cap.
func (d Decision) Carried(s State) bool {
	return s.RecordErr == nil && s.Record != nil && slices.Equal(d.Record, s.Record) && d.Form == s.Form &&
		Settled(s.Hash, s.Adopted, cmp.Or(d.Hash, d.Adopted))
}

// gated reports whether only the watcher releases the workload's changes: waves or
// windows apply to it, or a source that counts is paced in waves.
func (d *Decision) gated(sources map[SourceRef]Source) bool {
	sourceWaves := false
	for _, o := range d.Observations {
		sourceWaves = sourceWaves || o.Counts && sources[o.SourceRef].WaveSize > 0
	}
	return gates(d.Pacing, sourceWaves)
}

// patternNames returns what the policy's name patterns are matched against: the
// sources of their kinds that exist now, and those in the record, so that a deleted
// one stays in it as absent.
func (p Policy) patternNames(record Record, sources Sources) ([]SourceRef, error) {
	if len(p.Patterns) == 0 {
		return nil, nil
	}
	names := record.Sources()
	var listed []SourceKind
	for _, pat := range p.Patterns {
		if slices.Contains(listed, pat.Kind) {
			continue
		}
		listed = append(listed, pat.Kind)
		found, err := sources.Names(pat.Kind)
		if err != nil {
			return nil, fmt.Errorf("list the %ss its name patterns may match: %w", pat.Kind, err)
		}
		if work := p.matchWork(pat.Kind, found); work > maxMatchWork {
			return nil, fmt.Errorf("%w: matching its name patterns against the namespace's %d %ss is more work than allowed; it is left as it is", ErrTooManySources, len(found), pat.Kind)
		}
		for _, name := range found {
			names = append(names, SourceRef{pat.Kind, name})
		}
	}
	return names, nil
}

// usedOrNamed merges the pod template's references with the candidates, both sorted,
// taking a candidate's form (whole objects for named ones) where both have a source.
func usedOrNamed(refs, candidates []Reference) []Reference {
	out := make([]Reference, 0, len(refs)+len(candidates))
	i, j := 0, 0
	for i < len(refs) || j < len(candidates) {
		switch {
		case j == len(candidates) || i < len(refs) && refs[i].Compare(candidates[j].SourceRef) < 0:
			out = append(out, refs[i])
			i++
		case i < len(refs) && refs[i].SourceRef == candidates[j].SourceRef:
			out = append(out, candidates[j])
			i, j = i+1, j+1
		default:
			out = append(out, candidates[j])
			j++
		}
	}
	return out
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

// observe returns the observations of the used or named sources: whether each exists,
// whether it counts, and its digest when it exists. Sources missing from the map are
// absent.
func (p Policy) observe(dig digester, used, candidates []Reference, sources map[SourceRef]Source) []Observation {
	obs := make([]Observation, len(used))
	for i, ref := range used {
		_, candidate := slices.BinarySearchFunc(candidates, ref.SourceRef, func(r Reference, t SourceRef) int { return r.Compare(t) })
		src, ok := sources[ref.SourceRef]
		o := Observation{Reference: ref, Present: ok && src.Present, Counts: candidate}
		if o.Present {
			o.Digest = dig.digest(ref, src)
			o.Counts = candidate && p.counts(ref, src)
		}
		obs[i] = o
	}
	return obs
}
