package confighash

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// both is the Discover of an opt-in to every used source.
var both = SourceKindsOf(ConfigMap, Secret)

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
			Policy{}, nil,
		},
		{
			"inject on the metadata opts in",
			map[string]string{AnnotationInject: "true"}, nil,
			Policy{Discover: both}, nil,
		},
		{
			"inject on the pod template opts in",
			nil, map[string]string{AnnotationInject: "true"},
			Policy{Discover: both}, nil,
		},
		{
			"the metadata wins over the pod template, and false opts out",
			map[string]string{AnnotationInject: "false"}, map[string]string{AnnotationInject: "true"},
			Policy{OptOut: true}, nil,
		},
		{
			"only configmaps, any case and spacing",
			map[string]string{AnnotationInject: "true", AnnotationOnly: " ConfigMaps "}, nil,
			Policy{Discover: SourceKindsOf(ConfigMap)}, nil,
		},
		{
			"only secrets",
			map[string]string{AnnotationInject: "true", AnnotationOnly: "secrets"}, nil,
			Policy{Discover: SourceKindsOf(Secret)}, nil,
		},
		{
			"include lists of both kinds, with spaces and an empty field, opt in",
			map[string]string{AnnotationIncludeConfigMaps: "a, b,", AnnotationIncludeSecrets: "s"}, nil,
			Policy{Discover: both, Include: []SourceRef{{ConfigMap, "a"}, {ConfigMap, "b"}, {Secret, "s"}}}, nil,
		},
		{
			"exclude lists of both kinds, search and a pause period",
			map[string]string{AnnotationInject: "true", AnnotationExcludeConfigMaps: "a", AnnotationExcludeSecrets: "s,t", AnnotationSearch: "true", AnnotationPausePeriod: "90s"}, nil,
			Policy{Discover: both, Search: true, PausePeriod: 90 * time.Second, Exclude: []SourceRef{{ConfigMap, "a"}, {Secret, "s"}, {Secret, "t"}}}, nil,
		},
		{
			"a bad inject value is a problem and does not opt in",
			map[string]string{AnnotationInject: "yes please"}, nil,
			Policy{}, []string{`confighash.dev/inject="yes please": want "true" or "false"`},
		},
		{
			"a bad inject value does not drop an include that opts in by itself",
			map[string]string{AnnotationInject: "maybe", AnnotationIncludeSecrets: "s"}, nil,
			Policy{Discover: both, Include: []SourceRef{{Secret, "s"}}}, []string{"confighash.dev/inject"},
		},
		{
			"an unknown only value is a problem and both kinds count",
			map[string]string{AnnotationInject: "true", AnnotationOnly: "pods"}, nil,
			Policy{Discover: both}, []string{`confighash.dev/only="pods"`},
		},
		{
			"an empty list is a problem",
			map[string]string{AnnotationInject: "true", AnnotationExcludeSecrets: " , "}, nil,
			Policy{Discover: both}, []string{`confighash.dev/exclude-secrets=" , ": empty list`},
		},
		{
			"a cross-namespace name is a problem; the valid names stay",
			map[string]string{AnnotationIncludeConfigMaps: "good,other/cm"}, nil,
			Policy{Discover: both, Include: []SourceRef{{ConfigMap, "good"}}}, []string{`"other/cm": references are same-namespace only`},
		},
		{
			"an invalid name is a problem; the valid names stay",
			map[string]string{AnnotationInject: "true", AnnotationExcludeConfigMaps: "Bad_Name,ok"}, nil,
			Policy{Discover: both, Exclude: []SourceRef{{ConfigMap, "ok"}}}, []string{`"Bad_Name": not a valid object name`},
		},
		{
			"a bad search value is a problem and search stays off",
			map[string]string{AnnotationInject: "true", AnnotationSearch: "on"}, nil,
			Policy{Discover: both}, []string{"confighash.dev/search"},
		},
		{
			"a bad pause period is a problem",
			map[string]string{AnnotationInject: "true", AnnotationPausePeriod: "-5m"}, nil,
			Policy{Discover: both}, []string{`confighash.dev/pause-period="-5m": want a duration`},
		},
		{
			"Reloader's annotations are not read unless asked for",
			map[string]string{ReloaderAuto: "true"}, nil,
			Policy{}, nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkPolicy(t, Vocabulary{}, tt.metadata, tt.template, tt.want, tt.problems)
		})
	}
}

