package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/alert"
	"github.com/confighash/confighash/tests/cluster"
)

// TestTheCanaryBakesAndACrashDuringItsBakeReverts: 4 pinned Deployments use a
// ConfigMap with a canary of one, a bake and on-failure revert. A good change rolls the
// first alone; a new leader, started while it bakes, and a write of one that waits keep
// the bake; the other 3 roll once it has ended, each once. A bad change rolls the first alone again; its pod
// restarts while it bakes, with the watcher down: the next leader reverts it, the other
// 3 are held, and a write of one rolls nothing; one reverted alert. The fix then rolls
// each once. Rollouts are counted in ReplicaSets: a rollback reuses the
// old one.
func TestTheCanaryBakesAndACrashDuringItsBakeReverts(t *testing.T) {
	c := sharedCluster(t)
	const n = 4
	const bake = 20 * time.Second
	sink := newAlertSink(t, 0)
	flags := []string{"--pin-by-default"}
	startWebhook(t, c, flags...)
	w := startWatcher(t, c, append(append(slices.Clone(flags), fastLease...), alertArgs(sink.URL)...)...)
	ns := labeledNamespace(t, c)
	names := pacedApps(t, c, ns, n, 5)
	ctx := t.Context()
	shared := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}
	annotateConfigMap(t, c, ns, shared.Name, map[string]string{
		confighash.AnnotationCanary: "1", confighash.AnnotationBake: bake.String(), confighash.AnnotationOnFailure: "revert"})
	waitQuiet(t, w) // the settings are read before the change they are for
	defer func() {
		if t.Failed() {
			describeDeployments(t, c, ns)
		}
	}()
	want := map[string]int{}
	for _, name := range names {
		want[name] = 1
	}
	rolled := func(name string) {
		want[name]++
	}
	bakingOf := func(name string) confighash.Baking {
		b, _ := deploymentBaking(t, c, ns, name)
		return b
	}

	// A good change: the canary rolls alone and bakes; a new leader keeps its bake.
	setKey(t, c, ns, shared, "k", "good")
	rolled(names[0])
	waitFor(t, 2*time.Minute, "the canary baking", func() bool { return !bakingOf(names[0]).Since.IsZero() })
	until := bakingOf(names[0]).Until()
	w.kill()
	w = startWatcher(t, c, append(append(slices.Clone(flags), fastLease...), alertArgs(sink.URL)...)...)
	if out, stderr, status := explain(t, c, "deployment/"+names[0], "-n", ns, flags[0]); status != 0 || len(out) != 1 || !strings.Contains(out[0].Why, "the canary: baking until") {
		t.Errorf("explain the canary: status %d, %+v, %s; want it baking, and until when", status, out, stderr)
	}
	if out, stderr, status := explain(t, c, "deployment/"+names[2], "-n", ns, flags[0]); status != 0 || len(out) != 1 || out[0].Verdict != confighash.VerdictHeld ||
		!strings.Contains(out[0].Why, "of the 4 users of ConfigMap/shared, by kind and name, it is number 3, in wave 2") {
		t.Errorf("explain one that waits: status %d, %+v, %s; want it held, number 3 of 4, in wave 2", status, out, stderr)
	}
	// A write of a workload that waits for the bake rolls nothing: the hold is on it.
	annotate := func(name, value string) {
		t.Helper()
		p := fmt.Appendf(nil, `{"metadata":{"annotations":{"team":%q}}}`, value)
		if _, err := c.Client.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, p, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	annotate(names[1], "payments")
	waitQuiet(t, w)
	if got := replicaSetsPerApp(t, c, ns); !maps.Equal(got, want) {
		t.Fatalf("ReplicaSets while the canary bakes, one of the rest written %v, want %v: the canary alone", got, want)
	}
	for _, name := range names[1:] {
		rolled(name)
	}
	waitFor(t, 2*time.Minute, fmt.Sprintf("ReplicaSets %v once the bake ended", want), func() bool {
		return maps.Equal(replicaSetsPerApp(t, c, ns), want) && rolledOutCount(t, c, ns) == n
	})
	for _, name := range names[1:] {
		if first := firstReplicaSetSince(t, c, ns, name, until.Add(-bake)); first.Before(until) {
			t.Errorf("%s rolled at %v, before the canary's bake ended at %v", name, first, until)
		}
	}
	t.Logf("a good change: the canary baked until %v; the rest rolled after it", until.Format(time.TimeOnly))

	// A bad change: the canary's container restarts while it bakes.
	setKey(t, c, ns, shared, "k", "bad")
	rolled(names[0])
	waitFor(t, 2*time.Minute, "the canary baking the bad change", func() bool {
		b := bakingOf(names[0])
		return !b.Since.IsZero() && b.Change.ResourceVersion != "" && maps.Equal(replicaSetsPerApp(t, c, ns), want)
	})
	// The watcher is killed as the canary's container exits: the new leader, which never
	// saw the bake start, reverts it once.
	time.Sleep(5 * time.Second) // into the bake
	w.kill()
	crashed := crashPodOf(t, c, ns, names[0])
	w = startWatcher(t, c, append(append(slices.Clone(flags), fastLease...), alertArgs(sink.URL)...)...)
	waitFor(t, time.Minute, "the canary reverted, the rest held", func() bool {
		return slices.Equal(annotated(t, c, ns, confighash.AnnotationReverted), names[:1]) && len(annotated(t, c, ns, confighash.AnnotationHeld)) == n-1
	})
	t.Logf("a restart %v into the bake, the watcher killed: reverted %v after it by the next leader", crashed.Sub(bakingOf(names[0]).Since).Round(time.Second), time.Since(crashed).Round(100*time.Millisecond))
	annotate(names[1], "checkout") // held by the halt: a write of it rolls nothing
	waitQuiet(t, w)
	if got := replicaSetsPerApp(t, c, ns); !maps.Equal(got, want) {
		t.Errorf("ReplicaSets after the revert, one held written %v, want %v: the canary reuses its old one, the rest untouched", got, want)
	}
	waitFor(t, 30*time.Second, "the reverted alert", func() bool {
		return slices.ContainsFunc(sink.received(), func(a alert.Alert) bool { return a.What == alert.Reverted })
	})

	// The fix: canary first, then the rest, each once.
	setKey(t, c, ns, shared, "k", "fixed")
	for _, name := range names {
		rolled(name)
	}
	waitFor(t, 3*time.Minute, fmt.Sprintf("ReplicaSets %v after the fix", want), func() bool {
		return maps.Equal(replicaSetsPerApp(t, c, ns), want) && rolledOutCount(t, c, ns) == n
	})
	waitQuiet(t, w)
	if got := replicaSetsPerApp(t, c, ns); !maps.Equal(got, want) {
		t.Errorf("ReplicaSets after the fix %v, want %v: each rolled once", got, want)
	}
	var reverted int
	for _, a := range sink.received() {
		if a.What == alert.Reverted {
			reverted++
		}
	}
	if reverted != 1 {
		t.Errorf("%d reverted alerts, want 1", reverted)
	}
}

