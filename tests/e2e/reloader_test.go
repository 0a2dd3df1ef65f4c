package e2e

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/fixtures"
)

// TestReloaderDocumentedExamples: workloads annotated as Reloader's documentation
// shows, untouched, roll exactly when Reloader's documentation says, once per change.
func TestReloaderDocumentedExamples(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	startWatcher(t, c)
	ns := labeledNamespace(t, c)
	for _, name := range []string{"app-config", "feature-flags-1", "feature-flags-2", "unrelated-flags"} {
		createConfigMap(t, c, ns, name, map[string]string{"k": "v1"})
	}
	matched := createConfigMap(t, c, ns, "matched-config", map[string]string{"k": "v1"})
	matched.Annotations = map[string]string{confighash.ReloaderMatch: "true"}
	if _, err := c.Client.CoreV1().ConfigMaps(ns).Update(t.Context(), matched, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ignored := createConfigMap(t, c, ns, "ignored-config", map[string]string{"k": "v1"})
	ignored.Annotations = map[string]string{confighash.ReloaderIgnore: "true"}
	if _, err := c.Client.CoreV1().ConfigMaps(ns).Update(t.Context(), ignored, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"app-secret", "db-secret"} {
		createSecret(t, c, ns, name, map[string]string{"k": "v1"})
	}

	uses := fixtures.UsingTemplate([]string{"app-config", "matched-config", "ignored-config"}, []string{"app-secret"})
	workloads := map[string]map[string]string{
		"auto":     {confighash.ReloaderAuto: "true"},
		"typed":    {confighash.ReloaderConfigMapAuto: "true"},
		"named":    {confighash.ReloaderConfigMapReload: "feature-flags-[0-9]+", confighash.ReloaderSecretReload: "db-secret"},
		"exclude":  {confighash.ReloaderAuto: "true", confighash.ReloaderConfigMapExclude: "app-config"},
		"search":   {confighash.ReloaderSearch: "true"},
		"opts-out": {confighash.ReloaderAuto: "false", confighash.AnnotationInject: "true"},
	}
	rollouts := map[string]int{}
	for name, annotations := range workloads {
		createDeployment(t, c, ns, fixtures.AnnotatedDeployment(name, annotations, uses))
		rollouts[name] = 1
	}
	expectRollouts(t, c, ns, rollouts)

	changes := []struct {
		source confighash.SourceRef
		rolls  []string
	}{
		// auto and typed auto use it; exclude excludes it; named only names others;
		// search wants a match; the opted-out workload is not opted in.
		{confighash.SourceRef{Kind: confighash.ConfigMap, Name: "app-config"}, []string{"auto", "typed"}},
		// typed auto is for ConfigMaps only.
		{confighash.SourceRef{Kind: confighash.Secret, Name: "app-secret"}, []string{"auto", "exclude"}},
		// The named regular expression matches whole names only: not unrelated-flags.
		{confighash.SourceRef{Kind: confighash.ConfigMap, Name: "feature-flags-2"}, []string{"named"}},
		{confighash.SourceRef{Kind: confighash.ConfigMap, Name: "unrelated-flags"}, nil},
		{confighash.SourceRef{Kind: confighash.Secret, Name: "db-secret"}, []string{"named"}},
		// Used and matched: search rolls, and so do those that use it.
		{confighash.SourceRef{Kind: confighash.ConfigMap, Name: "matched-config"}, []string{"auto", "exclude", "search", "typed"}},
		// Ignored: used by all, counted by none.
		{confighash.SourceRef{Kind: confighash.ConfigMap, Name: "ignored-config"}, nil},
	}
	for _, change := range changes {
		setKey(t, c, ns, change.source, "k", "v2")
		for _, name := range change.rolls {
			rollouts[name]++
		}
		t.Logf("%s changed: rolling %v", change.source, change.rolls)
		expectRollouts(t, c, ns, rollouts)
	}
}

// TestReloaderPausePeriodRollsChangesMadeDuringItOnce: after a rollout, changes made
// within the pause period are held and roll the workload once, when it ends. The
// workload says until when; a watcher restarted meanwhile holds them as long.
func TestReloaderPausePeriodRollsChangesMadeDuringItOnce(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	w := startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "app-config", map[string]string{"k": "v0"})
	const pause = 12 * time.Second
	createDeployment(t, c, ns, fixtures.AnnotatedDeployment("web", map[string]string{
		confighash.ReloaderAuto: "true", confighash.ReloaderPausePeriod: pause.String(),
	}, fixtures.EnvFromTemplate("app-config")))
	expectRollouts(t, c, ns, map[string]int{"web": 1})

	ref := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "app-config"}
	setKey(t, c, ns, ref, "k", "v1")
	waitFor(t, 30*time.Second, "the first change to roll", func() bool { return replicaSets(t, c, ns, "web") == 2 })
	touched := time.Now()
	if s := statusOf(t, c, ns, "web"); s.Act != confighash.ActRolled || s.Until.Before(touched.Add(pause-3*time.Second)) || s.Until.After(touched.Add(pause)) {
		t.Fatalf("web says %+v; want rolled, paused until about %v from now", s, pause)
	}
	w.stop(t)
	startWatcher(t, c)
	setKey(t, c, ns, ref, "k", "v2")
	time.Sleep(time.Second)
	setKey(t, c, ns, ref, "k", "v3")
	time.Sleep(pause / 2)
	if got := replicaSets(t, c, ns, "web"); got != 2 {
		t.Fatalf("%d ReplicaSets %v after the touch, want 2: the pause period holds the changes", got, time.Since(touched).Round(time.Second))
	}
	waitFor(t, 30*time.Second, "the held changes to roll", func() bool { return replicaSets(t, c, ns, "web") >= 3 })
	// touched was taken once the first rollout was seen, a little after the touch.
	if held := time.Since(touched); held < pause-2*time.Second {
		t.Fatalf("the held changes rolled %v after the touch, before the pause period of %v ended", held.Round(time.Second), pause)
	}
	expectRollouts(t, c, ns, map[string]int{"web": 3})
}

