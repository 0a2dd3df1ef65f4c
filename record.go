package confighash

import (
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
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
	// Baseline marks a required source that first appeared after the workload: its pods
	// could not start without it and started with this data, so the data enters the
	// hash only when it changes.
	Baseline bool
}

// hashed reports whether the entry's digest is part of the workload hash.
func (e RecordEntry) hashed() bool { return e.Seen && !e.Baseline }

// Record is the sources record, written on the workload in AnnotationSources. It is
// what makes the hash depend on history as well as on current data, so that the hash
// changes exactly when a rollout is due (DESIGN rule 2).
type Record []RecordEntry

// Hash returns the workload hash written in AnnotationHash: "v1:" and 64 hex digits.
func (r Record) Hash(key Key) string { return workloadHash(key, r) }

// Settled reports whether a workload needs no rollout for the hash want: its pod
// template carries want, or carries no hash and the workload was adopted at want
// (DESIGN rule 8: turning confighash on rolls nothing that is current).
func Settled(templateHash, adopted, want string) bool {
	return templateHash == want || templateHash == "" && adopted == want
}

// Observation is a candidate source as it is now.
type Observation struct {
	Reference
	Present bool
	// Digest is the source's digest for this workload, when Present.
	Digest Digest
}

// Observe returns the observations of the candidates: absent candidates are kept, since
// whether they count is known only once they exist; existing ones are kept if they
// count for the policy and carry their digest. Sources missing from the map are absent.
func Observe(key Key, p Policy, candidates []Reference, sources map[SourceRef]Source) []Observation {
	obs := make([]Observation, 0, len(candidates))
	for _, ref := range candidates {
		src, ok := sources[ref.SourceRef]
		switch {
		case !ok || !src.Present:
			obs = append(obs, Observation{Reference: ref})
		case p.counts(ref, src):
			obs = append(obs, Observation{Reference: ref, Present: true, Digest: SourceDigest(key, ref, src)})
		}
	}
	return obs
}

// Update returns the record after observing the counted sources, from the previous
// record (empty for a new workload). observations must be sorted by kind and name, as
// Observe returns them when given sorted candidates. The rules:
//   - a source new to the record enters with its current digest, or as absent;
//   - a required source never seen before that appears is a baseline: no rollout;
//   - an optional one that appears counts at once: its pods ran without it;
//   - a deletion changes nothing but the absent mark;
//   - a source that exists with a digest other than the last one seen counts with the
//     new digest, also when it was recreated with other data.
func Update(prev Record, observations []Observation) Record {
	next := make(Record, 0, len(observations))
	for _, o := range observations {
		i, existed := slices.BinarySearchFunc(prev, o.SourceRef, func(e RecordEntry, r SourceRef) int { return e.compare(r) })
		fresh := RecordEntry{SourceRef: o.SourceRef, Digest: o.Digest, Seen: true}
		var e RecordEntry
		switch {
		case !existed && o.Present:
			e = fresh
		case !existed:
			e = RecordEntry{SourceRef: o.SourceRef, Absent: true}
		case !o.Present:
			e = prev[i]
			e.Absent = true
		case !prev[i].Seen:
			e = fresh
			e.Baseline = !o.Optional
		case prev[i].Digest == o.Digest:
			e = prev[i]
			e.Absent = false
		default:
			e = fresh
		}
		next = append(next, e)
	}
	return next
}

// Sources returns the sources the record names.
func (r Record) Sources() []SourceRef {
	refs := make([]SourceRef, len(r))
	for i, e := range r {
		refs[i] = e.SourceRef
	}
	return refs
}

// Record text format, one space-separated entry per source after the version:
//
//	v1 configmap/app=9f86d081884c7d65 secret/db=60303ae22b998861,baseline secret/tls=absent
//
// An entry is kind/name= followed by comma-separated tokens: the last digest seen (16 hex
// digits), "absent" while the source does not exist, "baseline" for a baseline.
const recordVersion = "v1"

var recordKinds = map[SourceKind]string{ConfigMap: "configmap", Secret: "secret"}

// String renders the record in its text format.
func (r Record) String() string {
	var b strings.Builder
	b.WriteString(recordVersion)
	for _, e := range r {
		b.WriteByte(' ')
		b.WriteString(recordKinds[e.Kind])
		b.WriteByte('/')
		b.WriteString(e.Name)
		b.WriteByte('=')
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
		b.WriteString(strings.Join(tokens, ","))
	}
	return b.String()
}

// ErrBadRecord is returned by ParseRecord for text that is not a sources record.
var ErrBadRecord = errors.New("bad sources record")

// ParseRecord parses a record's text format.
func ParseRecord(s string) (Record, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 || fields[0] != recordVersion {
		return nil, fmt.Errorf("%w: want version %s first", ErrBadRecord, recordVersion)
	}
	r := make(Record, 0, len(fields)-1)
	for _, f := range fields[1:] {
		e, err := parseEntry(f)
		if err != nil {
			return nil, fmt.Errorf("%w: entry %q: %v", ErrBadRecord, f, err)
		}
		r = append(r, e)
	}
	slices.SortFunc(r, func(a, b RecordEntry) int { return a.compare(b.SourceRef) })
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
	return e, nil
}
