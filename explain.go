package confighash

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Explain explains a workload from the decision the webhook and the watcher make.
func Explain(in ExplainInput) (e Explanation) {
	w := in.Workload
	state := in.Vocabulary.Read(w)
	if in.ModeUnseen {
		in.Mode = modeFrom(state)
	}
	status, statusErr := ParseStatus(w.Annotations[AnnotationStatus])
	e = Explanation{Kind: w.Kind.Kind, Namespace: w.Namespace, Name: w.Name, TemplateHash: state.Hash, Adopted: state.Adopted,
		Held: state.Held.String(), Failed: state.Failed.String(), Watcher: statusWords(status), Warnings: in.Warnings, Unseen: in.Unseen}
	for _, p := range state.Problems {
		e.Problems = append(e.Problems, p.Error())
	}
	if state.RecordErr != nil {
		e.Problems = append(e.Problems, state.RecordErr.Error())
	}
	if statusErr != nil {
		e.Problems = append(e.Problems, "annotation "+AnnotationStatus+": "+statusErr.Error())
	}
	key := in.Key
	if !in.HaveKey {
		key = unknownKey // which sources count, and what rolls, do not depend on the key
	}
	if in.Old != nil {
		hashed, err := Decide(Input{Key: key, Namespace: w.Namespace, State: state, Mode: in.Mode, Pods: Pods{Fresh: true}}, listedSources(in.Old))
		if err == nil && hashed.Acts {
			state.Record, state.Form, state.Hash, state.Adopted = hashed.Record, hashed.Form, hashed.Hash, hashed.Adopted
		}
	}
	// As an install restarts in place by default (the watcher's --restart-in-place).
	d, err := Decide(Input{Key: key, Namespace: w.Namespace, State: state, Mode: in.Mode, Pods: Pods{Fresh: in.New && in.Old == nil}, Pacing: in.Pacing, InPlace: !in.InPlaceOff, Lifecycle: in.Lifecycle}, listedSources(in.Sources))
	e.Pacing = d.Pacing.String()
	if d.RollsInstead != "" {
		e.Problems = append(e.Problems, AnnotationRestart+": "+d.RollsInstead)
	}
	if why := d.Pacing.NotReverted(); why != "" && d.Acts {
		e.Problems = append(e.Problems, AnnotationOnFailure+": "+why)
	}
	// Sources that could not be read would be taken as absent: no hash is recomputed.
	keyless := !in.HaveKey || usesHidden(d, in.Hidden)
	if keyless {
		defer hideDigests(&e)
	}
	e.OptedIn, e.OptIn = d.Acts || d.InPlace, optInOf(in, w, d.Policy, state.Problems)
	e.Sources = explainSources(in.Workload, d, state, in.Hidden)
	switch {
	case d.InPlace:
		e.Verdict, e.Why = VerdictInPlace, "its pod template asks for it ("+AnnotationRestart+"): each pod is restarted where it runs (or its app told to reload), no more of them at once than its rollout's maxUnavailable, when the data of a source that counts for it changes; the workload itself rolls for nothing (kubectl get events --field-selector involvedObject.kind=Pod tells each restart)"
		return e
	case in.ModeUnseen && !state.met():
		e.Verdict, e.Why = VerdictNoRollout, neverAdmitted(w.Namespace, e)
		return e
	case !e.OptedIn:
		e.Verdict, e.Why = VerdictNoRollout, "not opted in: "+e.OptIn
		return e
	case err != nil:
		e.Verdict, e.Why = VerdictNoRollout, err.Error()
		return e
	case keyless && in.Old == nil:
		e.Verdict, e.Why = keylessVerdict(in, state, d, status)
		return e
	case d.Form == FormLater:
		e.Verdict, e.Why = VerdictUpToDate, "a later release of confighash wrote its record, in a form this one does not read: it is left as it is until a source it uses changes, which rolls it once"
		return e
	case d.Record == nil && w.Kind.Recreated():
		e.Verdict, e.Why = VerdictNoRollout, "never hashed: a Job not hashed at its creation is never recreated"
		return e
	case d.Record == nil:
		e.Verdict, e.Why = VerdictRollout, "never hashed: the watcher adopts it if its pods hold the current data of "+ListRefs(d.Unproven)+", and rolls it once otherwise"
		return e
	}
	e.Hash, e.TemplateHash = d.Record.Hash(key), state.Hash
	switch {
	case len(d.Held) > 0:
		e.Verdict, e.Why = VerdictHeld, heldWhy(d, state, in, &e)
	case d.Converged:
		e.Verdict, e.Why = VerdictUpToDate, "the recorded digests are the current ones, and the pod template carries their hash"
		if e.TemplateHash == "" {
			e.Why = "adopted without a rollout: its pods have the current data"
		}
		if ignored := notCounted(e.Sources); ignored != "" {
			e.Why += "; changes to " + ignored + " roll nothing"
		}
		if declined := declinedSources(d.Record); declined != "" {
			e.Why += "; it returned to an earlier revision, which runs the snapshots it rolled out with: the current data of " + declined + " rolls nothing until it changes again"
		}
		if r := state.Reverted; !r.IsZero() {
			e.Why += fmt.Sprintf("; the watcher reverted it from %s, whose rollout failed", r.Change)
		}
		e.Why += bakingWhy(state, in.Now)
	case !state.met() && in.New:
		e.Verdict, e.Why = VerdictCreated, "the webhook writes this hash when the workload is created, so it starts with the current data"
	case len(d.Unproven) > 0 && w.Kind.Recreated():
		e.Verdict, e.Why = VerdictNoRollout, ListRefs(d.Unproven)+" started to count: a Job's pods read their data when they start, so it is not recreated for that"
	case len(d.Unproven) > 0:
		e.Verdict, e.Why = VerdictPending, ListRefs(d.Unproven)+" started to count: the watcher records them without a rollout if the running pods hold their current data, and rolls it once otherwise"
	case d.Restart != "" && state.Runs() != d.Restart:
		e.Verdict, e.Why = VerdictRollout, changedEntries(state.Record, d.Record)+": the watcher restarts its pods (spec.restartAt, "+ReloaderRolloutStrategy+` "restart"), its pod template unchanged`
	case d.Hash == e.TemplateHash:
		e.Verdict, e.Why = VerdictUpToDate, "the hash is current; only the record will be rewritten ("+changedEntries(state.Record, d.Record)+")"
	case w.Kind.Recreated():
		e.Verdict, e.Why = VerdictRollout, changedEntries(state.Record, d.Record)+": the watcher recreates the Job, unless it has finished ("+
			AnnotationRecreateFinished+` "true", or --recreate-finished-jobs, recreates it then too) or a CronJob made it`
	case in.Flapping != "":
		e.Verdict, e.Why = VerdictHeld, changedEntries(state.Record, d.Record)+"; the watcher said: "+in.Flapping
	case pausing(status, in.Now):
		e.Verdict, e.Why = VerdictHeld, fmt.Sprintf("%s; the watcher rolled it at %s and holds further changes for its pause period, until %s: its next touch then writes the new hash",
			changedEntries(state.Record, d.Record), stamp(status.At), stamp(status.Until))
	case holding(status, in.Now):
		e.Verdict, e.Why = VerdictHeld, changedEntries(state.Record, d.Record)+"; the watcher holds it: "+status.Why
	default:
		e.Verdict, e.Why = VerdictRollout, changedEntries(state.Record, d.Record)+": the next touch writes the new hash"
	}
	return e
}

