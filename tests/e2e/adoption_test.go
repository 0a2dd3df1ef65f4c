package e2e

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// TestTurningOnRollsNothingCurrent: 100 running Deployments opted in (half with
// Reloader's annotation, installed over Reloader), their namespace labelled: none
// rolls, but the one whose ConfigMap was written after its last rollout. Then one
// change rolls each once.
func TestTurningOnRollsNothingCurrent(t *testing.T) {
	c := isolatedCluster(t) // among the longest: the own lane evens the lanes
	startWebhook(t, c)
	w := startWatcher(t, c)
	ns := namespace(t, c, nil)
	createConfigMap(t, c, ns, "shared", map[string]string{"k": "0"})
	createConfigMap(t, c, ns, "late", map[string]string{"k": "0"})
	afterTheSecond()
	const n = 100 // the benchmarks adopt thousands; here, what rolls and what does not
	want := map[string]int{}
	for i := range n {
		name := fmt.Sprintf("web-%d", i)
		d := fixtures.Deployment(name, 0, fixtures.EnvFromTemplate("shared"))
		if i%2 == 1 {
			d.Annotations = map[string]string{confighash.ReloaderAuto: "true"}
		}
		createDeployment(t, c, ns, d)
		want[name] = 1
	}
	createDeployment(t, c, ns, fixtures.Deployment("stale", 0, fixtures.EnvFromTemplate("late")))
	for name := range want {
		expectReplicaSetsNoWait(t, c, ns, name, 1)
	}
	expectReplicaSetsNoWait(t, c, ns, "stale", 1)
	// Written after stale's ReplicaSet was created: its pods may have the old data.
	afterTheSecond()
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "late"}, "k", "1")

	enableNamespace(t, c, ns)
	want["stale"] = 2
	waitFor(t, 60*time.Second, "every Deployment to be recorded", func() bool {
		for name := range want {
			if !recorded(t, c, ns, name) {
				return false
			}
		}
		return true
	})
	expectRollouts(t, c, ns, want)
	if got := w.metric(t, `confighash_watcher_touches_total{result="adopted"}`); got != n {
		t.Fatalf("adopted = %v, want %d", got, n)
	}
	// Kept as their keys while the namespace was off, the Deployments were read again.
	if got := w.metric(t, "confighash_watcher_workload_relists_total"); got < 1 {
		t.Fatalf("workload relists = %v, want at least 1", got)
	}
	for i := range n {
		if h := templateHash(t, c, ns, fmt.Sprintf("web-%d", i)); h != "" {
			t.Fatalf("web-%d's pod template was hashed (%s) when adopted", i, h)
		}
	}

	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}, "k", "1")
	for name := range want {
		if name != "stale" {
			want[name]++
		}
	}
	// The controller-manager makes 101 ReplicaSets at its 20 requests a second: on a
	// loaded machine, longer than expectRollouts waits for the first.
	waitAllRolled(t, c, ns, want, 2*time.Minute)
	expectRollouts(t, c, ns, want)
}

// waitAllRolled waits until each Deployment has its wanted ReplicaSets, with one list
// per look.
func waitAllRolled(t *testing.T, c *cluster.Cluster, ns string, want map[string]int, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	waitFor(t, timeout, fmt.Sprintf("%d Deployments to roll", len(want)), func() bool {
		got := replicaSetsPerApp(t, c, ns)
		for name, n := range want {
			if got[name] < n {
				return false
			}
		}
		return true
	})
	t.Logf("%d Deployments rolled in %v", len(want), time.Since(start).Round(time.Millisecond))
}

// TestOptingInARunningDeploymentRollsNothing: an annotation added to a running,
// current Deployment adopts it, and it says so; the next change rolls it once.
func TestOptingInARunningDeploymentRollsNothing(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	afterTheSecond()
	createDeployment(t, c, ns, fixtures.AnnotatedDeployment("web", nil, fixtures.EnvFromTemplate("cfg")))
	expectRollouts(t, c, ns, map[string]int{"web": 1})

	d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Annotations = map[string]string{confighash.ReloaderAuto: "true"}
	if _, err := c.Client.AppsV1().Deployments(ns).Update(t.Context(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the Deployment to be adopted", func() bool { return recorded(t, c, ns, "web") })
	expectRollouts(t, c, ns, map[string]int{"web": 1})
	if s := statusOf(t, c, ns, "web"); s.Act != confighash.ActAdopted {
		t.Errorf("web says %+v, want adopted", s)
	}
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	expectRollouts(t, c, ns, map[string]int{"web": 2})
	if s := statusOf(t, c, ns, "web"); s.Act != confighash.ActRolled || !strings.Contains(s.Why, "ConfigMap/cfg@") {
		t.Errorf("web says %+v, want rolled for ConfigMap/cfg", s)
	}
}

// TestTurningOnAdoptsStatefulSetsAndDaemonSets: the same for the kinds that keep
// revisions in ControllerRevisions.
func TestTurningOnAdoptsStatefulSetsAndDaemonSets(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	startWatcher(t, c)
	ns := namespace(t, c, nil)
	ctx := t.Context()
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	createConfigMap(t, c, ns, "late", map[string]string{"k": "0"})
	afterTheSecond()
	for name, source := range map[string]string{"db": "cfg", "stale-db": "late"} {
		if _, err := c.Client.AppsV1().StatefulSets(ns).Create(ctx, fixtures.StatefulSet(name, fixtures.EnvFromTemplate(source)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, source := range map[string]string{"agent": "cfg", "stale-agent": "late"} {
		if _, err := c.Client.AppsV1().DaemonSets(ns).Create(ctx, fixtures.DaemonSet(name, fixtures.EnvFromTemplate(source)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	revisions := func() map[string]int {
		out := map[string]int{}
		for _, app := range []string{"db", "stale-db", "agent", "stale-agent"} {
			out[app] = controllerRevisions(t, c, ns, app)
		}
		return out
	}
	expect := func(want map[string]int) {
		t.Helper()
		waitFor(t, 30*time.Second, fmt.Sprintf("revisions %v", want), func() bool { return maps.Equal(revisions(), want) })
		time.Sleep(quietPeriod)
		if got := revisions(); !maps.Equal(got, want) {
			t.Fatalf("revisions %v, want %v", got, want)
		}
	}
	expect(map[string]int{"db": 1, "stale-db": 1, "agent": 1, "stale-agent": 1})
	afterTheSecond()
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "late"}, "k", "1")

	enableNamespace(t, c, ns)
	expect(map[string]int{"db": 1, "stale-db": 2, "agent": 1, "stale-agent": 2})
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	expect(map[string]int{"db": 2, "stale-db": 2, "agent": 2, "stale-agent": 2})
}
