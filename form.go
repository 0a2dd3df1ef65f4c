package confighash

import "slices"

// Form is the form of a record's digests. A workload keeps its record's form until
// its next due rollout, which writes FormNamespaced: a switch of the encoding alone
// rolls nothing.
type Form int

// The forms; the zero Form is the one written now.
const (
	// FormNamespaced digests are bound to the namespace (NamespacedDigest).
	FormNamespaced Form = iota
	// FormShared digests cover kind, name and data alone (SourceDigest): equal data in
	// two namespaces has equal digests. Records were written in it before.
	FormShared
)

// form returns the form the decision starts in: the record's, or FormNamespaced for a
// workload without a readable record, which has no digests to keep.
func (s State) form() Form {
	if s.Record == nil || s.RecordErr != nil {
		return FormNamespaced
	}
	return s.Form
}

// digester computes the digests of one namespace's sources in a form.
type digester struct {
	key       Key
	namespace string
	form      Form
}

func (g digester) digest(ref Reference, src Source) Digest {
	if g.form == FormNamespaced {
		return NamespacedDigest(g.key, g.namespace, ref, src)
	}
	return SourceDigest(g.key, ref, src)
}

// pin returns how a pin of a source's current data is made: in FormNamespaced, named
// by the data its snapshot copies; in FormShared, by its digest, as pins recorded in
// that form are, so that a workload keeps its snapshots' names with its record.
func (g digester) pin(sources map[SourceRef]Source) func(Observation) Pin {
	return func(o Observation) Pin {
		pin := Pin{SourceRef: o.SourceRef, Digest: o.Digest}
		if g.form == FormNamespaced {
			pin.Data, pin.ByData = SnapshotDigest(g.key, g.namespace, o.Reference, sources[o.SourceRef]), true
		}
		return pin
	}
}

// namespaced returns a record about to roll out, and the observations, in
// FormNamespaced: a due rollout writes the new form, so that switching rolls nothing
// by itself. Each digest of a rolled record is of its source's current data, digested
// again in the new form, but for data a pinned workload returned from (Declining),
// which is no longer at hand: such a record stays in its form until a later rollout.
func (in Input) namespaced(rolled Record, observations []Observation, form Form, sources map[SourceRef]Source) (Record, []Observation, Form) {
	if form == FormNamespaced {
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
