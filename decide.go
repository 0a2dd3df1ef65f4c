package confighash

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

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
	// Restart is the hash of the data an Argo Rollout's pods are to run, restarted for
	// it where they do not (Policy.RolloutRestart); "" when they roll: its pod
	// template keeps Hash, the one it rolled with.
	Restart string
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
	st := step{rolling: in.Pods.Fresh || s.RecordErr != nil, proven: in.Pods.Proven, lifecycle: in.Lifecycle}
	// A new workload or pod template rolls by itself, a due change only by its hash.
	templateRolls := st.rolling
	next, unproven := st.next(prev, d.Observations)
	if !st.rolling && next.Hash(in.Key) != prev.Hash(in.Key) {
		// A rollout is due: the new pods will hold every source's current data.
		rolling := step{rolling: true, proven: in.Pods.Proven, lifecycle: in.Lifecycle}
		rolled, rolledUnproven := rolling.next(prev, d.Observations)
		rolled, rolledObservations, rolledForm := in.namespaced(rolled, d.Observations, form, current)
		if release := rolled.Hash(in.Key); prev != nil && in.State.Release != release && d.gated(current, s.Flapping) {
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
	switch {
	case s.Hash == "" && !st.rolling && (first || s.Adopted == hash):
		d.Record, d.Adopted = next, hash
	case d.Policy.RolloutRestart && s.Hash != "" && !templateRolls && d.Held == nil && !d.Pacing.Pinned():
		// Its pods are restarted for a change: its pod template rolls for nothing.
		d.Record, d.Hash, d.Restart = next, s.Hash, hash
	default:
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
		Settled(s.Hash, s.Adopted, cmp.Or(d.Hash, d.Adopted)) && (d.Restart == "" || s.Runs() == d.Restart)
}

// gated reports whether only the watcher releases the workload's changes: waves or
// windows apply to it, a source that counts is paced in waves, or the watcher marked
// it held for sources that keep changing.
func (d *Decision) gated(sources map[SourceRef]Source, flapping []Trigger) bool {
	sourceWaves := false
	for _, o := range d.Observations {
		sourceWaves = sourceWaves || o.Counts && sources[o.SourceRef].Waves()
	}
	return gates(Gating{Pacing: d.Pacing, SourceWaves: sourceWaves, Flapping: flapping})
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

// fits returns ErrAnnotationsTooLarge when writing the decision on a workload whose
// other annotations take others would go over the API server's bound.
func (d *Decision) fits(others AnnotationBytes) error {
	if others.Metadata+recordBytesAtMost(d.Record) <= MaxAnnotationBytes/2 && others.Template <= MaxAnnotationBytes/2 {
		return nil // far from the bound: the record is not rendered to be measured
	}
	meta := others.Metadata + entryBytes(AnnotationSources, d.Record.Text(d.Form)) + entryBytes(AnnotationAdopted, d.Adopted)
	template := others.Template + entryBytes(AnnotationHash, d.Hash)
	if len(d.Pins) > 0 {
		template += entryBytes(AnnotationPinned, d.Pins.String())
	}
	switch {
	case meta > MaxAnnotationBytes-touchReserve:
		return fmt.Errorf("%w: with its sources record the workload's annotations would take %d bytes, over the %d the API server allows less %d kept for the watcher; it is left unhashed",
			ErrAnnotationsTooLarge, meta, MaxAnnotationBytes, touchReserve)
	case template > MaxAnnotationBytes:
		return fmt.Errorf("%w: with the hash its pod template's annotations would take %d bytes, over the %d the API server allows; it is left unhashed",
			ErrAnnotationsTooLarge, template, MaxAnnotationBytes)
	}
	return nil
}

// heldBack returns the record next with the entries that would roll the workload
// (whose part of the hash differs from prev's) kept as prev has them, and those
// sources: the changes are recorded when released, not before. ok is false when that
// does not give prev's hash, which the rules of next make impossible: the workload
// then rolls rather than carry a hash its record does not explain.
func heldBack(key Key, prev, next Record) (kept Record, held []SourceRef, ok bool) {
	old := make(map[SourceRef]RecordEntry, len(prev))
	for _, e := range prev {
		old[e.SourceRef] = e
	}
	kept = make(Record, 0, len(next))
	for _, e := range next {
		p, had := old[e.SourceRef]
		if e.hashed() == (had && p.hashed()) && (!e.hashed() || e.Digest == p.Digest) {
			kept = append(kept, e)
			continue
		}
		held = append(held, e.SourceRef)
		if had {
			kept = append(kept, p)
		}
	}
	return kept, held, kept.Hash(key) == prev.Hash(key)
}

// form returns the form the decision starts in: the record's, or the form written
// (writes) for a workload without a readable record, which has no digests to keep.
func (s State) form(writes Form) Form {
	if s.Record == nil || s.RecordErr != nil {
		return writes
	}
	return s.Form
}

// namespaced returns a record about to roll out, and the observations, in
// FormNamespaced unless the input writes FormShared: a due rollout writes the new form, so that switching rolls nothing
// by itself. Each digest of a rolled record is of its source's current data, digested
// again in the new form, but for data a pinned workload returned from (Declining),
// which is no longer at hand: such a record stays in its form until a later rollout.
func (in Input) namespaced(rolled Record, observations []Observation, form Form, sources map[SourceRef]Source) (Record, []Observation, Form) {
	if form == FormNamespaced || in.Writes == FormShared {
		return rolled, observations, form
	}
	g := digester{in.Key, in.Namespace, FormNamespaced}
	now := slices.Clone(observations)
	for i, o := range now {
		if o.Present {
			now[i].Digest = g.digest(o.Reference, sources[o.SourceRef])
		}
	}
	out := slices.Clone(rolled)
	for i, e := range out {
		if !e.Seen {
			continue
		}
		j, ok := slices.BinarySearchFunc(observations, e.SourceRef, func(o Observation, ref SourceRef) int { return o.Compare(ref) })
		if !ok || e.Declining || !observations[j].Present || observations[j].Digest != e.Digest {
			return rolled, observations, form
		}
		out[i].Digest = now[j].Digest
	}
	return out, now, FormNamespaced
}