// bakingWhy says where the workload stands in the bake of a change's first wave, ""
// when it is in none.
func bakingWhy(state State, now time.Time) string {
	b := state.Baking
	switch {
	case b.IsZero() || b.Hash != state.Hash:
		return ""
	case b.Bake == 0:
		return fmt.Sprintf("; it rolled in the first wave of %s, the canary", b.Change)
	case b.Since.IsZero():
		return fmt.Sprintf("; in the first wave of %s, the canary: once rolled out, it bakes for %s before the next wave rolls", b.Change, b.Bake)
	case now.Before(b.Until()):
		return fmt.Sprintf("; in the first wave of %s, the canary: baking until %s, before the next wave rolls; a container restart, a pod that loses its readiness or a metric gate that fails meanwhile fails the change",
			b.Change, stamp(b.Until()))
	}
	return fmt.Sprintf("; it baked in the first wave of %s, the canary, until %s", b.Change, stamp(b.Until()))
}

// wavePlace says which wave takes the workload, for the first changed source whose
// users were listed, and how the change rolls.
func wavePlace(d Decision, in ExplainInput) string {
	var me string
	if in.Workload != nil {
		me = in.Workload.Kind.Kind + "/" + in.Workload.Name
	}
	for _, ref := range d.Held {
		if in.WaveUsers == nil {
			break
		}
		users := in.WaveUsers(ref)
		place := slices.Index(users, me)
		if place < 0 {
			continue
		}
		p := d.Pacing
		if src, ok := in.Sources[ref]; ok {
			p = src.Paces(p)
		}
		return fmt.Sprintf(" (%s): of the %d users of %s, by kind and name, it is number %d, in wave %d; a failed workload of an earlier change goes first",
			p.String(), len(users), ref, place+1, p.WaveOf(place, len(users)))
	}
	if d.Pacing.Waves() {
		return " (" + d.Pacing.String() + ")"
	}
	return ""
}

