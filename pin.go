package confighash

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Pinned mode: each version of a counted source that a pinned workload rolls out with
// is kept as an immutable snapshot, a ConfigMap or Secret of the same kind and type in
// the same namespace, and the pod template names the snapshots instead of the sources.
// A revision then carries its data with it, and a return to an earlier revision runs
// the data it rolled out with.

// Pin is the snapshot a pod template names for one source: the source's data with
// this digest, as recorded.
type Pin struct {
	SourceRef
	Digest Digest
	// ByData is set when the snapshot is named by Data, the digest of the data it
	// copies (SnapshotDigest), as in FormNamespaced: the same data is then one snapshot
	// however it is referenced. Pins made in FormShared are named by Digest.
	Data   Digest
	ByData bool
}

// Snapshot is the name of the pinned snapshot.
func (p Pin) Snapshot() string {
	if p.ByData {
		return SnapshotName(p.Name, p.Data)
	}
	return SnapshotName(p.Name, p.Digest)
}

// Snapshot is a snapshot a pinned admission makes first: the pin that names it, and
// the observation of the source's current data it copies.
type Snapshot struct {
	Pin    Pin
	Source Observation
}

// snapshotNameMax is the longest name of a ConfigMap or Secret.
const snapshotNameMax = validation.DNS1123SubdomainMaxLength

// SnapshotName is the name of the snapshot of a source's data with this digest: the
// source's name, cut to leave room if need be, a dash and the digest. The digest is
// keyed and bound to the namespace, so the name says nothing of the data and cannot be
// predicted without the key.
func SnapshotName(source string, d Digest) string {
	suffix := "-" + d.String()
	if room := snapshotNameMax - len(suffix); len(source) > room {
		source = strings.TrimRight(source[:room], ".-")
	}
	return source + suffix
}

// SnapshotOf is the value of LabelSnapshotOf on the snapshots of a source: its name,
// or, for a name longer than a label value may be, its start and 16 hex digits of its
// SHA-256, so that each source's snapshots are still found by their own value.
func SnapshotOf(source string) string {
	if len(source) <= validation.LabelValueMaxLength {
		return source
	}
	sum := sha256.Sum256([]byte(source))
	suffix := "-" + hex.EncodeToString(sum[:8])
	return strings.TrimRight(source[:validation.LabelValueMaxLength-len(suffix)], ".-") + suffix
}

// Pins are the snapshots a pinned pod template names, sorted by source; written in
// AnnotationPinned, so that each revision says which sources its names stand for.
type Pins []Pin

// String renders the pins: "configmap/app=0123456789abcdef secret/db=...", each
// followed by ",data-" and its Data when it is named by it.
func (p Pins) String() string {
	fields := make([]string, len(p))
	for i, pin := range p {
		fields[i] = recordKinds[pin.Kind] + "/" + pin.Name + "=" + pin.Digest.String()
		if pin.ByData {
			fields[i] += "," + dataPrefix + pin.Data.String()
		}
	}
	return strings.Join(fields, " ")
}

// dataPrefix marks Pin.Data in the text of pins.
const dataPrefix = "data-"

// ErrBadPins is returned by ParsePins for text that is not a list of pins.
var ErrBadPins = errors.New("bad pins")

// ParsePins parses the text of AnnotationPinned.
func ParsePins(text string) (Pins, error) {
	var pins Pins
	for _, f := range strings.Fields(text) {
		entry, data, byData := strings.Cut(f, ","+dataPrefix)
		e, err := parseEntry(entry)
		pin := Pin{SourceRef: e.SourceRef, Digest: e.Digest, ByData: byData}
		if byData && err == nil {
			if n, decodeErr := hex.Decode(pin.Data[:], []byte(data)); decodeErr != nil || n != len(pin.Data) || len(data) != 2*n {
				err = errors.New("bad data digest")
			}
		}
		if err != nil || !e.Seen || e.Absent || e.Baseline || e.Uncounted || e.Declining || e.Kind == SecretProviderClass {
			return nil, fmt.Errorf("%w: %q: want configmap/name=digest or secret/name=digest, then ,data-digest or not", ErrBadPins, f)
		}
		pins = append(pins, pin)
	}
	slices.SortFunc(pins, func(a, b Pin) int { return a.Compare(b.SourceRef) })
	for i := 1; i < len(pins); i++ {
		if pins[i].SourceRef == pins[i-1].SourceRef {
			return nil, fmt.Errorf("%w: %s pinned twice", ErrBadPins, pins[i].SourceRef)
		}
	}
	return pins, nil
}

// Get returns the pin of the source.
func (p Pins) Get(ref SourceRef) (Pin, bool) {
	i, ok := slices.BinarySearchFunc(p, ref, func(pin Pin, r SourceRef) int { return pin.Compare(r) })
	if !ok {
		return Pin{}, false
	}
	return p[i], true
}

// Names reports whether the pins name the snapshot of the kind.
func (p Pins) Names(kind SourceKind, snapshot string) bool {
	_, ok := p.source(kind, snapshot)
	return ok
}

// source returns the source a snapshot name stands for.
func (p Pins) source(kind SourceKind, name string) (SourceRef, bool) {
	for _, pin := range p {
		if pin.Kind == kind && pin.Snapshot() == name {
			return pin.SourceRef, true
		}
	}
	return SourceRef{}, false
}

