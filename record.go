package confighash

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// RecordEntry is what the sources record keeps of one source.
type RecordEntry struct {
	SourceRef
	// Digest is the last digest seen while the source existed; meaningful when Seen.
	Digest Digest
	// Seen is set once the source has been seen to exist.
	Seen bool
	// Absent is set while the source does not exist.
	Absent bool
	// Baseline marks a source whose data the running pods already hold, so that it
	// enters the hash only when it changes: a required source that first appeared after
	// the workload (its pods could not start without it), or one that started to count
	// while the pods held its current data.
	Baseline bool
	// Uncounted marks a source that does not count now (ignored, unmatched, excluded,
	// no longer used): its digest is no longer followed and stays in the hash, so that
	// a change of what counts rolls nothing. Should it count again with the same data,
	// nothing rolls either.
	Uncounted bool
	// Declining marks a source whose data Declined a pinned workload returned from,
	// to an earlier revision (Digest, its snapshot): the source holding that data is
	// no change to roll to; its next change is.
	Declining bool
	Declined  Digest
}

// hashed reports whether the entry's digest is part of the workload hash.
func (e RecordEntry) hashed() bool { return e.Seen && !e.Baseline }

// Record is the sources record, written on the workload in AnnotationSources. It is
// what makes the hash depend on history as well as on current data, so that the hash
// changes exactly when a rollout is due (rule 2).
type Record []RecordEntry

// Hash returns the workload hash written in AnnotationHash: "v1:" and 64 hex digits.
func (r Record) Hash(key Key) string { return workloadHash(key, r) }

// Settled reports whether a workload needs no rollout for the hash want: its pod
// template carries want, or carries no hash and the workload was adopted at want
// (rule 8: turning confighash on rolls nothing that is current).
func Settled(templateHash, adopted, want string) bool {
	return templateHash == want || templateHash == "" && adopted == want
}

// Observation is a source the workload uses or names, as it is now.
type Observation struct {
	Reference
	Present bool
	// Counts is set when the source counts for the workload: a candidate that does not
	// exist (whether it counts is known once it does), or one that exists and is
	// neither ignored nor, in search mode, unmatched.
	Counts bool
	// Digest is the source's digest for this workload, when Present.
	Digest Digest
}

// Lifecycle is what the creation and the deletion of a source roll, where they differ
// from confighash's rules (rule 2) as Reloader's users may ask: the zero Lifecycle is
// confighash's. The webhook and the watcher must be given the same.
type Lifecycle struct {
	// RecordCreated records a source created after the workload's pods started,
	// which they ran without (an optional or a named one, recorded absent until
	// then), as a baseline: it rolls nothing until its data changes. Reloader's
	// --reload-on-create=false; confighash rolls such a workload once.
	RecordCreated bool
	// RollDeleted rolls the workloads of a source deleted, once, as the pods would
	// start without it; its return rolls them again. Reloader's
	// --reload-on-delete; confighash keeps the last digest and rolls nothing.
	RollDeleted bool
}

// step says how the record is rewritten at this admission.
type step struct {
	// rolling: the pods are about to be replaced (a new workload, a changed pod
	// template, or a rollout due), so they will hold the current data of every source.
	rolling bool
	// proven tells, for a source new to the record, whether the running pods hold its
	// current data; a source it does not name is unproven.
	proven map[SourceRef]bool
	// lifecycle says what a source's creation and deletion roll.
	lifecycle Lifecycle
}