// checkPolicy parses the annotations and compares the policy and its problems.
func checkPolicy(t *testing.T, v Vocabulary, metadata, template map[string]string, want Policy, problems []string) {
	t.Helper()
	got, gotProblems := v.ParsePolicy(metadata, template)
	// The unexported fields serve ForEveryWorkload and counts, tested on their own.
	got.reloader, got.decided, got.only, got.kinds = false, 0, "", 0
	if !got.Equal(want) {
		t.Fatalf("ParsePolicy() = %+v, want %+v", got, want)
	}
	if len(gotProblems) != len(problems) {
		t.Fatalf("problems = %v, want %d matching %q", gotProblems, len(problems), problems)
	}
	for i, w := range problems {
		if !strings.Contains(gotProblems[i].Error(), w) {
			t.Fatalf("problem %d = %q, want it to contain %q", i, gotProblems[i].Error(), w)
		}
	}
}

// TestReloaderAliases: Reloader's annotations, as its documentation describes them,
// read into the same policy as confighash's own.
func TestReloaderAliases(t *testing.T) {
	pattern := func(kind SourceKind, expr string) NamePattern {
		return NamePattern{Kind: kind, Expr: regexp.MustCompile("^(?:" + expr + ")$")}
	}
	tests := []struct {
		name     string
		metadata map[string]string
		template map[string]string
		want     Policy
		problems []string
	}{
		{
			"auto opts in to every used source",
			map[string]string{ReloaderAuto: "true"}, nil,
			Policy{Discover: both}, nil,
		},
		{
			"auto on the pod template",
			nil, map[string]string{ReloaderAuto: "true"},
			Policy{Discover: both}, nil,
		},
		{
			"auto false opts out, winning over confighash's inject and Reloader's named list",
			map[string]string{ReloaderAuto: "false", AnnotationInject: "true", ReloaderConfigMapReload: "app"}, nil,
			Policy{OptOut: true, Discover: both, Include: []SourceRef{{ConfigMap, "app"}}}, nil,
		},
		{
			"typed auto opts in for its kind only",
			map[string]string{ReloaderConfigMapAuto: "true"}, nil,
			Policy{Discover: SourceKindsOf(ConfigMap)}, nil,
		},
		{
			"both typed autos",
			map[string]string{ReloaderConfigMapAuto: "true", ReloaderSecretAuto: "true"}, nil,
			Policy{Discover: both}, nil,
		},
		{
			"named lists include without discovering, plain names stay names",
			map[string]string{ReloaderConfigMapReload: "app-config, shared", ReloaderSecretReload: "db"}, nil,
			Policy{Include: []SourceRef{{ConfigMap, "app-config"}, {ConfigMap, "shared"}, {Secret, "db"}}}, nil,
		},
		{
			"an entry with regular expression syntax is a pattern",
			map[string]string{ReloaderConfigMapReload: "app-.*,fixed", ReloaderSecretReload: "db.example.com"}, nil,
			Policy{Include: []SourceRef{{ConfigMap, "fixed"}}, Patterns: []NamePattern{pattern(ConfigMap, "app-.*"), pattern(Secret, "db.example.com")}}, nil,
		},
		{
			"an invalid regular expression is a problem; the rest applies",
			map[string]string{ReloaderSecretReload: "db-(, api"}, nil,
			Policy{Include: []SourceRef{{Secret, "api"}}}, []string{`"db-(": not a valid regular expression`},
		},
		{
			"exclude lists",
			map[string]string{ReloaderAuto: "true", ReloaderConfigMapExclude: "big", ReloaderSecretExclude: "tls"}, nil,
			Policy{Discover: both, Exclude: []SourceRef{{ConfigMap, "big"}, {Secret, "tls"}}}, nil,
		},
		{
			"search opts in, counting only matching sources",
			map[string]string{ReloaderSearch: "true"}, nil,
			Policy{Discover: both, Search: true}, nil,
		},
		{
			"pause period, confighash's winning",
			map[string]string{ReloaderAuto: "true", ReloaderPausePeriod: "5m"}, map[string]string{AnnotationPausePeriod: "1m"},
			Policy{Discover: both, PausePeriod: time.Minute}, nil,
		},
		{
			"Reloader's pause period",
			map[string]string{ReloaderAuto: "true", ReloaderPausePeriod: "5m"}, nil,
			Policy{Discover: both, PausePeriod: 5 * time.Minute}, nil,
		},
		{
			"Argo Rollouts' restart strategy",
			map[string]string{ReloaderAuto: "true", ReloaderRolloutStrategy: "restart"}, nil,
			Policy{Discover: both, RolloutRestart: true}, nil,
		},
		{
			"an unknown rollout strategy is a problem, the rest applies",
			map[string]string{ReloaderAuto: "true", ReloaderRolloutStrategy: "recreate"}, nil,
			Policy{Discover: both}, []string{"rollout-strategy=\"recreate\": want \"restart\" or \"rollout\""},
		},
		{
			"only narrows a typed auto",
			map[string]string{ReloaderConfigMapAuto: "true", AnnotationOnly: "secrets"}, nil,
			Policy{}, nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkPolicy(t, Vocabulary{Reloader: true}, tt.metadata, tt.template, tt.want, tt.problems)
		})
	}
}

