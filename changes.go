package confighash

import (
	"slices"
	"strings"
)

// RecordChange is how a source's entry differs between two records.
type RecordChange struct {
	SourceRef
	// Digest is set when its digest or baseline differs, or the entry is new: the
	// data the pods get changed.
	Digest bool
	// Gone is set when the later record no longer has the entry.
	Gone bool
}

// Changes returns, sorted by source, the entries of two records that differ.
func Changes(before, after Record) []RecordChange {
	old := make(map[SourceRef]RecordEntry, len(before))
	for _, e := range before {
		old[e.SourceRef] = e
	}
	var out []RecordChange
	for _, e := range after {
		o, ok := old[e.SourceRef]
		delete(old, e.SourceRef)
		switch {
		case !ok || o.Digest != e.Digest || o.Baseline != e.Baseline:
			out = append(out, RecordChange{SourceRef: e.SourceRef, Digest: true})
		case o != e:
			out = append(out, RecordChange{SourceRef: e.SourceRef})
		}
	}
	for ref := range old {
		out = append(out, RecordChange{SourceRef: ref, Gone: true})
	}
	slices.SortFunc(out, func(a, b RecordChange) int { return a.Compare(b.SourceRef) })
	return out
}

// ChangedData names the sources whose data changed between two records, for the
// message of a rollout.
func ChangedData(before, after Record) string {
	var names []string
	for _, c := range Changes(before, after) {
		if c.Digest {
			names = append(names, c.SourceRef.String())
		}
	}
	if len(names) == 0 {
		return "the set of sources changed"
	}
	return strings.Join(names, ", ") + " changed"
}