// heldWhy says why a change due has not rolled, as the watcher decides it: the first
// hold of the table that holds it, in its words.
func heldWhy(d Decision, state State, in ExplainInput, e *Explanation) string {
	facts, reason := HoldFacts{Failed: state.Held.Change, Windows: d.Pacing.Windows}, HoldWave
	switch {
	case state.Held.Hash == d.Release:
		reason = HoldHalted
	case !d.Pacing.Windows.Open(in.Now):
		reason, facts.Opens = HoldWindow, d.Pacing.Windows.NextOpen(in.Now)
		e.NextOpening = &facts.Opens
	case len(state.Flapping) > 0:
		return ListRefs(d.Held) + " changed; " + flappingWhy(state, in.Flapping)
	}
	why := ListRefs(d.Held) + " changed; " + HoldOf(reason).Told(facts)
	if reason == HoldWave {
		why += wavePlace(d, in)
	}
	return why
}

// unknownKey stands for the hash key where it is not known: digests and hashes made
// with it are never shown.
var unknownKey, _ = NewKey(make([]byte, MinKeySize))

// hideDigests removes the hashes and digests made with unknownKey.
func hideDigests(e *Explanation) {
	e.Hash, e.TemplateHash = "", ""
	for i := range e.Sources {
		e.Sources[i].Recorded, e.Sources[i].Now = "", ""
	}
}

// listedSources are sources listed beforehand, as explain reads them.
type listedSources map[SourceRef]Source

func (l listedSources) Names(kind SourceKind) ([]string, error) {
	var names []string
	for ref, src := range l {
		if ref.Kind == kind && src.Present {
			names = append(names, ref.Name)
		}
	}
	return names, nil
}

func (l listedSources) Read(refs []SourceRef) (map[SourceRef]Source, error) { return l, nil }

