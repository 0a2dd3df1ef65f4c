package confighash

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestUpdate(t *testing.T) {
	ref := SourceRef{Secret, "db"}
	d1, d2 := Digest{1}, Digest{2}
	present := func(d Digest, optional bool) Observation {
		return Observation{Reference: Reference{SourceRef: ref, AllKeys: true, Optional: optional}, Present: true, Digest: d}
	}
	absent := func(optional bool) Observation {
		return Observation{Reference: Reference{SourceRef: ref, AllKeys: true, Optional: optional}}
	}
	entry := func(e RecordEntry) Record { e.SourceRef = ref; return Record{e} }
	tests := []struct {
		name     string
		prev     Record
		obs      []Observation
		want     Record
		wantRoll bool
	}{
		{"a new workload records a present source", nil, []Observation{present(d1, false)}, entry(RecordEntry{Digest: d1, Seen: true}), true},
		{"a new workload records a missing source as absent", nil, []Observation{absent(false)}, entry(RecordEntry{Absent: true}), false},
		{"nothing changed: nothing rolls", entry(RecordEntry{Digest: d1, Seen: true}), []Observation{present(d1, false)}, entry(RecordEntry{Digest: d1, Seen: true}), false},
		{"used data changed: rolls", entry(RecordEntry{Digest: d1, Seen: true}), []Observation{present(d2, false)}, entry(RecordEntry{Digest: d2, Seen: true}), true},
		{
			"a required source never seen appears: a baseline, no rollout",
			entry(RecordEntry{Absent: true}), []Observation{present(d1, false)},
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true}), false,
		},
		{
			"a baseline's data changes: rolls",
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true}), []Observation{present(d2, false)},
			entry(RecordEntry{Digest: d2, Seen: true}), true,
		},
		{
			"a baseline unchanged stays a baseline",
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true}), []Observation{present(d1, false)},
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true}), false,
		},
		{
			"an optional source never seen appears: rolls, the pods ran without it",
			entry(RecordEntry{Absent: true}), []Observation{present(d1, true)},
			entry(RecordEntry{Digest: d1, Seen: true}), true,
		},
		{
			"a source is deleted: no rollout, last digest kept",
			entry(RecordEntry{Digest: d1, Seen: true}), []Observation{absent(false)},
			entry(RecordEntry{Digest: d1, Seen: true, Absent: true}), false,
		},
		{
			"an optional source is deleted: no rollout either",
			entry(RecordEntry{Digest: d1, Seen: true}), []Observation{absent(true)},
			entry(RecordEntry{Digest: d1, Seen: true, Absent: true}), false,
		},
		{
			"a deleted source stays deleted: nothing changes",
			entry(RecordEntry{Digest: d1, Seen: true, Absent: true}), []Observation{absent(false)},
			entry(RecordEntry{Digest: d1, Seen: true, Absent: true}), false,
		},
		{
			"recreated with the same data: no rollout",
			entry(RecordEntry{Digest: d1, Seen: true, Absent: true}), []Observation{present(d1, false)},
			entry(RecordEntry{Digest: d1, Seen: true}), false,
		},
		{
			"recreated with other data: rolls",
			entry(RecordEntry{Digest: d1, Seen: true, Absent: true}), []Observation{present(d2, false)},
			entry(RecordEntry{Digest: d2, Seen: true}), true,
		},
		{
			"a deleted baseline recreated with the same data: still a baseline, no rollout",
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true, Absent: true}), []Observation{present(d1, false)},
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true}), false,
		},
		{
			"a deleted baseline recreated with other data: rolls",
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true, Absent: true}), []Observation{present(d2, false)},
			entry(RecordEntry{Digest: d2, Seen: true}), true,
		},
		{
			"a source that no longer counts leaves the record: rolls if it was hashed",
			entry(RecordEntry{Digest: d1, Seen: true}), nil,
			Record{}, true,
		},
		{
			"a source never seen that no longer counts leaves without a rollout",
			entry(RecordEntry{Absent: true}), nil,
			Record{}, false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Update(tt.prev, tt.obs)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Update() = %s, want %s", got, tt.want)
			}
			if roll := got.Hash(testKey) != tt.prev.Hash(testKey); roll != tt.wantRoll {
				t.Fatalf("rollout = %v, want %v", roll, tt.wantRoll)
			}
			if again := Update(got, tt.obs); !slices.Equal(again, got) {
				t.Fatalf("a second admission with nothing changed gives %s, want %s", again, got)
			}
		})
	}
}

func TestUpdateKeepsOtherSourcesApart(t *testing.T) {
	a, b := SourceRef{ConfigMap, "a"}, SourceRef{Secret, "b"}
	prev := Record{{SourceRef: a, Digest: Digest{1}, Seen: true}, {SourceRef: b, Digest: Digest{2}, Seen: true}}
	got := Update(prev, []Observation{
		{Reference: Reference{SourceRef: a}, Present: true, Digest: Digest{3}},
		{Reference: Reference{SourceRef: b}, Present: true, Digest: Digest{2}},
	})
	want := Record{{SourceRef: a, Digest: Digest{3}, Seen: true}, {SourceRef: b, Digest: Digest{2}, Seen: true}}
	if !slices.Equal(got, want) {
		t.Fatalf("Update() = %s, want %s", got, want)
	}
}

