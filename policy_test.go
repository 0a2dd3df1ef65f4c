package confighash

import (
	"reflect"
	"strings"
	"testing"
)

func TestParsePolicy(t *testing.T) {
	tests := []struct {
		name     string
		metadata map[string]string
		template map[string]string
		want     Policy
		problems []string // substrings, one per expected problem
	}{
		{
			"no annotations: not enabled",
			nil, nil,
			Policy{Exclude: map[SourceRef]bool{}}, nil,
		},
		{
			"inject on the metadata opts in",
			map[string]string{AnnotationInject: "true"}, nil,
			Policy{Inject: true, Exclude: map[SourceRef]bool{}}, nil,
		},
		{
			"inject on the pod template opts in",
			nil, map[string]string{AnnotationInject: "true"},
			Policy{Inject: true, Exclude: map[SourceRef]bool{}}, nil,
		},
		{
			"the metadata wins over the pod template",
			map[string]string{AnnotationInject: "false"}, map[string]string{AnnotationInject: "true"},
			Policy{Exclude: map[SourceRef]bool{}}, nil,
		},
		{
			"only configmaps, any case and spacing",
			map[string]string{AnnotationInject: "true", AnnotationOnly: " ConfigMaps "}, nil,
			Policy{Inject: true, Only: ConfigMap, Exclude: map[SourceRef]bool{}}, nil,
		},
		{
			"only secrets",
			map[string]string{AnnotationInject: "true", AnnotationOnly: "secrets"}, nil,
			Policy{Inject: true, Only: Secret, Exclude: map[SourceRef]bool{}}, nil,
		},
		{
			"include lists of both kinds, with spaces and an empty field",
			map[string]string{AnnotationIncludeConfigMaps: "a, b,", AnnotationIncludeSecrets: "s"}, nil,
			Policy{Include: []SourceRef{{ConfigMap, "a"}, {ConfigMap, "b"}, {Secret, "s"}}, Exclude: map[SourceRef]bool{}}, nil,
		},
		{
			"exclude lists of both kinds, and search",
			map[string]string{AnnotationInject: "true", AnnotationExcludeConfigMaps: "a", AnnotationExcludeSecrets: "s,t", AnnotationSearch: "true"}, nil,
			Policy{Inject: true, Search: true, Exclude: map[SourceRef]bool{{ConfigMap, "a"}: true, {Secret, "s"}: true, {Secret, "t"}: true}}, nil,
		},
		{
			"a bad inject value is a problem and does not opt in",
			map[string]string{AnnotationInject: "yes please"}, nil,
			Policy{Exclude: map[SourceRef]bool{}}, []string{`confighash.dev/inject="yes please": want "true" or "false"`},
		},
		{
			"a bad inject value does not drop an include that opts in by itself",
			map[string]string{AnnotationInject: "maybe", AnnotationIncludeSecrets: "s"}, nil,
			Policy{Include: []SourceRef{{Secret, "s"}}, Exclude: map[SourceRef]bool{}}, []string{"confighash.dev/inject"},
		},
		{
			"an unknown only value is a problem and both kinds count",
			map[string]string{AnnotationInject: "true", AnnotationOnly: "pods"}, nil,
			Policy{Inject: true, Exclude: map[SourceRef]bool{}}, []string{`confighash.dev/only="pods"`},
		},
		{
			"an empty list is a problem",
			map[string]string{AnnotationInject: "true", AnnotationExcludeSecrets: " , "}, nil,
			Policy{Inject: true, Exclude: map[SourceRef]bool{}}, []string{`confighash.dev/exclude-secrets=" , ": empty list`},
		},
		{
			"a cross-namespace name is a problem; the valid names stay",
			map[string]string{AnnotationIncludeConfigMaps: "good,other/cm"}, nil,
			Policy{Include: []SourceRef{{ConfigMap, "good"}}, Exclude: map[SourceRef]bool{}}, []string{`"other/cm": references are same-namespace only`},
		},
		{
			"an invalid name is a problem; the valid names stay",
			map[string]string{AnnotationInject: "true", AnnotationExcludeConfigMaps: "Bad_Name,ok"}, nil,
			Policy{Inject: true, Exclude: map[SourceRef]bool{{ConfigMap, "ok"}: true}}, []string{`"Bad_Name": not a valid object name`},
		},
		{
			"a bad search value is a problem and search stays off",
			map[string]string{AnnotationInject: "true", AnnotationSearch: "on"}, nil,
			Policy{Inject: true, Exclude: map[SourceRef]bool{}}, []string{"confighash.dev/search"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := ParsePolicy(tt.metadata, tt.template)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParsePolicy() = %+v, want %+v", got, tt.want)
			}
			if len(problems) != len(tt.problems) {
				t.Fatalf("problems = %v, want %d matching %q", problems, len(tt.problems), tt.problems)
			}
			for i, want := range tt.problems {
				if !strings.Contains(problems[i].Error(), want) {
					t.Fatalf("problem %d = %q, want it to contain %q", i, problems[i].Error(), want)
				}
			}
		})
	}
}

