package e2e

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
	"github.com/confighash/confighash/tests/rollouts"
)

func TestEachUsedSourceChangeRollsOnce(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createEverySource(t, c, ns)
	createDeployment(t, c, ns, fixtures.Deployment("web", 1, fixtures.EveryUseTemplate(nil)))
	expectReplicaSets(t, c, ns, "web", 1)

	// Every reference path, ConfigMaps and Secrets: the used key of each source.
	used := []struct {
		ref confighash.SourceRef
		key string
	}{
		{confighash.SourceRef{Kind: confighash.ConfigMap, Name: "init-config"}, "x"},
		{confighash.SourceRef{Kind: confighash.ConfigMap, Name: "app-config"}, "greeting"},
		{confighash.SourceRef{Kind: confighash.Secret, Name: "app-secret"}, "password"},
		{confighash.SourceRef{Kind: confighash.ConfigMap, Name: "env-config"}, "E"},
		{confighash.SourceRef{Kind: confighash.Secret, Name: "env-secret"}, "S"},
		{confighash.SourceRef{Kind: confighash.ConfigMap, Name: "files-config"}, "a.conf"},
		{confighash.SourceRef{Kind: confighash.Secret, Name: "tls-secret"}, "tls.crt"},
		{confighash.SourceRef{Kind: confighash.ConfigMap, Name: "projected-config"}, "p"},
		{confighash.SourceRef{Kind: confighash.Secret, Name: "projected-secret"}, "token"},
	}
	seen := map[string]bool{templateHash(t, c, ns, "web"): true}
	for i, u := range used {
		setKey(t, c, ns, u.ref, u.key, "v2")
		expectReplicaSets(t, c, ns, "web", i+2)
		h := templateHash(t, c, ns, "web")
		if seen[h] {
			t.Fatalf("after changing %s the hash %s is not new", u.ref, h)
		}
		seen[h] = true
	}
}

func TestThreeChangesRollThreeTimesWithThreeHashes(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	createDeployment(t, c, ns, fixtures.Deployment("web", 1, fixtures.EnvFromTemplate("cfg")))
	expectReplicaSets(t, c, ns, "web", 1)
	hashes := map[string]bool{templateHash(t, c, ns, "web"): true}
	for i := 1; i <= 3; i++ {
		setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", fmt.Sprint(i))
		expectReplicaSets(t, c, ns, "web", i+1)
		hashes[templateHash(t, c, ns, "web")] = true
	}
	if len(hashes) != 4 {
		t.Fatalf("%d distinct hashes over the initial one and 3 changes, want 4", len(hashes))
	}
	// One Normal Event per rollout, naming the ConfigMap (repeats are counted on one).
	waitFor(t, 10*time.Second, "3 ConfigChanged Events naming ConfigMap/cfg", func() bool {
		events, err := c.Client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=ConfigChanged,involvedObject.name=web"})
		if err != nil {
			return false
		}
		var n int32
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeNormal && strings.Contains(e.Message, "ConfigMap/cfg changed") {
				n += max(e.Count, 1)
			}
		}
		return n == 3
	})
}

func TestChangesToWhatIsNotUsedRollNothing(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	w := startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createEverySource(t, c, ns)
	createConfigMap(t, c, ns, "nobody-uses-this", map[string]string{"k": "v"})
	createDeployment(t, c, ns, fixtures.Deployment("web", 1, fixtures.EveryUseTemplate(nil)))
	expectReplicaSets(t, c, ns, "web", 1)

	// app-config is used through one key, greeting: its other keys do not count.
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "app-config"}, "unused", "changed")
	updateConfigMap(t, c, ns, "env-config", func(cm *corev1.ConfigMap) { cm.Labels = map[string]string{"team": "a"} })
	updateSecret(t, c, ns, "tls-secret", func(s *corev1.Secret) { s.Annotations = map[string]string{"note": "metadata only"} })
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "nobody-uses-this"}, "k", "changed")
	expectReplicaSets(t, c, ns, "web", 1)
	if n := w.metric(t, "confighash_watcher_touches_total"); n != 0 {
		t.Fatalf("touches = %v, want none", n)
	}
}

func TestConfigMapAndSecretChangedTogetherRollOnce(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	startWatcher(t, c, "--debounce=1s")
	ns := labeledNamespace(t, c)
	createEverySource(t, c, ns)
	createDeployment(t, c, ns, fixtures.Deployment("web", 1, fixtures.EveryUseTemplate(nil)))
	expectReplicaSets(t, c, ns, "web", 1)
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "app-config"}, "greeting", "hello")
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.Secret, Name: "app-secret"}, "password", "hunter2")
	expectReplicaSets(t, c, ns, "web", 2)
}

