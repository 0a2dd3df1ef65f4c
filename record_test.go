package confighash

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestNext(t *testing.T) {
	ref := SourceRef{Secret, "db"}
	d1, d2 := Digest{1}, Digest{2}
	observed := func(present, counts, optional bool, d Digest) []Observation {
		return []Observation{{Reference: Reference{SourceRef: ref, AllKeys: true, Optional: optional}, Present: present, Counts: counts, Digest: d}}
	}
	present := func(d Digest, optional bool) []Observation { return observed(true, true, optional, d) }
	absent := func(optional bool) []Observation { return observed(false, true, optional, Digest{}) }
	uncounted := func(d Digest) []Observation { return observed(true, false, false, d) }
	entry := func(e RecordEntry) Record { e.SourceRef = ref; return Record{e} }
	held := map[SourceRef]bool{ref: true}
	stale := map[SourceRef]bool{ref: false}
	tests := []struct {
		name     string
		step     step
		prev     Record
		obs      []Observation
		want     Record
		wantRoll bool
	}{
		{"a new workload records a present source", step{rolling: true}, nil, present(d1, false), entry(RecordEntry{Digest: d1, Seen: true}), true},
		{"a new workload records a missing source as absent", step{rolling: true}, nil, absent(false), entry(RecordEntry{Absent: true}), false},
		{"a new workload records a source that does not count as an uncounted baseline", step{rolling: true}, nil, uncounted(d1),
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true, Uncounted: true}), false},
		{"nothing changed: nothing rolls", step{}, entry(RecordEntry{Digest: d1, Seen: true}), present(d1, false), entry(RecordEntry{Digest: d1, Seen: true}), false},
		{"used data changed: rolls", step{}, entry(RecordEntry{Digest: d1, Seen: true}), present(d2, false), entry(RecordEntry{Digest: d2, Seen: true}), true},
		{
			"a required source never seen appears, held by the pods that waited for it: a baseline, no rollout", step{proven: held},
			entry(RecordEntry{Absent: true}), present(d1, false),
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true}), false,
		},
		{
			"a source never seen appears, nothing known of the pods: the entry waits", step{},
			entry(RecordEntry{Absent: true}), present(d1, false),
			entry(RecordEntry{Absent: true}), false,
		},
		{
			"a baseline's data changes: rolls", step{},
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true}), present(d2, false),
			entry(RecordEntry{Digest: d2, Seen: true}), true,
		},
		{
			"a baseline unchanged stays a baseline", step{},
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true}), present(d1, false),
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true}), false,
		},
		{
			"an optional source never seen appears: rolls, the pods ran without it", step{proven: stale},
			entry(RecordEntry{Absent: true}), present(d1, true),
			entry(RecordEntry{Digest: d1, Seen: true}), true,
		},
		{
			"an optional source never seen appears, created ones recorded: a baseline, no rollout", step{proven: stale, lifecycle: Lifecycle{RecordCreated: true}},
			entry(RecordEntry{Absent: true}), present(d1, true),
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true}), false,
		},
		{
			"a recreated source with other data, created ones recorded: still rolls, the pods held the old data", step{proven: stale, lifecycle: Lifecycle{RecordCreated: true}},
			entry(RecordEntry{Digest: d1, Seen: true, Absent: true}), present(d2, true),
			entry(RecordEntry{Digest: d2, Seen: true}), true,
		},
		{
			"a source is deleted: no rollout, last digest kept", step{},
			entry(RecordEntry{Digest: d1, Seen: true}), absent(false),
			entry(RecordEntry{Digest: d1, Seen: true, Absent: true}), false,
		},
		{
			"an optional source is deleted: no rollout either", step{},
			entry(RecordEntry{Digest: d1, Seen: true}), absent(true),
			entry(RecordEntry{Digest: d1, Seen: true, Absent: true}), false,
		},
		{
			"a source is deleted, deletions rolled: rolls once, recorded as never seen", step{lifecycle: Lifecycle{RollDeleted: true}},
			entry(RecordEntry{Digest: d1, Seen: true}), absent(false),
			entry(RecordEntry{Absent: true}), true,
		},
		{
			"a source deleted before deletions were rolled stays as it was: turning it on rolls nothing", step{lifecycle: Lifecycle{RollDeleted: true}},
			entry(RecordEntry{Digest: d1, Seen: true, Absent: true}), absent(false),
			entry(RecordEntry{Digest: d1, Seen: true, Absent: true}), false,
		},
		{
			"a deleted source comes back with the same data, deletions rolled: rolls again, the pods ran without it", step{proven: stale, lifecycle: Lifecycle{RollDeleted: true}},
			entry(RecordEntry{Absent: true}), present(d1, false),
			entry(RecordEntry{Digest: d1, Seen: true}), true,
		},
		{
			"a deleted source stays deleted: nothing changes", step{},
			entry(RecordEntry{Digest: d1, Seen: true, Absent: true}), absent(false),
			entry(RecordEntry{Digest: d1, Seen: true, Absent: true}), false,
		},
		{
			"a deleted source at a rollout is recorded as never seen: the new pods start without it",
			step{rolling: true}, entry(RecordEntry{Digest: d1, Seen: true, Absent: true}), absent(false),
			entry(RecordEntry{Absent: true}), true,
		},
		{
			"recreated with the same data: no rollout", step{},
			entry(RecordEntry{Digest: d1, Seen: true, Absent: true}), present(d1, false),
			entry(RecordEntry{Digest: d1, Seen: true}), false,
		},
		{
			"recreated with other data: rolls", step{},
			entry(RecordEntry{Digest: d1, Seen: true, Absent: true}), present(d2, false),
			entry(RecordEntry{Digest: d2, Seen: true}), true,
		},
		{
			"a deleted baseline recreated with the same data: still a baseline, no rollout", step{},
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true, Absent: true}), present(d1, false),
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true}), false,
		},
		{
			"a deleted baseline recreated with other data: rolls", step{},
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true, Absent: true}), present(d2, false),
			entry(RecordEntry{Digest: d2, Seen: true}), true,
		},
		{
			"a source that stops counting stays in the hash, uncounted: no rollout", step{},
			entry(RecordEntry{Digest: d1, Seen: true}), uncounted(d1),
			entry(RecordEntry{Digest: d1, Seen: true, Uncounted: true}), false,
		},
		{
			"a source no longer used stays in the hash, uncounted: no rollout", step{},
			entry(RecordEntry{Digest: d1, Seen: true}), nil,
			entry(RecordEntry{Digest: d1, Seen: true, Uncounted: true}), false,
		},
		{
			"an uncounted source's data is not followed", step{},
			entry(RecordEntry{Digest: d1, Seen: true, Uncounted: true}), uncounted(d2),
			entry(RecordEntry{Digest: d1, Seen: true, Uncounted: true}), false,
		},
		{
			"an uncounted source counts again with the same data: no rollout", step{},
			entry(RecordEntry{Digest: d1, Seen: true, Uncounted: true}), present(d1, false),
			entry(RecordEntry{Digest: d1, Seen: true}), false,
		},
		{
			"an uncounted source counts again with other data: rolls, the pods have the old", step{},
			entry(RecordEntry{Digest: d1, Seen: true, Uncounted: true}), present(d2, false),
			entry(RecordEntry{Digest: d2, Seen: true}), true,
		},
		{
			"at a rollout, an uncounted source is recorded afresh", step{rolling: true},
			entry(RecordEntry{Digest: d1, Seen: true, Uncounted: true}), uncounted(d2),
			entry(RecordEntry{Digest: d2, Seen: true, Baseline: true, Uncounted: true}), true,
		},
		{
			"at a rollout, a source no longer used is forgotten", step{rolling: true},
			entry(RecordEntry{Digest: d1, Seen: true, Uncounted: true}), nil,
			Record{}, true,
		},
		{
			"a source never seen that no longer counts leaves without a rollout", step{},
			entry(RecordEntry{Absent: true}), nil,
			Record{}, false,
		},
		{
			"a source starts to count and the pods hold its data: a baseline, no rollout", step{proven: held},
			Record{}, present(d1, false),
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true}), false,
		},
		{
			"a source starts to count and the pods may hold older data: rolls", step{proven: stale},
			Record{}, present(d1, false),
			entry(RecordEntry{Digest: d1, Seen: true}), true,
		},
		{
			"a source starts to count and nothing is known of the pods: left out", step{},
			Record{}, present(d1, false),
			Record{}, false,
		},
		{
			"a source that does not count, with pods that hold its data: an uncounted baseline", step{proven: held},
			Record{}, uncounted(d1),
			entry(RecordEntry{Digest: d1, Seen: true, Baseline: true, Uncounted: true}), false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := tt.step.next(tt.prev, tt.obs)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("next() = %s, want %s", got, tt.want)
			}
			if roll := got.Hash(testKey) != tt.prev.Hash(testKey); roll != tt.wantRoll {
				t.Fatalf("rollout = %v, want %v", roll, tt.wantRoll)
			}
			if again, _ := (step{}).next(got, tt.obs); !slices.Equal(again, got) {
				t.Fatalf("a second admission with nothing changed gives %s, want %s", again, got)
			}
		})
	}
}