func TestEnabled(t *testing.T) {
	if (Policy{}).Enabled() {
		t.Fatal("an empty policy is enabled")
	}
	if !(Policy{Inject: true}).Enabled() || !(Policy{Include: []SourceRef{{Secret, "s"}}}).Enabled() {
		t.Fatal("inject or an include does not enable")
	}
}

func TestProblemErrorTruncatesLongValues(t *testing.T) {
	msg := Problem{AnnotationOnly, strings.Repeat("x", 1000), "bad"}.Error()
	if len(msg) > 200 {
		t.Fatalf("problem message is %d bytes long", len(msg))
	}
}

func TestCandidates(t *testing.T) {
	refs := []Reference{
		{SourceRef: SourceRef{ConfigMap, "a"}, Keys: []string{"k"}},
		{SourceRef: SourceRef{ConfigMap, "c"}, AllKeys: true, Optional: true},
		{SourceRef: SourceRef{Secret, "s"}, AllKeys: true},
	}
	tests := []struct {
		name   string
		policy Policy
		want   []Reference
	}{
		{"every reference is a candidate by default", Policy{Inject: true}, refs},
		{"only configmaps drops secrets", Policy{Inject: true, Only: ConfigMap}, refs[:2]},
		{"only secrets drops configmaps", Policy{Inject: true, Only: Secret}, refs[2:]},
		{"exclude drops the named source", Policy{Inject: true, Exclude: map[SourceRef]bool{{ConfigMap, "c"}: true}}, []Reference{refs[0], refs[2]}},
		{
			"an include adds a whole, optional source in order",
			Policy{Include: []SourceRef{{ConfigMap, "b"}}},
			[]Reference{refs[0], {SourceRef: SourceRef{ConfigMap, "b"}, AllKeys: true, Optional: true}, refs[1], refs[2]},
		},
		{
			"an include of a used source takes all its keys and keeps it required",
			Policy{Include: []SourceRef{{ConfigMap, "a"}}},
			[]Reference{{SourceRef: SourceRef{ConfigMap, "a"}, AllKeys: true}, refs[1], refs[2]},
		},
		{
			"an include is not subject to only",
			Policy{Only: Secret, Include: []SourceRef{{ConfigMap, "x"}}},
			[]Reference{{SourceRef: SourceRef{ConfigMap, "x"}, AllKeys: true, Optional: true}, refs[2]},
		},
		{
			"exclude wins over include",
			Policy{Include: []SourceRef{{Secret, "t"}}, Exclude: map[SourceRef]bool{{Secret, "t"}: true}},
			refs,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]Reference(nil), refs...)
			if got := tt.policy.Candidates(in); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Candidates() =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

func TestCounts(t *testing.T) {
	tests := []struct {
		name   string
		search bool
		src    Source
		want   bool
	}{
		{"a plain source counts", false, Source{Present: true}, true},
		{"an ignored source never counts", false, Source{Present: true, Ignore: true}, false},
		{"in search mode a source without match does not count", true, Source{Present: true}, false},
		{"in search mode a matching source counts", true, Source{Present: true, Match: true}, true},
		{"ignore wins over match", true, Source{Present: true, Match: true, Ignore: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (Policy{Inject: true, Search: tt.search}).Counts(tt.src); got != tt.want {
				t.Fatalf("Counts() = %v, want %v", got, tt.want)
			}
		})
	}
}

// FuzzParsePolicy: any annotation values yield a policy and problems, never a panic,
// and every accepted name is a valid same-namespace name.
func FuzzParsePolicy(f *testing.F) {
	f.Add("true", "configmaps", "a,b", "other/x", "true")
	f.Add("", "", ",,", "Bad_Name", "no")
	f.Fuzz(func(t *testing.T, inject, only, include, exclude, search string) {
		p, problems := ParsePolicy(map[string]string{
			AnnotationInject: inject, AnnotationOnly: only, AnnotationIncludeConfigMaps: include,
		}, map[string]string{AnnotationExcludeSecrets: exclude, AnnotationSearch: search})
		for _, r := range p.Include {
			if r.Name == "" || strings.ContainsAny(r.Name, "/, ") {
				t.Fatalf("accepted include %q", r.Name)
			}
		}
		for _, pr := range problems {
			_ = pr.Error()
		}
	})
}