// next returns the record after observing the sources, from the previous record
// (empty for a new workload), and the sources whose entry waits until the running
// pods are known to hold their data. Both inputs are sorted by kind and name. The
// rules, for a source that:
//   - counts and does not exist: enters as absent; one recorded keeps its last digest,
//     marked absent, so deleting it rolls nothing; when rolling, or when lifecycle
//     rolls a deletion and it was present, it is recorded as never seen, since the
//     new pods start without it or wait for it;
//   - counts and exists with its recorded digest: unchanged, counted again if it was not;
//   - counts and exists with another recorded digest, also recreated or changed while
//     it did not count: enters with the new digest, hashed;
//   - counts, exists, and the record holds no digest the pods were rolled with (new to
//     it, never seen, or an uncounted baseline whose data changed): enters with its
//     digest when rolling; otherwise as a baseline if the running pods hold its data
//     (a required source that appears after its pods: they waited for it), hashed if
//     they may not (an optional one: they ran without it; a baseline instead where
//     lifecycle records creations and it was recorded absent), and as it was while that is
//     unknown (rules 2 and 8);
//   - does not count (ignored, unmatched, excluded, no longer used): when rolling, one
//     that exists is recorded afresh as an uncounted baseline, the others are
//     forgotten; otherwise a source seen before keeps its entry, uncounted, and one
//     that exists is recorded as an uncounted baseline if the pods hold its data.
func (s step) next(prev Record, observations []Observation) (Record, []SourceRef) {
	next := make(Record, 0, max(len(prev), len(observations)))
	var unproven []SourceRef
	for i, j := 0, 0; i < len(prev) || j < len(observations); {
		var p *RecordEntry
		var o *Observation
		order := 0
		switch {
		case i == len(prev):
			order = 1
		case j == len(observations):
			order = -1
		default:
			order = prev[i].Compare(observations[j].SourceRef)
		}
		if order <= 0 {
			p, i = &prev[i], i+1
		}
		if order >= 0 {
			o, j = &observations[j], j+1
		}
		var ref SourceRef
		if p != nil {
			ref = p.SourceRef
		} else {
			ref = o.SourceRef
		}
		proven, known := s.proven[ref]
		var e RecordEntry
		switch {
		case o == nil || !o.Counts:
			switch {
			case o != nil && o.Present && (s.rolling || p == nil && proven):
				e = RecordEntry{SourceRef: ref, Digest: o.Digest, Seen: true, Baseline: true, Uncounted: true}
			case s.rolling || p == nil || !p.Seen:
				continue
			default:
				e = *p
				e.Uncounted = true
				if o != nil {
					e.Absent = !o.Present
				}
			}
		case !o.Present && (p == nil || s.rolling || s.lifecycle.RollDeleted && !p.Absent):
			e = RecordEntry{SourceRef: ref, Absent: true}
		case !o.Present:
			e = *p
			e.Absent = true
		case p != nil && p.Declining && p.Declined == o.Digest:
			// The data a pinned workload returned from: its pods keep their snapshot.
			e = *p
			e.Absent, e.Uncounted = false, false
		case p != nil && p.Seen && p.Digest == o.Digest:
			e = *p
			e.Absent, e.Uncounted, e.Declining, e.Declined = false, false, false, Digest{}
		case s.rolling || known && !proven && !(s.lifecycle.RecordCreated && p != nil && !p.Seen) || p != nil && p.Seen && !(p.Uncounted && p.Baseline):
			e = RecordEntry{SourceRef: ref, Digest: o.Digest, Seen: true}
		case known:
			e = RecordEntry{SourceRef: ref, Digest: o.Digest, Seen: true, Baseline: true}
		case p != nil:
			unproven = append(unproven, ref)
			e = *p
		default:
			unproven = append(unproven, ref)
			continue
		}
		next = append(next, e)
	}
	return next, unproven
}

// Sources returns the sources the record names.
func (r Record) Sources() []SourceRef {
	refs := make([]SourceRef, len(r))
	for i, e := range r {
		refs[i] = e.SourceRef
	}
	return refs
}

// Record text format, one space-separated entry per source after the version, which
// says the form of the digests ("v1" shared, "v2" namespaced):
//
//	v2 configmap/app=9f86d081884c7d65 secret/db=60303ae22b998861,baseline secret/tls=absent
//
// An entry is kind/name= followed by comma-separated tokens: the last digest seen (16 hex
// digits), "absent" while the source does not exist, "baseline" for a baseline,
// "uncounted" for a source that does not count now, "declined-" and a digest for data
// a pinned workload returned from.
var recordVersions = map[Form]string{FormShared: "v1", FormNamespaced: "v2"}