func TestObserve(t *testing.T) {
	present := SourceRef{ConfigMap, "present"}
	missing := SourceRef{ConfigMap, "missing"}
	ignored := SourceRef{Secret, "ignored"}
	plain := SourceRef{Secret, "plain"}
	candidates := []Reference{{SourceRef: missing, AllKeys: true}, {SourceRef: present, AllKeys: true}, {SourceRef: ignored, AllKeys: true}, {SourceRef: plain, AllKeys: true}}
	sources := map[SourceRef]Source{
		present: {SourceRef: present, Present: true, Match: true},
		ignored: {SourceRef: ignored, Present: true, Ignore: true},
		plain:   {SourceRef: plain, Present: true},
	}
	names := func(obs []Observation) string {
		var out []string
		for _, o := range obs {
			out = append(out, o.String())
		}
		return strings.Join(out, " ")
	}
	if got, want := names(Observe(testKey, Policy{}, candidates, sources)), "ConfigMap/missing ConfigMap/present Secret/plain"; got != want {
		t.Errorf("Observe() = %s, want %s: ignored sources never count", got, want)
	}
	if got, want := names(Observe(testKey, Policy{Search: true}, candidates, sources)), "ConfigMap/missing ConfigMap/present"; got != want {
		t.Errorf("search mode Observe() = %s, want %s: absent sources stay until known", got, want)
	}
}

func TestRecordText(t *testing.T) {
	r := Record{
		{SourceRef: SourceRef{ConfigMap, "app"}, Digest: Digest{0x9f, 0x86, 0xd0, 0x81, 0x88, 0x4c, 0x7d, 0x65}, Seen: true},
		{SourceRef: SourceRef{Secret, "db"}, Digest: Digest{1}, Seen: true, Baseline: true, Absent: true},
		{SourceRef: SourceRef{Secret, "tls"}, Absent: true},
	}
	const want = "v1 configmap/app=9f86d081884c7d65 secret/db=0100000000000000,baseline,absent secret/tls=absent"
	if got := r.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	back, err := ParseRecord(want)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back, r) {
		t.Fatalf("ParseRecord() = %v, want %v", back, r)
	}
	empty, err := ParseRecord("v1")
	if err != nil || len(empty) != 0 {
		t.Fatalf("ParseRecord(v1) = %v, %v; want an empty record", empty, err)
	}
	unsorted, err := ParseRecord("v1 secret/b=absent configmap/a=absent")
	if err != nil || unsorted.String() != "v1 configmap/a=absent secret/b=absent" {
		t.Fatalf("ParseRecord() of unsorted entries = %v, %v; want them sorted", unsorted, err)
	}
}

func TestParseRecordRejects(t *testing.T) {
	for _, text := range []string{
		"",
		"v2 configmap/a=absent",
		"configmap/a=absent",
		"v1 configmap/a",
		"v1 configmap=absent",
		"v1 pod/a=absent",
		"v1 configmap/Bad_Name=absent",
		"v1 configmap/a=",
		"v1 configmap/a=0011",
		"v1 configmap/a=zz00000000000000",
		"v1 configmap/a=baseline,absent",
		"v1 configmap/a=absent,absent",
		"v1 configmap/a=0000000000000000,0000000000000001",
		"v1 configmap/a=0000000000000000,later",
		"v1 configmap/a=absent configmap/a=absent",
	} {
		if r, err := ParseRecord(text); !errors.Is(err, ErrBadRecord) {
			t.Errorf("ParseRecord(%q) = %v, %v; want ErrBadRecord", text, r, err)
		}
	}
}

// FuzzParseRecord: any text either fails with ErrBadRecord or parses into a record
// whose rendering parses back to the same record.
func FuzzParseRecord(f *testing.F) {
	f.Add("v1 configmap/app=9f86d081884c7d65 secret/db=0100000000000000,baseline,absent secret/tls=absent")
	f.Add("v1")
	f.Add("v1 configmap/a=ABCDEF0123456789")
	f.Fuzz(func(t *testing.T, text string) {
		r, err := ParseRecord(text)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error %v is not ErrBadRecord", err)
			}
			return
		}
		back, err := ParseRecord(r.String())
		if err != nil {
			t.Fatalf("rendering %q does not parse: %v", r.String(), err)
		}
		if !slices.Equal(back, r) {
			t.Fatalf("round trip %v != %v", back, r)
		}
	})
}

func TestSettled(t *testing.T) {
	tests := []struct {
		name                    string
		template, adopted, want string
		settled                 bool
	}{
		{"the template carries the hash", "v1:a", "", "v1:a", true},
		{"the template carries another hash", "v1:a", "", "v1:b", false},
		{"never hashed", "", "", "v1:a", false},
		{"adopted at this hash", "", "v1:a", "v1:a", true},
		{"adopted, then a source changed", "", "v1:a", "v1:b", false},
		{"a template hash wins over a stale adoption", "v1:b", "v1:a", "v1:b", true},
	}
	for _, tt := range tests {
		if got := Settled(tt.template, tt.adopted, tt.want); got != tt.settled {
			t.Errorf("%s: Settled(%q, %q, %q) = %v, want %v", tt.name, tt.template, tt.adopted, tt.want, got, tt.settled)
		}
	}
}