func TestDeletedSecretRollsOnlyWhenRecreatedWithOtherData(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createSecret(t, c, ns, "db", map[string]string{"password": "one"})
	createDeployment(t, c, ns, fixtures.Deployment("web", 1, fixtures.SecretVolumeTemplate("db")))
	expectReplicaSets(t, c, ns, "web", 1)

	if err := c.Client.CoreV1().Secrets(ns).Delete(t.Context(), "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectReplicaSets(t, c, ns, "web", 1)
	createSecret(t, c, ns, "db", map[string]string{"password": "one"})
	expectReplicaSets(t, c, ns, "web", 1)
	if err := c.Client.CoreV1().Secrets(ns).Delete(t.Context(), "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	createSecret(t, c, ns, "db", map[string]string{"password": "two"})
	expectReplicaSets(t, c, ns, "web", 2)
}

func TestPolicyAnnotations(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createEverySource(t, c, ns)
	createConfigMap(t, c, ns, "extra", map[string]string{"k": "v"})
	createConfigMap(t, c, ns, "matched", map[string]string{"k": "v"})
	updateConfigMap(t, c, ns, "matched", func(cm *corev1.ConfigMap) {
		cm.Annotations = map[string]string{confighash.AnnotationMatch: "true"}
	})

	with := func(name string, annotations map[string]string, tmpl corev1.PodTemplateSpec) {
		d := fixtures.Deployment(name, 0, tmpl)
		for k, v := range annotations {
			d.Annotations[k] = v
		}
		createDeployment(t, c, ns, d)
	}
	with("only-secrets", map[string]string{confighash.AnnotationOnly: "secrets"}, fixtures.EveryUseTemplate(nil))
	with("include", map[string]string{confighash.AnnotationIncludeConfigMaps: "extra"}, fixtures.PlainTemplate())
	with("exclude", map[string]string{confighash.AnnotationExcludeConfigMaps: "app-config"}, fixtures.EveryUseTemplate(nil))
	searchTmpl := fixtures.EveryUseTemplate(nil)
	searchTmpl.Spec.Containers[0].EnvFrom = append(searchTmpl.Spec.Containers[0].EnvFrom,
		corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "matched"}}})
	with("search", map[string]string{confighash.AnnotationSearch: "true"}, searchTmpl)
	for _, name := range []string{"only-secrets", "include", "exclude", "search"} {
		expectReplicaSets(t, c, ns, name, 1)
	}

	// A ConfigMap change: only-secrets ignores it, exclude excludes it, search
	// ignores it (no match); nobody includes app-config.
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "app-config"}, "greeting", "v2")
	// Included although the pod template does not use it.
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "extra"}, "k", "v2")
	// Matched: counts in search mode.
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "matched"}, "k", "v2")
	for name, want := range map[string]int{"only-secrets": 1, "include": 2, "exclude": 1, "search": 2} {
		expectReplicaSets(t, c, ns, name, want)
	}

	// A Secret change counts for only-secrets and exclude, not for search.
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.Secret, Name: "app-secret"}, "password", "v2")
	for name, want := range map[string]int{"only-secrets": 2, "include": 2, "exclude": 2, "search": 2} {
		expectReplicaSets(t, c, ns, name, want)
	}

	// ignore on a source stops it counting, rolling nothing: its entry stays,
	// uncounted, and its changes roll nothing.
	updateSecret(t, c, ns, "tls-secret", func(s *corev1.Secret) {
		s.Annotations = map[string]string{confighash.AnnotationIgnore: "true"}
	})
	for _, name := range []string{"only-secrets", "exclude"} {
		waitFor(t, 30*time.Second, name+" to record the ignored Secret as not counting", func() bool {
			d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
			return err == nil && recordedAs(d.Annotations[confighash.AnnotationSources], "secret/tls-secret=", ",uncounted")
		})
	}
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.Secret, Name: "tls-secret"}, "tls.crt", "v2")
	for name, want := range map[string]int{"only-secrets": 2, "exclude": 2} {
		expectReplicaSets(t, c, ns, name, want)
	}
}