// declinedPrefix marks RecordEntry.Declined in the text format.
const declinedPrefix = "declined-"

var recordKinds = map[SourceKind]string{ConfigMap: "configmap", Secret: "secret", SecretProviderClass: "secretproviderclass"}

// Text renders the record in its text format, its digests being in the form f.
func (r Record) Text(f Form) string {
	var b strings.Builder
	b.WriteString(recordVersions[f])
	for _, e := range r {
		b.WriteByte(' ')
		b.WriteString(recordKinds[e.Kind])
		b.WriteByte('/')
		b.WriteString(e.Name)
		b.WriteByte('=')
		b.WriteString(e.text())
	}
	return b.String()
}

// text renders the entry's tokens.
func (e RecordEntry) text() string {
	var tokens []string
	if e.Seen {
		tokens = append(tokens, e.Digest.String())
	}
	if e.Baseline {
		tokens = append(tokens, "baseline")
	}
	if e.Absent {
		tokens = append(tokens, "absent")
	}
	if e.Uncounted {
		tokens = append(tokens, "uncounted")
	}
	if e.Declining {
		tokens = append(tokens, declinedPrefix+e.Declined.String())
	}
	return strings.Join(tokens, ",")
}

// RecordForm returns the form of the digests of a record's text: FormShared unless its
// version says otherwise, as records written before the version named a form.
func RecordForm(text string) Form {
	fields := strings.Fields(text)
	switch {
	case len(fields) == 0:
	case fields[0] == recordVersions[FormNamespaced]:
		return FormNamespaced
	case laterVersion(fields[0]):
		return FormLater
	}
	return FormShared
}

// laterVersion reports whether a record's version is of a form a later release writes.
func laterVersion(v string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(v, "v"))
	return strings.HasPrefix(v, "v") && err == nil && n > 2 && v == "v"+strconv.Itoa(n)
}

// ErrBadRecord is returned by ParseRecord for text that is not a sources record.
var ErrBadRecord = errors.New("bad sources record")

// ErrLaterForm is returned by ParseRecord for a record in a form a later release
// writes (FormLater). It is an ErrBadRecord too: this release cannot read it.
var ErrLaterForm = fmt.Errorf("%w: in a form of a later release", ErrBadRecord)

var errNoVersion = fmt.Errorf("%w: want version %s or %s first", ErrBadRecord, recordVersions[FormShared], recordVersions[FormNamespaced])

// maxRecordEntries bounds a record: the sources a workload may use or name, and as many
// again that stopped counting since its last rollout. Anyone who may edit the workload
// may write the annotation, and the watcher keeps a parsed record per workload.
const maxRecordEntries = 2 * MaxSources

// ParseRecord parses a record's text format.
func ParseRecord(s string) (Record, error) {
	r := Record{} // an empty record is still one: the workload was met
	versioned := false
	for f := range strings.FieldsSeq(s) {
		switch {
		case !versioned && laterVersion(f):
			return nil, fmt.Errorf("%w (%s): it is left alone until a source the workload uses changes", ErrLaterForm, f)
		case !versioned && f != recordVersions[FormShared] && f != recordVersions[FormNamespaced]:
			return nil, errNoVersion
		case !versioned:
			versioned = true
			continue
		case len(r) == maxRecordEntries:
			return nil, fmt.Errorf("%w: more than %d entries", ErrBadRecord, maxRecordEntries)
		}
		e, err := parseEntry(f)
		if err != nil {
			return nil, fmt.Errorf("%w: entry %q: %v", ErrBadRecord, f, err)
		}
		r = append(r, e)
	}
	if !versioned {
		return nil, errNoVersion
	}
	slices.SortFunc(r, func(a, b RecordEntry) int { return a.Compare(b.SourceRef) })
	for i := 1; i < len(r); i++ {
		if r[i].SourceRef == r[i-1].SourceRef {
			return nil, fmt.Errorf("%w: %s appears twice", ErrBadRecord, r[i].SourceRef)
		}
	}
	return r, nil
}