// TemplatePins returns the pins a pod template carries; none when it carries none or
// they cannot be read, and then its names are taken as they are.
func TemplatePins(tmpl *corev1.PodTemplateSpec) Pins {
	text, ok := tmpl.Annotations[AnnotationPinned]
	if !ok {
		return nil
	}
	pins, err := ParsePins(text)
	if err != nil {
		return nil
	}
	return pins
}

// Rename is one name of a pod spec to change: the JSON pointer of the name within
// the pod spec, and the name it gets.
type Rename struct {
	Path, Name string
}

// Repin returns the renames that make the pod template name each source of want by
// its snapshot, and by its own name each source it names by a snapshot of its pins
// that want does not pin.
func Repin(tmpl *corev1.PodTemplateSpec, want Pins) []Rename {
	have := TemplatePins(tmpl)
	var out []Rename
	eachUse(&tmpl.Spec, func(u use) {
		if u.kind == SecretProviderClass {
			return
		}
		ref := SourceRef{u.kind, *u.name}
		if src, ok := have.source(u.kind, *u.name); ok {
			ref = src
		}
		name := ref.Name
		if pin, ok := want.Get(ref); ok {
			name = pin.Snapshot()
		}
		if name != *u.name {
			out = append(out, Rename{u.at.String(), name})
		}
	})
	return out
}

// returnedTo returns the record as a pinned pod template says its pods run: a source
// it pins to data other than the record's was returned to, by a rollback, and the
// record's data is declined (RecordEntry.Declining).
func (r Record) returnedTo(pins Pins) Record {
	out, cloned := r, false
	for _, pin := range pins {
		i, found := slices.BinarySearchFunc(out, pin.SourceRef, func(e RecordEntry, ref SourceRef) int { return e.Compare(ref) })
		if found && out[i].Seen && out[i].Digest == pin.Digest {
			continue
		}
		if !cloned {
			out, cloned = slices.Clone(out), true
		}
		e := RecordEntry{SourceRef: pin.SourceRef, Digest: pin.Digest, Seen: true}
		if !found {
			out = slices.Insert(out, i, e)
			continue
		}
		if out[i].Seen {
			e.Declining, e.Declined = true, out[i].Digest
		}
		out[i] = e
	}
	return out
}

// withoutDeclines returns the record without declined data: a workload that is not
// pinned runs its sources' current data.
func (r Record) withoutDeclines() Record {
	if !slices.ContainsFunc(r, func(e RecordEntry) bool { return e.Declining }) {
		return r
	}
	out := slices.Clone(r)
	for i := range out {
		out[i].Declining, out[i].Declined = false, Digest{}
	}
	return out
}

// pinsOf returns the pins of a pinned workload with this record: each source that
// counts, at its recorded data, by the snapshot the template names already, or else by
// a new snapshot of its current data (made by newPin), returned as well. A source whose
// recorded data is neither is named by its own name. With remake, the snapshots of the
// pins kept are returned too, where the source still holds their data.
func pinsOf(record Record, have Pins, observations []Observation, remake bool, newPin func(Observation) Pin) (Pins, []Snapshot) {
	var pins Pins
	var snapshots []Snapshot
	for _, e := range record {
		if e.Uncounted || !e.Seen || e.Kind == SecretProviderClass {
			continue
		}
		i, observed := slices.BinarySearchFunc(observations, e.SourceRef, func(o Observation, ref SourceRef) int { return o.Compare(ref) })
		current := observed && observations[i].Present && observations[i].Digest == e.Digest
		if old, ok := have.Get(e.SourceRef); ok && old.Digest == e.Digest {
			pins = append(pins, old)
			if remake && current {
				snapshots = append(snapshots, Snapshot{old, observations[i]})
			}
			continue
		}
		if current {
			pin := newPin(observations[i])
			pins = append(pins, pin)
			snapshots = append(snapshots, Snapshot{pin, observations[i]})
		}
	}
	return pins, snapshots
}

// Copies reports whether src, the source read again to be copied, still holds the
// data that names the snapshot.
func (s Snapshot) Copies(key Key, namespace string, src Source) bool {
	if s.Pin.ByData {
		return SnapshotDigest(key, namespace, s.Source.Reference, src) == s.Pin.Data
	}
	return SourceDigest(key, s.Source.Reference, src) == s.Pin.Digest
}

// IsSnapshot reports whether obj, a ConfigMap or Secret found under the name of a
// snapshot of source, is that snapshot: immutable, labelled as the source's snapshot,
// and named by the data it holds (data, its digest-only view), in either form. Only
// the holder of the key names data so, so an object that anyone else made, restored
// from a snapshot's YAML and changed, or left mutable is not one: the webhook does not
// pin to it, and the watcher does not delete it.
func IsSnapshot(key Key, source SourceRef, obj metav1.Object, immutable bool, data Source) bool {
	if !immutable || obj.GetLabels()[LabelSnapshotOf] != SnapshotOf(source.Name) {
		return false
	}
	held := Reference{SourceRef: source, AllKeys: true}
	name := obj.GetName()
	// A FormShared snapshot is named by the digest of the keys its workload used, which
	// are those it holds unless a used key was absent: such a one is not recognised.
	return name == SnapshotName(source.Name, SnapshotDigest(key, obj.GetNamespace(), held, data)) ||
		name == SnapshotName(source.Name, SourceDigest(key, held, data))
}
