package confighash

import (
	"slices"
	"testing"
)

func TestChangedDataNamesOnlyWhatChanged(t *testing.T) {
	a := SourceRef{Kind: ConfigMap, Name: "a"}
	b := SourceRef{Kind: Secret, Name: "b"}
	before := Record{{SourceRef: a, Digest: Digest{1}, Seen: true}, {SourceRef: b, Digest: Digest{2}, Seen: true}}
	after := Record{{SourceRef: a, Digest: Digest{3}, Seen: true}, {SourceRef: b, Digest: Digest{2}, Seen: true}}
	if got := ChangedData(before, after); got != "ConfigMap/a changed" {
		t.Fatalf("ChangedData() = %q", got)
	}
	if got := ChangedData(before, before); got != "the set of sources changed" {
		t.Fatalf("ChangedData() of equal records = %q", got)
	}
}

func TestChanges(t *testing.T) {
	a := SourceRef{Kind: ConfigMap, Name: "a"}
	b := SourceRef{Kind: ConfigMap, Name: "b"}
	c := SourceRef{Kind: Secret, Name: "c"}
	before := Record{{SourceRef: a, Digest: Digest{1}, Seen: true}, {SourceRef: b, Digest: Digest{2}, Seen: true}, {SourceRef: c, Digest: Digest{3}, Seen: true}}
	after := Record{{SourceRef: a, Digest: Digest{1}, Seen: true, Absent: true}, {SourceRef: c, Digest: Digest{4}, Seen: true}}
	want := []RecordChange{{SourceRef: a}, {SourceRef: b, Gone: true}, {SourceRef: c, Digest: true}}
	if got := Changes(before, after); !slices.Equal(got, want) {
		t.Fatalf("Changes() = %+v, want %+v: a deleted source's entry changes, not its data; b is gone; c's data changed", got, want)
	}
}
