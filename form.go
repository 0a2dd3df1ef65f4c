package confighash

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
)

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
	// FormLater is a form a later release writes, which this one does not read: such a
	// record is left alone, never healed or rewritten, until a source the workload
	// uses changes (ErrLaterForm).
	FormLater
)

// form returns the form the decision starts in: the record's, or the form written
// (writes) for a workload without a readable record, which has no digests to keep.
func (s State) form(writes Form) Form {
	if s.Record == nil || s.RecordErr != nil {
		return writes
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

// The watcher's leader Lease says which record forms its holder reads, so that the
// webhook writes a form only while the watcher that leads reads it (rule 12).
const (
	// LabelReads lists the versions of the forms the holder reads, joined by ".".
	LabelReads = Domain + "/reads"
	// LabelReader is a digest of the identity that wrote LabelReads: a holder of an
	// earlier release keeps the labels it finds when it takes the Lease over, and
	// must not pass for one that reads what they say.
	LabelReader = Domain + "/reader"
)

// ReaderLabels returns the labels a watcher of this release, leading as identity,
// keeps on its leader Lease.
func ReaderLabels(identity string) map[string]string {
	return map[string]string{LabelReads: recordVersions[FormShared] + "." + recordVersions[FormNamespaced], LabelReader: readerDigest(identity)}
}

func readerDigest(identity string) string {
	sum := sha256.Sum256([]byte(identity))
	return hex.EncodeToString(sum[:8])
}

// LeaderWrites returns the newest form a record may be written in while the watcher
// holding the Lease leads: FormShared while a watcher that does not say it reads
// FormNamespaced holds it, as those of releases before this one do (the last that read
// FormShared alone among them); FormNamespaced otherwise, when no watcher leads too:
// none runs then that could not read it.
func LeaderWrites(lease *coordinationv1.Lease, now time.Time) Form {
	if lease == nil {
		return FormNamespaced
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if holder == "" || lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil ||
		now.After(lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds)*time.Second)) {
		return FormNamespaced
	}
	if lease.Labels[LabelReader] != readerDigest(holder) ||
		!slices.Contains(strings.Split(lease.Labels[LabelReads], "."), recordVersions[FormNamespaced]) {
		return FormShared
	}
	return FormNamespaced
}