func TestForEveryWorkload(t *testing.T) {
	configMaps := SourceKindsOf(ConfigMap)
	tests := []struct {
		name        string
		annotations map[string]string
		discover    SourceKinds
		enabled     bool
	}{
		{"no annotation: every used source counts", nil, both, true},
		{"only still narrows", map[string]string{AnnotationOnly: "configmaps"}, configMaps, true},
		{"a named list alone: it and every used source", map[string]string{ReloaderSecretReload: "db"}, both, true},
		{"a typed auto decides its kind only", map[string]string{ReloaderConfigMapAuto: "true"}, both, true},
		{"inject decides both", map[string]string{AnnotationInject: "true", AnnotationOnly: "configmaps"}, configMaps, true},
		{"a typed auto of false opts that kind out", map[string]string{ReloaderConfigMapAuto: "false"}, SourceKindsOf(Secret), true},
		{"inject false opts out", map[string]string{AnnotationInject: "false"}, SourceKinds(0), false},
		{"Reloader's auto false opts out", map[string]string{ReloaderAuto: "false"}, SourceKinds(0), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := Vocabulary{Reloader: true}.ParsePolicy(tt.annotations, nil)
			every := p.ForEveryWorkload()
			if every.Discover != tt.discover || every.Enabled() != tt.enabled {
				t.Fatalf("ForEveryWorkload() discovers %v, enabled %v; want %v, %v", every.Discover, every.Enabled(), tt.discover, tt.enabled)
			}
		})
	}
}

