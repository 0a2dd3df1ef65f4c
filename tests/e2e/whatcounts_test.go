package e2e

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/fixtures"
)

// TestWhatCountsChangingRollsNothing: each change of what counts, in confighash's and
// in Reloader's annotations, added and removed, rolls nothing, also at a later
// unrelated admission; then one change of data rolls each workload once
// (rule 1). Reproductions: ignore on a used ConfigMap rolled the Deployment; Reloader's
// match added in search mode rolled it at the next unrelated label change; an
// exclude of a used ConfigMap rolled it.
func TestWhatCountsChangingRollsNothing(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	w := startWatcher(t, c)
	ns := labeledNamespace(t, c)
	type whatCounts struct {
		name string
		// base annotates the workload; matched, other's annotations.
		base, matched map[string]string
		// source or workload annotations toggled.
		onSource, onWorkload map[string]*string
	}
	cases := []whatCounts{
		{name: "ignore", base: map[string]string{confighash.AnnotationInject: "true"}, onSource: map[string]*string{confighash.AnnotationIgnore: ptrTo("true")}},
		{name: "match", base: map[string]string{confighash.AnnotationInject: "true", confighash.AnnotationSearch: "true"},
			matched: map[string]string{confighash.AnnotationMatch: "true"}, onSource: map[string]*string{confighash.AnnotationMatch: ptrTo("true")}},
		{name: "exclude", base: map[string]string{confighash.AnnotationInject: "true"}, onWorkload: map[string]*string{confighash.AnnotationExcludeConfigMaps: ptrTo("cfg-exclude")}},
		{name: "include", base: map[string]string{confighash.AnnotationInject: "true"}, onWorkload: map[string]*string{confighash.AnnotationIncludeConfigMaps: ptrTo("extra-include")}},
		{name: "only", base: map[string]string{confighash.AnnotationInject: "true"}, onWorkload: map[string]*string{confighash.AnnotationOnly: ptrTo("secrets")}},
		{name: "search", base: map[string]string{confighash.AnnotationInject: "true"}, onWorkload: map[string]*string{confighash.AnnotationSearch: ptrTo("true")}},
		{name: "r-ignore", base: map[string]string{confighash.ReloaderAuto: "true"}, onSource: map[string]*string{confighash.ReloaderIgnore: ptrTo("true")}},
		{name: "r-match", base: map[string]string{confighash.ReloaderSearch: "true"},
			matched: map[string]string{confighash.ReloaderMatch: "true"}, onSource: map[string]*string{confighash.ReloaderMatch: ptrTo("true")}},
		{name: "r-exclude", base: map[string]string{confighash.ReloaderAuto: "true"}, onWorkload: map[string]*string{confighash.ReloaderConfigMapExclude: ptrTo("cfg-r-exclude")}},
		{name: "r-include", base: map[string]string{confighash.ReloaderAuto: "true"}, onWorkload: map[string]*string{confighash.ReloaderConfigMapReload: ptrTo("extra-r-include")}},
		{name: "r-typed", base: map[string]string{confighash.ReloaderConfigMapAuto: "true"},
			onWorkload: map[string]*string{confighash.ReloaderConfigMapAuto: nil, confighash.ReloaderSecretAuto: ptrTo("true")}},
		{name: "r-search", base: map[string]string{confighash.ReloaderAuto: "true"}, onWorkload: map[string]*string{confighash.ReloaderSearch: ptrTo("true")}},
	}
	want := map[string]int{}
	for _, tc := range cases {
		createConfigMap(t, c, ns, "cfg-"+tc.name, map[string]string{"k": "0"})
		other := createConfigMap(t, c, ns, "other-"+tc.name, map[string]string{"k": "0"})
		if tc.matched != nil {
			other.Annotations = tc.matched
			if _, err := c.Client.CoreV1().ConfigMaps(ns).Update(t.Context(), other, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		createConfigMap(t, c, ns, "extra-"+tc.name, map[string]string{"k": "0"})
		createDeployment(t, c, ns, fixtures.AnnotatedDeployment(tc.name, tc.base, fixtures.UsingTemplate([]string{"cfg-" + tc.name, "other-" + tc.name}, nil)))
		want[tc.name] = 1
	}
	expectRollouts(t, c, ns, want)
	// A return to an earlier pod template makes no ReplicaSet: the hashes must stay.
	hashes := map[string]string{}
	for _, tc := range cases {
		hashes[tc.name] = templateHash(t, c, ns, tc.name)
	}

	// undo returns the annotations that remove what set added.
	undo := func(set map[string]*string) map[string]*string {
		out := map[string]*string{}
		for k, v := range set {
			if v == nil {
				out[k] = ptrTo("true")
			} else {
				out[k] = nil
			}
		}
		return out
	}
	phase := func(what string, change func(tc whatCounts)) {
		t.Helper()
		for _, tc := range cases {
			change(tc)
		}
		waitQuiet(t, w)
		t.Logf("%s: checking that nothing rolled", what)
		expectRollouts(t, c, ns, want)
		for _, tc := range cases {
			if h := templateHash(t, c, ns, tc.name); h != hashes[tc.name] {
				t.Fatalf("%s: %s's hash changed from %s to %s", what, tc.name, hashes[tc.name], h)
			}
		}
	}
	toggle := func(tc whatCounts, add bool) {
		if tc.onSource != nil {
			set := tc.onSource
			if !add {
				set = undo(set)
			}
			mergeAnnotations(t, c, ns, "ConfigMap", "cfg-"+tc.name, set)
			return
		}
		set := tc.onWorkload
		if !add {
			set = undo(set)
		}
		mergeAnnotations(t, c, ns, "Deployment", tc.name, set)
	}
	phase("what counts changed", func(tc whatCounts) { toggle(tc, true) })
	phase("an unrelated label", func(tc whatCounts) { relabel(t, c, ns, tc.name, "shop") })
	phase("the change undone", func(tc whatCounts) { toggle(tc, false) })
	phase("another unrelated label", func(tc whatCounts) { relabel(t, c, ns, tc.name, "books") })

	for _, tc := range cases {
		setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "other-" + tc.name}, "k", "1")
		want[tc.name] = 2
	}
	expectRollouts(t, c, ns, want)
}