func TestNextLeavesOutOnlyUnprovenSources(t *testing.T) {
	a, b := SourceRef{ConfigMap, "a"}, SourceRef{ConfigMap, "b"}
	obs := []Observation{
		{Reference: Reference{SourceRef: a}, Present: true, Counts: true, Digest: Digest{1}},
		{Reference: Reference{SourceRef: b}, Present: true, Counts: true, Digest: Digest{2}},
	}
	got, unproven := step{proven: map[SourceRef]bool{b: true}}.next(Record{}, obs)
	if want := (Record{{SourceRef: b, Digest: Digest{2}, Seen: true, Baseline: true}}); !slices.Equal(got, want) || !slices.Equal(unproven, []SourceRef{a}) {
		t.Fatalf("next() = %s, unproven %v; want %s and %v unproven", got, unproven, want, a)
	}
	if _, unproven := (step{rolling: true}).next(Record{}, obs); len(unproven) > 0 {
		t.Fatalf("rolling, %v left unproven: the new pods hold every source's data", unproven)
	}
}

func TestNextKeepsOtherSourcesApart(t *testing.T) {
	a, b := SourceRef{ConfigMap, "a"}, SourceRef{Secret, "b"}
	prev := Record{{SourceRef: a, Digest: Digest{1}, Seen: true}, {SourceRef: b, Digest: Digest{2}, Seen: true}}
	got, _ := step{}.next(prev, []Observation{
		{Reference: Reference{SourceRef: a}, Present: true, Counts: true, Digest: Digest{3}},
		{Reference: Reference{SourceRef: b}, Present: true, Counts: true, Digest: Digest{2}},
	})
	want := Record{{SourceRef: a, Digest: Digest{3}, Seen: true}, {SourceRef: b, Digest: Digest{2}, Seen: true}}
	if !slices.Equal(got, want) {
		t.Fatalf("next() = %s, want %s", got, want)
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
	counted := func(obs []Observation) string {
		var out []string
		for _, o := range obs {
			if o.Counts {
				out = append(out, o.String())
			}
		}
		return strings.Join(out, " ")
	}
	if got, want := counted(Policy{}.observe(digester{key: testKey}, candidates, candidates, sources)), "ConfigMap/missing ConfigMap/present Secret/plain"; got != want {
		t.Errorf("observe() counts %s, want %s: ignored sources never count", got, want)
	}
	if got, want := counted(Policy{Search: true}.observe(digester{key: testKey}, candidates, candidates, sources)), "ConfigMap/missing ConfigMap/present"; got != want {
		t.Errorf("search mode observe() counts %s, want %s: absent sources count until known", got, want)
	}
	if got := counted(Policy{}.observe(digester{key: testKey}, candidates, candidates[:1], sources)); got != "ConfigMap/missing" {
		t.Errorf("observe() counts %s, want only the candidate", got)
	}
}

func TestRecordText(t *testing.T) {
	r := Record{
		{SourceRef: SourceRef{ConfigMap, "app"}, Digest: Digest{0x9f, 0x86, 0xd0, 0x81, 0x88, 0x4c, 0x7d, 0x65}, Seen: true},
		{SourceRef: SourceRef{Secret, "db"}, Digest: Digest{1}, Seen: true, Baseline: true, Absent: true},
		{SourceRef: SourceRef{Secret, "tls"}, Absent: true},
	}
	r = append(r, RecordEntry{SourceRef: SourceRef{Secret, "was"}, Digest: Digest{2}, Seen: true, Uncounted: true})
	const want = "v1 configmap/app=9f86d081884c7d65 secret/db=0100000000000000,baseline,absent secret/tls=absent secret/was=0200000000000000,uncounted"
	if got := r.Text(FormShared); got != want {
		t.Fatalf("Text(FormShared) = %q, want %q", got, want)
	}
	if got := r.Text(FormNamespaced); got != "v2"+want[2:] || RecordForm(got) != FormNamespaced || RecordForm(want) != FormShared {
		t.Fatalf("Text(FormNamespaced) = %q, want %q in that form", got, "v2"+want[2:])
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
	if err != nil || unsorted.Text(FormShared) != "v1 configmap/a=absent secret/b=absent" {
		t.Fatalf("ParseRecord() of unsorted entries = %v, %v; want them sorted", unsorted, err)
	}
}

func TestParseRecordRejects(t *testing.T) {
	for _, text := range []string{
		"",
		"v3 configmap/a=absent",
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
		"v1 configmap/a=0000000000000000,uncounted,uncounted",
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
		form := RecordForm(text)
		back, err := ParseRecord(r.Text(form))
		if err != nil || RecordForm(r.Text(form)) != form {
			t.Fatalf("rendering %q does not parse in its form: %v", r.Text(form), err)
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