// TestNamespaceLabelledAllOptsEveryWorkloadIn: Reloader's --auto-reload-all, per
// namespace. A workload without annotations is hashed at its creation and rolls once
// per change; one that opts out is left alone.
func TestNamespaceLabelledAllOptsEveryWorkloadIn(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	startWatcher(t, c)
	ns := namespace(t, c, map[string]string{confighash.InjectionLabel: confighash.InjectionEvery})
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	createDeployment(t, c, ns, fixtures.AnnotatedDeployment("plain", nil, fixtures.EnvFromTemplate("cfg")))
	createDeployment(t, c, ns, fixtures.AnnotatedDeployment("out", map[string]string{confighash.ReloaderAuto: "false"}, fixtures.EnvFromTemplate("cfg")))
	expectRollouts(t, c, ns, map[string]int{"plain": 1, "out": 1})
	if templateHash(t, c, ns, "plain") == "" || templateHash(t, c, ns, "out") != "" {
		t.Fatalf("hashes at creation: plain %q, out %q; want plain hashed, out not", templateHash(t, c, ns, "plain"), templateHash(t, c, ns, "out"))
	}
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	expectRollouts(t, c, ns, map[string]int{"plain": 2, "out": 1})
}

// TestNamespaceLabelledAllLaterActsOnEveryWorkload: in a namespace that opts workloads
// in one by one, the watcher keeps only the key of the others; labelled all, it reads
// them again, adopts the running ones without a rollout, and the next change rolls
// each once.
func TestNamespaceLabelledAllLaterActsOnEveryWorkload(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	w := startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	afterTheSecond()
	createDeployment(t, c, ns, fixtures.AnnotatedDeployment("opted", map[string]string{confighash.AnnotationInject: "true"}, fixtures.EnvFromTemplate("cfg")))
	createDeployment(t, c, ns, fixtures.AnnotatedDeployment("plain", nil, fixtures.EnvFromTemplate("cfg")))
	expectRollouts(t, c, ns, map[string]int{"opted": 1, "plain": 1})
	relists := w.metric(t, "confighash_watcher_workload_relists_total")

	labelNamespace(t, c, ns, confighash.InjectionEvery)
	waitFor(t, 30*time.Second, "plain to be adopted", func() bool { return recorded(t, c, ns, "plain") })
	expectRollouts(t, c, ns, map[string]int{"opted": 1, "plain": 1})
	if got := w.metric(t, "confighash_watcher_workload_relists_total"); got <= relists {
		t.Fatalf("workload relists %v, as many as before the label (%v): plain was not kept as its key", got, relists)
	}
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	expectRollouts(t, c, ns, map[string]int{"opted": 2, "plain": 2})
}