// TestAppsAppliedWithTheirConfigMapsAreAdopted: 100 apps, each a ConfigMap and a
// Deployment applied together with kubectl apply -f (in the same second, as helm
// install does), annotated for Reloader; ten have their ConfigMap changed after their
// pods started. 20 s later the namespace is labelled: the 90 are adopted, none rolls;
// the ten roll once each. (Reproduction: 10 of 20 such apps rolled.)
func TestAppsAppliedWithTheirConfigMapsAreAdopted(t *testing.T) {
	c := isolatedCluster(t) // among the longest: the own lane evens the lanes
	startWebhook(t, c)
	w := startWatcher(t, c)
	ns := namespace(t, c, nil)
	const n, changed = 100, 10
	applied := time.Now()
	if out, err := c.Kubectl(t.Context(), appsManifest(t, ns, n, map[string]string{confighash.ReloaderAuto: "true"}), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	want := map[string]int{}
	for i := range n {
		want[fmt.Sprintf("app-%d", i)] = 1
	}
	expectRollouts(t, c, ns, want)
	for i := range changed {
		name := fmt.Sprintf("app-%d", i)
		if err := c.WaitRolledOut(t.Context(), ns, name); err != nil {
			t.Fatal(err)
		}
	}
	afterTheSecond()
	for i := range changed {
		name := fmt.Sprintf("app-%d", i)
		setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: name}, "k", "1")
		want[name] = 2
	}
	time.Sleep(time.Until(applied.Add(20 * time.Second)))

	enableNamespace(t, c, ns)
	waitFor(t, 90*time.Second, "every Deployment to be recorded", func() bool {
		for name := range want {
			if !recorded(t, c, ns, name) {
				return false
			}
		}
		return true
	})
	expectRollouts(t, c, ns, want)
	if got := w.metric(t, `confighash_watcher_touches_total{result="adopted"}`); got != n-changed {
		t.Fatalf("adopted = %v, want %d", got, n-changed)
	}
}