func parseEntry(f string) (RecordEntry, error) {
	ref, value, ok := strings.Cut(f, "=")
	if !ok {
		return RecordEntry{}, errors.New("want kind/name=value")
	}
	kindText, name, ok := strings.Cut(ref, "/")
	if !ok {
		return RecordEntry{}, errors.New("want kind/name")
	}
	e := RecordEntry{}
	for kind, text := range recordKinds {
		if text == kindText {
			e.Kind = kind
		}
	}
	if e.Kind == "" {
		return RecordEntry{}, fmt.Errorf("unknown kind %q", kindText)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return RecordEntry{}, fmt.Errorf("bad name: %s", errs[0])
	}
	e.Name = name
	for _, tok := range strings.Split(value, ",") {
		switch {
		case tok == "absent" && !e.Absent:
			e.Absent = true
		case tok == "baseline" && !e.Baseline:
			e.Baseline = true
		case tok == "uncounted" && !e.Uncounted:
			e.Uncounted = true
		case strings.HasPrefix(tok, declinedPrefix) && !e.Declining:
			if _, err := hex.Decode(e.Declined[:], []byte(tok[len(declinedPrefix):])); err != nil || len(tok) != len(declinedPrefix)+2*len(e.Declined) {
				return RecordEntry{}, fmt.Errorf("bad declined digest %q", tok)
			}
			e.Declining = true
		case len(tok) == 2*len(e.Digest) && !e.Seen:
			if _, err := hex.Decode(e.Digest[:], []byte(tok)); err != nil {
				return RecordEntry{}, fmt.Errorf("bad digest %q", tok)
			}
			e.Seen = true
		default:
			return RecordEntry{}, fmt.Errorf("unexpected %q", tok)
		}
	}
	if !e.Seen && !e.Absent {
		return RecordEntry{}, errors.New("a source never seen must be absent")
	}
	if e.Baseline && !e.Seen {
		return RecordEntry{}, errors.New("a baseline needs a digest")
	}
	if e.Declining && (!e.Seen || e.Declined == e.Digest) {
		return RecordEntry{}, errors.New("declined data needs a digest other than it")
	}
	return e, nil
}

// MaxSources is how many sources one workload may use or name. A workload with more is
// left as it is, with a warning, rather than hashed from a partial list: each source
// costs a read at every admission (rule 9).
const MaxSources = 256

// hashPrefix versions the workload hash written on pod templates.
const hashPrefix = "v1:"

// validHash reports whether s is a workload hash, as Record.Hash writes it.
func validHash(s string) bool {
	digits, ok := strings.CutPrefix(s, hashPrefix)
	_, err := hex.DecodeString(digits)
	return ok && len(digits) == 2*sha256.Size && err == nil
}

// workloadHash is the keyed hash over the sorted (kind, name, digest) list of the
// entries that count.
func workloadHash(key Key, entries []RecordEntry) string {
	var hashed []RecordEntry
	for _, e := range entries {
		if e.hashed() {
			hashed = append(hashed, e)
		}
	}
	msg := make([]byte, 0, 64*(len(hashed)+1))
	msg = append(msg, workloadPrefix...)
	msg = binary.AppendUvarint(msg, uint64(len(hashed)))
	for _, e := range hashed {
		msg = appendString(msg, string(e.Kind))
		msg = appendString(msg, e.Name)
		msg = append(msg, e.Digest[:]...)
	}
	var sum [sha256.Size]byte
	key.sum(msg, &sum)
	return hashPrefix + hex.EncodeToString(sum[:])
}

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