func TestChangeWhileTheWatcherIsDownRollsOnceWhenItReturns(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	w := startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	createConfigMap(t, c, ns, "other", map[string]string{"k": "0"})
	createDeployment(t, c, ns, fixtures.Deployment("uses-cfg", 1, fixtures.EnvFromTemplate("cfg")))
	createDeployment(t, c, ns, fixtures.Deployment("uses-other", 1, fixtures.EnvFromTemplate("other")))
	expectReplicaSets(t, c, ns, "uses-cfg", 1)
	expectReplicaSets(t, c, ns, "uses-other", 1)

	w.stop(t)
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	w = startWatcher(t, c)
	expectReplicaSets(t, c, ns, "uses-cfg", 2)
	expectReplicaSets(t, c, ns, "uses-other", 1)
	if n := w.metric(t, "confighash_watcher_drifted_workloads"); n != 1 {
		t.Fatalf("drifted workloads at start = %v, want 1", n)
	}

	w.stop(t)
	w = startWatcher(t, c)
	expectReplicaSets(t, c, ns, "uses-cfg", 2)
	expectReplicaSets(t, c, ns, "uses-other", 1)
	if n := w.metric(t, "confighash_watcher_drifted_workloads"); n != 0 {
		t.Fatalf("drifted workloads after a restart with nothing changed = %v, want 0", n)
	}
}

func TestWatcherHealsWhatTheWebhookMissed(t *testing.T) {
	c := sharedCluster(t)
	webhook := startWebhook(t, c)
	w := startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	createDeployment(t, c, ns, fixtures.Deployment("web", 1, fixtures.EnvFromTemplate("cfg")))
	expectReplicaSets(t, c, ns, "web", 1)

	webhook.stop(t)
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	expectReplicaSets(t, c, ns, "web", 2)
	if n := w.metric(t, `confighash_watcher_touches_total{result="healed"}`); n != 1 {
		t.Fatalf("healed touches = %v, want 1", n)
	}
	waitFor(t, 10*time.Second, "a Healed Warning Event", func() bool {
		events, err := c.Client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=Healed,type=Warning"})
		return err == nil && len(events.Items) == 1
	})
}

func TestOnlyTheLeaderTouchesAndFailoverMissesNothing(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	ns := labeledNamespace(t, c)
	const n = 40
	createFanOut(t, c, ns, n)
	first := startWatcher(t, c, "--touch-rate=20")
	second := startComponent(t, c, watcherArgs("--touch-rate=20")...)
	if second.metric(t, "confighash_watcher_leader") != 0 {
		t.Fatal("two leaders")
	}

	// 40 touches at 20 per second: kill the leader in the middle of the fan-out.
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}, "k", "1")
	waitFor(t, 10*time.Second, "the fan-out to start", func() bool { return first.metric(t, "confighash_watcher_touches_total") >= 5 })
	if n := second.metric(t, "confighash_watcher_touches_total"); n != 0 {
		t.Fatalf("the standby touched %v workloads", n)
	}
	first.kill()
	waitFor(t, 15*time.Second, "the standby to lead", func() bool { return second.metric(t, "confighash_watcher_leader") == 1 })
	for i := range n {
		expectReplicaSetsNoWait(t, c, ns, fmt.Sprintf("web-%d", i), 2)
	}
	time.Sleep(quietPeriod)
	for i := range n {
		if got := replicaSets(t, c, ns, fmt.Sprintf("web-%d", i)); got != 2 {
			t.Fatalf("web-%d has %d ReplicaSets, want 2", i, got)
		}
	}
}

