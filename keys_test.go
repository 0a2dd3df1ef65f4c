package confighash

import (
	"strings"
	"testing"
)

// TestATypoIsReportedWithTheNearestKey: a key under confighash's prefix, or Reloader's
// when its vocabulary is read, that nothing reads is a problem naming the key meant.
func TestATypoIsReportedWithTheNearestKey(t *testing.T) {
	for _, c := range []struct {
		key      string
		at       Place
		reloader bool
		want     string // "" for no problem
	}{
		{"confighash.dev/injct", OnWorkload, false, "did you mean confighash.dev/inject?"},
		{"confighash.dev/include-configmap", OnWorkload, false, "did you mean confighash.dev/include-configmaps?"},
		{"confighash.dev/match", OnWorkload, false, "read on ConfigMaps and Secrets, not on workloads"},
		{"confighash.dev/wave-sise", OnNamespace, false, "did you mean confighash.dev/wave-size?"},
		{"confighash.dev/ignroe", OnSource, false, "did you mean confighash.dev/ignore?"},
		{"confighash.dev/something-else-entirely", OnWorkload, false, "not a key confighash reads; ignored"},
		{"reloader.stakater.com/atuo", OnWorkload, true, "did you mean reloader.stakater.com/auto?"},
		{"configmap.reloader.stakater.com/relaod", OnWorkload, true, "did you mean configmap.reloader.stakater.com/reload?"},
		{"reloader.stakater.com/atuo", OnWorkload, false, ""}, // Reloader's own, while it runs
		{"reloader.stakater.com/last-reloaded-from", OnWorkload, true, ""},
		{"confighash.dev/status", OnWorkload, false, ""},
		{"example.com/injct", OnWorkload, true, ""},
		{"notconfighash.dev/inject", OnWorkload, true, ""},
	} {
		got := UnknownKeys(map[string]string{c.key: "true"}, c.at, c.reloader)
		switch {
		case c.want == "" && len(got) > 0:
			t.Errorf("%s on %s: %v, want no problem", c.key, c.at, got)
		case c.want != "" && (len(got) != 1 || !strings.Contains(got[0].Error(), c.want)):
			t.Errorf("%s on %s: %v, want one saying %q", c.key, c.at, got, c.want)
		}
	}
}

// TestManyUnknownKeysCostABoundedSearch: a tenant's thousand made-up keys give at most
// maxProblems problems.
func TestManyUnknownKeysCostABoundedSearch(t *testing.T) {
	m := map[string]string{}
	for i := range 1000 {
		m[Domain+"/"+strings.Repeat("x", 50)+string(rune('a'+i%26))+strings.Repeat("y", i%13)] = ""
	}
	if got := UnknownKeys(m, OnWorkload, true); len(got) != maxProblems {
		t.Fatalf("%d problems, want %d", len(got), maxProblems)
	}
}

// TestAWorkloadsTypoIsAProblem: ParsePolicy reports a typo on the metadata or the pod
// template, and the rest of the annotations stand.
func TestAWorkloadsTypoIsAProblem(t *testing.T) {
	p, problems := Vocabulary{}.ParsePolicy(map[string]string{AnnotationInject: "true", Domain + "/serch": "true"}, map[string]string{Domain + "/pause-periode": "5m"})
	if !p.Enabled() || len(problems) != 2 {
		t.Fatalf("policy enabled %v, problems %v; want enabled, two problems", p.Enabled(), problems)
	}
}

// TestReloaderAutoWinsOverSearch: as in Reloader, auto "true" counts every used
// source, whatever search says.
func TestReloaderAutoWinsOverSearch(t *testing.T) {
	v := Vocabulary{Reloader: true}
	p, _ := v.ParsePolicy(map[string]string{ReloaderAuto: "true", ReloaderSearch: "true"}, nil)
	if p.Search {
		t.Error("Reloader's auto and search: search mode, want auto's (every used source)")
	}
	p, _ = v.ParsePolicy(map[string]string{ReloaderSearch: "true"}, nil)
	if !p.Search {
		t.Error("Reloader's search alone: not search mode")
	}
	p, _ = v.ParsePolicy(map[string]string{ReloaderAuto: "true", AnnotationSearch: "true"}, nil)
	if !p.Search {
		t.Error("confighash's own search with Reloader's auto: not search mode")
	}
}

// TestATypedAnnotationOfAnIgnoredKindSaysWhy: with --resources-to-ignore, a typed
// Reloader annotation of that kind is ignored for that reason, not for CSI's.
func TestATypedAnnotationOfAnIgnoredKindSaysWhy(t *testing.T) {
	v := Vocabulary{Reloader: true, Ignored: SourceKindsOf(ConfigMap)}
	_, problems := v.ParsePolicy(map[string]string{ReloaderConfigMapAuto: "true"}, nil)
	if len(problems) != 1 || !strings.Contains(problems[0].Reason, "--resources-to-ignore") {
		t.Fatalf("problems %v, want one naming --resources-to-ignore", problems)
	}
}

// TestSecretProviderClassesCanBeExcluded: Reloader's exclude of SecretProviderClasses
// is read, with CSI.
func TestSecretProviderClassesCanBeExcluded(t *testing.T) {
	p, problems := Vocabulary{Reloader: true, CSI: true}.ParsePolicy(map[string]string{ReloaderAuto: "true", ReloaderSecretProviderClassExclude: "vault-db"}, nil)
	if len(problems) != 0 || !p.excludes(SourceRef{SecretProviderClass, "vault-db"}) {
		t.Fatalf("exclude %v, problems %v; want vault-db excluded", p.Exclude, problems)
	}
}
