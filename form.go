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