// firstReplicaSetSince is when the first ReplicaSet of the Deployment made after a time
// was made.
func firstReplicaSetSince(t *testing.T, c *cluster.Cluster, ns, name string, after time.Time) time.Time {
	t.Helper()
	list, err := c.Client.AppsV1().ReplicaSets(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var first time.Time
	for _, rs := range list.Items {
		if at := rs.CreationTimestamp.Time; !at.Before(after) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}

// crashPodOf plays a container of the Deployment's latest pod that exits and is
// restarted, as its kubelet would report it, and returns when.
func crashPodOf(t *testing.T, c *cluster.Cluster, ns, name string) time.Time {
	t.Helper()
	ctx := t.Context()
	d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Annotations[confighash.AnnotationHash] != d.Spec.Template.Annotations[confighash.AnnotationHash] || p.DeletionTimestamp != nil || len(p.Status.ContainerStatuses) == 0 {
			continue
		}
		now := metav1.Now()
		cs := &p.Status.ContainerStatuses[0]
		cs.RestartCount++
		cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", StartedAt: now, FinishedAt: now}}
		if _, err := c.Client.CoreV1().Pods(ns).UpdateStatus(ctx, &p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return now.Time
	}
	t.Fatalf("%s has no running pod of its latest template", name)
	return time.Time{}
}

// annotateConfigMap writes the annotations on the namespace's ConfigMap, as kubectl
// annotate does.
func annotateConfigMap(t *testing.T, c *cluster.Cluster, ns, name string, annotations map[string]string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().ConfigMaps(ns).Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// deploymentBaking reads the Deployment's baking marker, and whether it names the
// template it runs.
func deploymentBaking(t *testing.T, c *cluster.Cluster, ns, name string) (confighash.Baking, bool) {
	t.Helper()
	d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := confighash.ParseBaking(d.Annotations[confighash.AnnotationBaking])
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b, b.Hash == d.Spec.Template.Annotations[confighash.AnnotationHash]
}