func TestEnabled(t *testing.T) {
	tests := []struct {
		policy Policy
		want   bool
	}{
		{Policy{}, false},
		{Policy{Discover: both}, true},
		{Policy{Include: []SourceRef{{Secret, "s"}}}, true},
		{Policy{Patterns: []NamePattern{{Kind: Secret, Expr: regexp.MustCompile("s.*")}}}, true},
		{Policy{OptOut: true, Discover: both, Include: []SourceRef{{Secret, "s"}}}, false},
	}
	for _, tt := range tests {
		if got := tt.policy.Enabled(); got != tt.want {
			t.Errorf("%+v.Enabled() = %v, want %v", tt.policy, got, tt.want)
		}
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
	named := func(kind SourceKind, name string) Reference {
		return Reference{SourceRef: SourceRef{kind, name}, AllKeys: true, Optional: true, Named: true}
	}
	configMaps := SourceKindsOf(ConfigMap)
	tests := []struct {
		name   string
		policy Policy
		names  []SourceRef
		want   []Reference
	}{
		{"every reference is a candidate when both kinds are discovered", Policy{Discover: both}, nil, refs},
		{"discovering configmaps drops secrets", Policy{Discover: configMaps}, nil, refs[:2]},
		{"discovering secrets drops configmaps", Policy{Discover: SourceKindsOf(Secret)}, nil, refs[2:]},
		{"exclude drops the named source", Policy{Discover: both, Exclude: []SourceRef{{ConfigMap, "c"}}}, nil, []Reference{refs[0], refs[2]}},
		{
			"an include adds a whole, optional source in order",
			Policy{Discover: both, Include: []SourceRef{{ConfigMap, "b"}}}, nil,
			[]Reference{refs[0], named(ConfigMap, "b"), refs[1], refs[2]},
		},
		{
			"an include of a used source takes all its keys and keeps it required",
			Policy{Discover: both, Include: []SourceRef{{ConfigMap, "a"}}}, nil,
			[]Reference{{SourceRef: SourceRef{ConfigMap, "a"}, AllKeys: true, Named: true}, refs[1], refs[2]},
		},
		{
			"an include alone discovers nothing else",
			Policy{Include: []SourceRef{{Secret, "s"}}}, nil,
			[]Reference{{SourceRef: SourceRef{Secret, "s"}, AllKeys: true, Named: true}},
		},
		{
			"an include is not subject to the kinds discovered",
			Policy{Discover: SourceKindsOf(Secret), Include: []SourceRef{{ConfigMap, "x"}}}, nil,
			[]Reference{named(ConfigMap, "x"), refs[2]},
		},
		{
			"exclude wins over include",
			Policy{Discover: both, Include: []SourceRef{{Secret, "t"}}, Exclude: []SourceRef{{Secret, "t"}}}, nil,
			refs,
		},
		{
			"patterns include the names they match whole, of their kind, once",
			Policy{Include: []SourceRef{{ConfigMap, "app-1"}}, Patterns: []NamePattern{
				{Kind: ConfigMap, Expr: regexp.MustCompile("^(?:app-.*)$")}, {Kind: ConfigMap, Expr: regexp.MustCompile("^(?:app-[0-9])$")},
			}},
			[]SourceRef{{ConfigMap, "app-1"}, {ConfigMap, "app-2"}, {ConfigMap, "my-app-3"}, {Secret, "app-4"}},
			[]Reference{named(ConfigMap, "app-1"), named(ConfigMap, "app-2")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]Reference(nil), refs...)
			if got := tt.policy.Candidates(in, tt.names); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Candidates() =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

func TestCounts(t *testing.T) {
	used := Reference{SourceRef: SourceRef{ConfigMap, "a"}, AllKeys: true}
	named := Reference{SourceRef: SourceRef{ConfigMap, "a"}, AllKeys: true, Named: true}
	tests := []struct {
		name   string
		policy Policy
		ref    Reference
		src    Source
		want   bool
	}{
		{"a plain source counts", Policy{}, used, Source{Present: true}, true},
		{"an ignored source never counts", Policy{}, used, Source{Present: true, Ignore: true}, false},
		{"an ignored named source never counts", Policy{}, named, Source{Present: true, Ignore: true}, false},
		{"in search mode a source without match does not count", Policy{Search: true}, used, Source{Present: true}, false},
		{"in search mode a matching source counts", Policy{Search: true}, used, Source{Present: true, Match: true}, true},
		{"in search mode a named source counts without match", Policy{Search: true}, named, Source{Present: true}, true},
		{"ignore wins over match", Policy{Search: true}, used, Source{Present: true, Match: true, Ignore: true}, false},
		{"Reloader's ignore counts when read", Policy{reloader: true}, used, Source{Present: true, ReloaderIgnore: true}, false},
		{"Reloader's ignore is nothing when not read", Policy{}, used, Source{Present: true, ReloaderIgnore: true}, true},
		{"Reloader's match counts when read", Policy{reloader: true, Search: true}, used, Source{Present: true, ReloaderMatch: true}, true},
		{"Reloader's match is nothing when not read", Policy{Search: true}, used, Source{Present: true, ReloaderMatch: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.policy.counts(tt.ref, tt.src); got != tt.want {
				t.Fatalf("counts() = %v, want %v", got, tt.want)
			}
		})
	}
}

// FuzzParsePolicy: any annotation values yield a policy and problems, never a panic,
// within bounds on time and allocation whatever the values (issue 32: one annotation
// once cost 500 MiB); every accepted name is a valid same-namespace name, every
// accepted pattern compiles within its bound, and an opt-out is never enabled.
func FuzzParsePolicy(f *testing.F) {
	f.Add("true", "configmaps", "a,b", "other/x", "true", "app-.*,b")
	f.Add("", "", ",,", "Bad_Name", "no", "(")
	f.Add("true", "", strings.Repeat("a,", 300), "", "", hostilePatterns())
	f.Add("", "", "", "", "", "(?:(?:[a-z]?){30}){30}x,(?:[a-z]?){90}x,[a-z]*[a-z]*y")
	f.Fuzz(func(t *testing.T, inject, only, include, exclude, search, reload string) {
		var p Policy
		var problems []Problem
		took, allocated := parseCost(func() {
			p, problems = Vocabulary{Reloader: true}.ParsePolicy(map[string]string{
				AnnotationInject: inject, AnnotationOnly: only, AnnotationIncludeConfigMaps: include, ReloaderSecretReload: reload,
			}, map[string]string{AnnotationExcludeSecrets: exclude, AnnotationSearch: search, ReloaderAuto: inject, ReloaderConfigMapReload: reload})
		})
		if took > 2*time.Second || allocated > 8<<20 {
			t.Fatalf("ParsePolicy took %v and allocated %d bytes", took, allocated)
		}
		checkPatternPrograms(t, p)
		for _, r := range p.Include {
			if r.Name == "" || strings.ContainsAny(r.Name, "/, ") {
				t.Fatalf("accepted include %q", r.Name)
			}
		}
		if p.OptOut && p.Enabled() {
			t.Fatal("an opted-out policy is enabled")
		}
		for _, pr := range problems {
			_ = pr.Error()
		}
	})
}

func TestProblemsAreBounded(t *testing.T) {
	names := make([]string, 5000)
	for i := range names {
		names[i] = fmt.Sprintf("Bad_%d", i)
	}
	_, problems := Vocabulary{}.ParsePolicy(map[string]string{AnnotationIncludeSecrets: strings.Join(names, ",")}, nil)
	if len(problems) != maxProblems+1 || !strings.Contains(problems[maxProblems].Error(), "and more problems") {
		t.Fatalf("%d problems for 5,000 bad names, want %d and a note", len(problems), maxProblems+1)
	}
}

func TestPolicyEqual(t *testing.T) {
	parse := func(annotations map[string]string) Policy {
		p, _ := Vocabulary{Reloader: true}.ParsePolicy(annotations, nil)
		return p
	}
	a := map[string]string{ReloaderConfigMapReload: "app-.*,db", ReloaderAuto: "true"}
	if !parse(a).Equal(parse(a)) {
		t.Fatal("a policy differs from itself parsed again")
	}
	for _, other := range []map[string]string{
		{ReloaderConfigMapReload: "app-.+,db", ReloaderAuto: "true"},
		{ReloaderConfigMapReload: "app-.*", ReloaderAuto: "true"},
		{ReloaderConfigMapReload: "app-.*,db", ReloaderConfigMapAuto: "true"},
		{ReloaderConfigMapReload: "app-.*,db", ReloaderAuto: "true", AnnotationPausePeriod: "1m"},
		{ReloaderConfigMapReload: "app-.*,db", ReloaderAuto: "true", ReloaderSecretExclude: "x"},
	} {
		if parse(a).Equal(parse(other)) {
			t.Errorf("%v equals %v", other, a)
		}
	}
}

func TestSecretProviderClassesCountOnlyWithCSI(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{Spec: withVolume(corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
		Driver: SecretsStoreDriver, VolumeAttributes: map[string]string{"secretProviderClass": "vault-db"}}})}
	tmpl.Spec.Volumes = append(tmpl.Spec.Volumes, corev1.Volume{Name: "other", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
		Driver: "ebs.csi.aws.com", VolumeAttributes: map[string]string{"secretProviderClass": "not-ours"}}}})
	refs := References(tmpl)
	if len(refs) != 1 || refs[0].SourceRef != (SourceRef{SecretProviderClass, "vault-db"}) || !refs[0].AllKeys || refs[0].Optional {
		t.Fatalf("References() = %+v, want the whole SecretProviderClass vault-db, required", refs)
	}
	for _, tt := range []struct {
		name        string
		vocabulary  Vocabulary
		annotations map[string]string
		want        Policy
		problem     string
	}{
		{"inject discovers it with CSI", Vocabulary{CSI: true}, map[string]string{AnnotationInject: "true"},
			Policy{Discover: SourceKindsOf(ConfigMap, Secret, SecretProviderClass)}, ""},
		{"inject does not without", Vocabulary{}, map[string]string{AnnotationInject: "true"},
			Policy{Discover: SourceKindsOf(ConfigMap, Secret)}, ""},
		{"Reloader's typed auto", Vocabulary{Reloader: true, CSI: true}, map[string]string{ReloaderSecretProviderClassAuto: "true"},
			Policy{Discover: SourceKindsOf(SecretProviderClass)}, ""},
		{"Reloader's named list", Vocabulary{Reloader: true, CSI: true}, map[string]string{ReloaderSecretProviderClassReload: "vault-db"},
			Policy{Include: []SourceRef{{SecretProviderClass, "vault-db"}}}, ""},
		{"Reloader's typed auto without CSI is a problem", Vocabulary{Reloader: true}, map[string]string{ReloaderSecretProviderClassAuto: "true"},
			Policy{}, "only with --enable-csi-integration"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var problems []string
			if tt.problem != "" {
				problems = []string{tt.problem}
			}
			checkPolicy(t, tt.vocabulary, tt.annotations, nil, tt.want, problems)
		})
	}
	if names := (Vocabulary{Reloader: true, CSI: true}).OptInAnnotations(); !slices.Contains(names, ReloaderSecretProviderClassAuto) || !slices.Contains(names, ReloaderSecretProviderClassReload) {
		t.Errorf("OptInAnnotations() = %v, want Reloader's SecretProviderClass annotations with CSI", names)
	}
	if names := (Vocabulary{Reloader: true}).OptInAnnotations(); slices.Contains(names, ReloaderSecretProviderClassAuto) {
		t.Errorf("OptInAnnotations() = %v, want no SecretProviderClass annotation without CSI", names)
	}
}