// optInOf says which annotation opts the workload in, or why it is not; a boolean one
// whose value is not a boolean is ignored, and said so.
func optInOf(in ExplainInput, w *Workload, p Policy, problems []Problem) string {
	var by, ignored []string
	for _, name := range append(in.Vocabulary.OptInAnnotations(), AnnotationInject, ReloaderAuto, AnnotationRestart) {
		v, ok := w.Annotations[name]
		where := ""
		if !ok {
			v, ok = w.Template.Annotations[name]
			where = " (pod template)"
		}
		said := name + "=" + v + where
		switch {
		case !ok || slices.Contains(by, said) || slices.Contains(ignored, said):
		case booleanOptIn(name) && slices.ContainsFunc(problems, func(p Problem) bool { return p.Annotation == name }):
			ignored = append(ignored, said)
		default:
			by = append(by, said)
		}
	}
	var why string
	switch {
	case in.Mode == ModeOff:
		why = "its namespace is not one confighash acts in"
	case p.OptOut:
		why = "opted out by " + strings.Join(by, ", ")
	case len(by) > 0 && p.Enabled():
		why = strings.Join(by, ", ")
	case in.Mode == ModeEvery && p.Enabled():
		why = "its namespace opts every workload in"
	case len(by) > 0:
		why = strings.Join(by, ", ") + " opts in to no source kind"
	case len(ignored) == 0:
		why = "no opt-in annotation"
	}
	if len(ignored) > 0 {
		why = strings.TrimPrefix(why+"; ", "; ") + strings.Join(ignored, ", ") + " is not a boolean and is ignored: want " + booleanValues
	}
	return why
}

func explainSources(w *Workload, d Decision, state State, hidden SourceKinds) []SourceExplanation {
	uses := Uses(w.Template)
	recorded := map[SourceRef]RecordEntry{}
	for _, e := range state.Record {
		recorded[e.SourceRef] = e
	}
	out := make([]SourceExplanation, 0, len(d.Observations))
	for _, o := range d.Observations {
		s := SourceExplanation{Kind: string(o.Kind), Name: o.Name, Uses: uses[o.SourceRef]}
		if o.Named {
			s.Uses = append(s.Uses, "named by the workload's annotations")
		}
		switch {
		case d.Policy.excludes(o.SourceRef):
			s.Why = "excluded by the workload's annotations"
		case !d.Policy.Discover.Has(o.Kind) && !o.Named:
			s.Why = fmt.Sprintf("the workload's opt-in does not count %ss", strings.ToLower(string(o.Kind)))
		case hidden.Has(o.Kind):
			// It counts unless its own annotations, unread, say otherwise.
			s.Counts, s.Why = o.Counts, "could not be read"
		case !o.Present:
			s.Why = "does not exist"
		case !o.Counts:
			s.Why = "ignored by its own annotation, or unmatched in search mode"
		default:
			s.Counts = true
			if !o.AllKeys {
				s.Keys = o.Keys
			}
		}
		if e, ok := recorded[o.SourceRef]; ok {
			s.Recorded = e.text()
		}
		switch {
		case o.Present:
			s.Now = o.Digest.String()
		case !hidden.Has(o.Kind):
			s.Now = "absent"
		}
		if pin, ok := state.Pins.Get(o.SourceRef); ok {
			s.Snapshot = pin.Snapshot()
		}
		if pin, ok := d.Pins.Get(o.SourceRef); ok && pin.Snapshot() != s.Snapshot {
			s.RollsTo = pin.Snapshot()
		}
		out = append(out, s)
	}
	return out
}

// declinedSources names the sources whose current data a pinned workload returned from.
func declinedSources(r Record) string {
	var refs []SourceRef
	for _, e := range r {
		if e.Declining {
			refs = append(refs, e.SourceRef)
		}
	}
	return ListRefs(refs)
}

// notCounted names the sources that are used but do not count.
func notCounted(sources []SourceExplanation) string {
	var names []string
	for _, s := range sources {
		if !s.Counts && s.Why != "does not exist" {
			names = append(names, s.Kind+"/"+s.Name)
		}
	}
	return strings.Join(names, ", ")
}

// changedEntries names the sources whose entries differ between two records.
func changedEntries(before, after Record) string {
	var names []string
	for _, c := range Changes(before, after) {
		if c.Gone {
			names = append(names, c.String()+" no longer counts")
		} else {
			names = append(names, c.String()+" changed")
		}
	}
	if len(names) == 0 {
		return "nothing changed"
	}
	return strings.Join(names, ", ")
}
