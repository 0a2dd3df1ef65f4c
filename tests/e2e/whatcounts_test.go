package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
)

// mergeAnnotations patches annotations of a ConfigMap or a Deployment: a nil value
// removes one.
func mergeAnnotations(t testing.TB, c *cluster.Cluster, ns, kind, name string, annotations map[string]*string) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		t.Fatal(err)
	}
	switch kind {
	case "ConfigMap":
		_, err = c.Client.CoreV1().ConfigMaps(ns).Patch(t.Context(), name, types.MergePatchType, body, metav1.PatchOptions{})
	case "Deployment":
		_, err = c.Client.AppsV1().Deployments(ns).Patch(t.Context(), name, types.MergePatchType, body, metav1.PatchOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// relabel makes an admission that changes nothing confighash reads: a new label.
func relabel(t testing.TB, c *cluster.Cluster, ns, name, value string) {
	t.Helper()
	body := fmt.Sprintf(`{"metadata":{"labels":{"team":%q}}}`, value)
	if _, err := c.Client.AppsV1().Deployments(ns).Patch(t.Context(), name, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitQuiet waits until the watcher has written nothing for a while: what it had to
// do about the last changes is done.
func waitQuiet(t testing.TB, w *component) {
	t.Helper()
	const metric = "confighash_watcher_touches_total"
	last, since := w.metric(t, metric), time.Now()
	waitFor(t, 60*time.Second, "the watcher to be quiet", func() bool {
		if now := w.metric(t, metric); now != last {
			last, since = now, time.Now()
		}
		return time.Since(since) > 1500*time.Millisecond
	})
}

func ptrTo(s string) *string { return &s }

// TestWhatCountsChangingRollsNothing: each change of what counts, in confighash's and
// in Reloader's annotations, added and removed, rolls nothing, also at a later
// unrelated admission; then one change of data rolls each workload once (DESIGN rule
// 1). Reproductions: ignore on a used ConfigMap rolled the Deployment; Reloader's
// match added in search mode rolled it at the next unrelated label change; an
// exclude of a used ConfigMap rolled it.
func TestWhatCountsChangingRollsNothing(t *testing.T) {
	c := cluster.Require(t, testCluster)
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
		createDeployment(t, c, ns, annotatedDeployment(tc.name, tc.base, usingTemplate([]string{"cfg-" + tc.name, "other-" + tc.name}, nil)))
		want[tc.name] = 1
	}
	expectRollouts(t, c, ns, want)

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

// appsManifest renders apps, each a ConfigMap and a Deployment of one pod that uses
// it, as one file for kubectl apply -f, the ConfigMap first as Helm and kustomize
// order them.
func appsManifest(t testing.TB, ns string, n int, annotations map[string]string) []byte {
	t.Helper()
	var docs []string
	for i := range n {
		name := fmt.Sprintf("app-%d", i)
		cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"k": "0"}}
		d := annotatedDeployment(name, annotations, envFromTemplate(name))
		d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
		d.Namespace = ns
		one := int32(1)
		d.Spec.Replicas = &one
		for _, obj := range []any{cm, d} {
			b, err := yaml.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, string(b))
		}
	}
	return []byte(strings.Join(docs, "---\n"))
}

// TestAppsAppliedWithTheirConfigMapsAreAdopted: 100 apps, each a ConfigMap and a
// Deployment applied together with kubectl apply -f (in the same second, as helm
// install does), annotated for Reloader; ten have their ConfigMap changed after their
// pods started. 20 s later the namespace is labelled: the 90 are adopted, none rolls;
// the ten roll once each. (Reproduction: 10 of 20 such apps rolled.)
func TestAppsAppliedWithTheirConfigMapsAreAdopted(t *testing.T) {
	c := cluster.Require(t, testCluster)
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