// TestPauseDeploymentsPausesAsReloaderDoes: with --pause-deployments, the change that
// rolls a Deployment with a pause period pauses it (spec.paused and Reloader's
// paused-at), so that nothing rolls yet; a change within the period is written into its
// pod template; a watcher started in the meantime resumes it when the period ends, and
// it rolls once, with the latest data. One resumed by hand rolls then, and is left
// alone.
func TestPauseDeploymentsPausesAsReloaderDoes(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	w := startWatcher(t, c, "--pause-deployments")
	ns := labeledNamespace(t, c)
	const pause = 12 * time.Second
	for _, name := range []string{"web", "manual"} {
		createConfigMap(t, c, ns, name, map[string]string{"k": "v0"})
		createDeployment(t, c, ns, fixtures.AnnotatedDeployment(name, map[string]string{
			confighash.ReloaderAuto: "true", confighash.ReloaderPausePeriod: pause.String(),
		}, fixtures.EnvFromTemplate(name)))
	}
	expectRollouts(t, c, ns, map[string]int{"web": 1, "manual": 1})
	get := func(name string) *appsv1.Deployment {
		t.Helper()
		d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	pausedByThePeriod := func(d *appsv1.Deployment) bool {
		_, err := time.Parse(time.RFC3339, d.Annotations[confighash.ReloaderPausedAt])
		return d.Spec.Paused && err == nil
	}

	changed := time.Now()
	for _, name := range []string{"web", "manual"} {
		setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: name}, "k", "v1")
	}
	for _, name := range []string{"web", "manual"} {
		waitFor(t, 30*time.Second, name+" to be paused with its new hash", func() bool {
			d := get(name)
			return pausedByThePeriod(d) && d.Spec.Template.Annotations[confighash.AnnotationHash] != ""
		})
	}
	first := templateHash(t, c, ns, "web")
	if _, err := c.Client.AppsV1().Deployments(ns).Patch(t.Context(), "manual", types.MergePatchType, []byte(`{"spec":{"paused":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	expectReplicaSetsNoWait(t, c, ns, "manual", 2)
	if n := replicaSets(t, c, ns, "web"); n != 1 {
		t.Fatalf("web has %d ReplicaSets while paused, want 1", n)
	}

	w.stop(t)
	w = startWatcher(t, c, "--pause-deployments")
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "web"}, "k", "v2")
	waitFor(t, 30*time.Second, "the second change to be written into web's paused template", func() bool {
		return templateHash(t, c, ns, "web") != first
	})
	if n := replicaSets(t, c, ns, "web"); n != 1 || !pausedByThePeriod(get("web")) {
		t.Fatalf("web has %d ReplicaSets, paused %v, within its pause period; want 1, paused", n, pausedByThePeriod(get("web")))
	}
	waitFor(t, pause+30*time.Second, "web to be resumed", func() bool { return replicaSets(t, c, ns, "web") == 2 })
	if held := time.Since(changed); held < pause-time.Second {
		t.Fatalf("web rolled %v after the change, before its pause period of %v ended", held.Round(time.Second), pause)
	}
	if d := get("web"); d.Spec.Paused || d.Annotations[confighash.ReloaderPausedAt] != "" {
		t.Fatalf("web after its pause period: paused %v, paused-at %q; want resumed, unmarked", d.Spec.Paused, d.Annotations[confighash.ReloaderPausedAt])
	}
	waitQuiet(t, w)
	expectRollouts(t, c, ns, map[string]int{"web": 2, "manual": 2})
	if get("manual").Spec.Paused {
		t.Fatal("manual, resumed by hand, was paused again without a change")
	}
}