// createFanOut creates the ConfigMap "shared" and n Deployments web-0... that use it,
// and waits for their first ReplicaSets: the Deployment controller must have made each
// before a change, else it makes just one, from the changed template.
func createFanOut(t *testing.T, c *cluster.Cluster, ns string, n int) {
	t.Helper()
	createConfigMap(t, c, ns, "shared", map[string]string{"k": "0"})
	// Eight at a time, as a GitOps tool applies them.
	var g errgroup.Group
	g.SetLimit(8)
	for i := range n {
		g.Go(func() error {
			_, err := c.Client.AppsV1().Deployments(ns).Create(t.Context(), fixtures.Deployment(fmt.Sprintf("web-%d", i), 0, fixtures.EnvFromTemplate("shared")), metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		expectReplicaSetsNoWait(t, c, ns, fmt.Sprintf("web-%d", i), 1)
	}
}

func TestFanOutRollsEachOfTwoHundredOnce(t *testing.T) {
	c := isolatedCluster(t) // among the longest: the own lane evens the lanes
	startWebhook(t, c)
	w := startWatcher(t, c)
	ns := labeledNamespace(t, c)
	const n = 200
	createFanOut(t, c, ns, n)
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}, "k", "1")
	for i := range n {
		expectReplicaSetsNoWait(t, c, ns, fmt.Sprintf("web-%d", i), 2)
	}
	time.Sleep(quietPeriod)
	all, err := rollouts.AllReplicaSets(t.Context(), c.Client, ns)
	if err != nil {
		t.Fatal(err)
	}
	if all != 2*n {
		t.Fatalf("%d ReplicaSets for %d Deployments, want %d", all, n, 2*n)
	}
	if got := w.metric(t, `confighash_watcher_touches_total{result="converged"}`); got != n {
		t.Fatalf("converged touches = %v, want exactly one per Deployment: %d", got, n)
	}
}

func TestEveryKindRollsOnceOnAChange(t *testing.T) {
	c := sharedCluster(t)
	// The watcher watches Rollouts when their CRD is served at its start.
	installRolloutCRD(t, c)
	startWebhook(t, c)
	startWatcher(t, c)
	ns := labeledNamespace(t, c)
	ctx := t.Context()
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	tmpl := fixtures.EnvFromTemplate("cfg")
	if _, err := c.Client.AppsV1().StatefulSets(ns).Create(ctx, fixtures.StatefulSet("db", tmpl), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().DaemonSets(ns).Create(ctx, fixtures.DaemonSet("agent", tmpl), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.BatchV1().CronJobs(ns).Create(ctx, fixtures.CronJob("report", tmpl), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createRollout(t, c, ns, "canary", tmpl)
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	// StatefulSets and DaemonSets count rollouts in ControllerRevisions; a CronJob and a
	// Rollout (no controller here) in generations: a touch changes metadata only, so
	// the generation moves only when the pod template does.
	rolled := func() map[string]int64 {
		out := map[string]int64{}
		for _, app := range []string{"db", "agent"} {
			out[app] = int64(controllerRevisions(t, c, ns, app))
		}
		cj, err := c.Client.BatchV1().CronJobs(ns).Get(ctx, "report", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out["report"] = cj.Generation
		ro, err := dyn.Resource(rolloutGVR).Namespace(ns).Get(ctx, "canary", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out["canary"] = ro.GetGeneration()
		return out
	}
	all := func(n int64) map[string]int64 { return map[string]int64{"db": n, "agent": n, "report": n, "canary": n} }
	waitFor(t, 30*time.Second, "the first revisions", func() bool { return maps.Equal(rolled(), all(1)) })
	time.Sleep(quietPeriod)
	if got := rolled(); !maps.Equal(got, all(1)) {
		t.Fatalf("before any change: %v, want one rollout each", got)
	}

	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	waitFor(t, 30*time.Second, "a second rollout of each", func() bool { return maps.Equal(rolled(), all(2)) })
	time.Sleep(quietPeriod)
	if got := rolled(); !maps.Equal(got, all(2)) {
		t.Fatalf("after one change: %v, want exactly two rollouts each", got)
	}
}

func TestWatcherRestartsToWatchRolloutsInstalledAfterIt(t *testing.T) {
	c := sharedCluster(t)
	uninstallRolloutCRD(t, c)
	w := startWatcher(t, c)
	installRolloutCRD(t, c)
	// Discovery is asked every 10 seconds.
	err := w.exited(t, 30*time.Second)
	if err == nil {
		t.Fatal("the watcher exited with status 0; a restart is what makes it watch Rollouts")
	}
	if log := cluster.LogTail(w.logPath, 5); !strings.Contains(log, "restarting to watch a resource now served: rollouts.argoproj.io") {
		t.Fatalf("the watcher ended (%v) without saying why:\n%s", err, log)
	}
	// Restarted, it watches them: a Rollout rolls on a change.
	startWebhook(t, c)
	startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	createRollout(t, c, ns, "web", fixtures.EnvFromTemplate("cfg"))
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	// No Argo controller runs here: the generation counts pod template changes.
	generation := func() int64 {
		ro, err := dyn.Resource(rolloutGVR).Namespace(ns).Get(t.Context(), "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ro.GetGeneration()
	}
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	waitFor(t, 30*time.Second, "the Rollout to roll", func() bool { return generation() == 2 })
	time.Sleep(quietPeriod)
	if g := generation(); g != 2 {
		t.Fatalf("generation %d after one change, want 2", g)
	}
}
