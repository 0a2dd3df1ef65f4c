package e2e

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/alert"
	"github.com/confighash/confighash/tests/fixtures"
)

// TestAFailedChangeRevertsThePinnedWorkloadsOfItsFirstWave: 6 pinned Deployments use
// a ConfigMap that asks a failed rollout to revert (confighash.dev/on-failure), in
// waves of 2. A bad change's first wave cannot roll out: both are rolled back to the
// revision they ran before, with its snapshots, by no one but the watcher; the other 4
// are held and untouched; one alert says reverted, none halted; a new leader changes
// nothing of it. The fix then rolls each of the 6 once. Rollouts are counted in ReplicaSets: a rollback reuses the old one.
func TestAFailedChangeRevertsThePinnedWorkloadsOfItsFirstWave(t *testing.T) {
	c := sharedCluster(t)
	const n, size = 6, 2
	sink := newAlertSink(t, 0)
	pacing := []string{fmt.Sprintf("--wave-size=%d", size), "--pin-by-default"}
	startWebhook(t, c, pacing...)
	flags := append(slices.Clone(pacing), fastLease...)
	w := startWatcher(t, c, append(flags, alertArgs(sink.URL)...)...)
	ns := labeledNamespace(t, c)
	names := pacedApps(t, c, ns, n, 5)
	ctx := t.Context()
	shared := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}
	annotateConfigMap(t, c, ns, shared.Name, map[string]string{confighash.AnnotationOnFailure: "revert"})
	waitQuiet(t, w) // the setting is read before the change it is for
	pinnedOf := func(name string) string {
		d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d.Spec.Template.Annotations[confighash.AnnotationPinned]
	}
	before := map[string]string{}
	for _, name := range names {
		if before[name] = pinnedOf(name); before[name] == "" {
			t.Fatalf("%s is not pinned", name)
		}
	}

	// A bad change: the first wave cannot start its pods (a quota, as a crash-looping
	// image would never become ready) and passes its progress deadline.
	quota := noMorePods(t, c, ns, n)
	defer func() {
		if t.Failed() {
			describeDeployments(t, c, ns)
		}
	}()
	setKey(t, c, ns, shared, "k", "bad")
	changed := time.Now()
	waitFor(t, 3*time.Minute, "the first wave reverted, the rest held", func() bool {
		return len(annotated(t, c, ns, confighash.AnnotationReverted)) == size && len(annotated(t, c, ns, confighash.AnnotationHeld)) == n-size
	})
	reverted := annotated(t, c, ns, confighash.AnnotationReverted)
	if !slices.Equal(reverted, names[:size]) {
		t.Fatalf("reverted: %v; want the first wave, %v", reverted, names[:size])
	}
	waitFor(t, time.Minute, "the reverted ones back on their snapshots, rolled out", func() bool {
		return !slices.ContainsFunc(reverted, func(name string) bool { return pinnedOf(name) != before[name] }) && rolledOutCount(t, c, ns) == n
	})
	t.Logf("a bad change: the first wave reverted to its snapshots and rolled out %v after the change (a progress deadline of 5 s)", time.Since(changed).Round(100*time.Millisecond))
	if out, stderr, status := explain(t, c, "deployment/"+reverted[0], "-n", ns, pacing[0], pacing[1]); status != 0 || len(out) != 1 ||
		out[0].Verdict != confighash.VerdictUpToDate || !strings.Contains(out[0].Why, "reverted it from ConfigMap/shared@") {
		t.Errorf("explain a reverted one: status %d, %+v, %s; want up to date, reverted from the change", status, out, stderr)
	}

	// Nothing more rolls: each reverted one has its first ReplicaSet again and the bad
	// one; each held one, its first alone.
	time.Sleep(2 * quietPeriod)
	want := map[string]int{}
	for i, name := range names {
		want[name] = map[bool]int{true: 2, false: 1}[i < size]
	}
	if got := replicaSetsPerApp(t, c, ns); !maps.Equal(got, want) {
		t.Errorf("ReplicaSets after the revert %v, want %v", got, want)
	}
	waitFor(t, 30*time.Second, "the alert", func() bool {
		return slices.ContainsFunc(sink.received(), func(a alert.Alert) bool { return a.What == alert.Reverted })
	})
	var revertAlerts, haltAlerts int
	for _, a := range sink.received() {
		switch a.What {
		case alert.Reverted:
			revertAlerts++
			if len(a.Workloads) != size {
				t.Errorf("the reverted alert names %v, want the %d reverted", a.Workloads, size)
			}
		case alert.Halted:
			haltAlerts++
		}
	}
	if revertAlerts != 1 || haltAlerts != 0 {
		t.Errorf("%d reverted alerts and %d halted; want one reverted, none halted", revertAlerts, haltAlerts)
	}
	if n := w.metric(t, "confighash_watcher_reverts_total"); n != size {
		t.Errorf("confighash_watcher_reverts_total = %v, want %d", n, size)
	}

	// A new leader neither reverts again nor rolls the change forward.
	w.kill()
	w = startWatcher(t, c, append(flags, alertArgs(sink.URL)...)...)
	time.Sleep(2 * quietPeriod)
	if got := replicaSetsPerApp(t, c, ns); !maps.Equal(got, want) {
		t.Errorf("ReplicaSets under a new leader %v, want %v", got, want)
	}

	// The fix: each of the 6 rolls once.
	if err := c.Client.CoreV1().ResourceQuotas(ns).Delete(ctx, quota.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	setKey(t, c, ns, shared, "k", "fixed")
	for name := range want {
		want[name]++
	}
	waitFor(t, 3*time.Minute, fmt.Sprintf("ReplicaSets %v after the fix", want), func() bool {
		return maps.Equal(replicaSetsPerApp(t, c, ns), want) && rolledOutCount(t, c, ns) == n
	})
	waitQuiet(t, w)
	if got := replicaSetsPerApp(t, c, ns); !maps.Equal(got, want) {
		t.Errorf("ReplicaSets after the fix %v, want %v: each rolled once", got, want)
	}
	if held := annotated(t, c, ns, confighash.AnnotationHeld); len(held) != 0 {
		t.Errorf("still held after the fix: %v", held)
	}
}

// TestAFailedChangeRevertsAPinnedDaemonSet: 3 pinned DaemonSets use a ConfigMap that
// rolls in waves of 1 and reverts a failed change. A bad change's first cannot start its
// new pod: it is rolled back to its revision before, from its ControllerRevision, the
// other 2 held; the fix rolls each once. Rollouts are counted in the DaemonSets'
// revision numbers, which a rollback moves too.
func TestAFailedChangeRevertsAPinnedDaemonSet(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	w := startWatcher(t, c, "--wave-timeout=20s")
	ns := labeledNamespace(t, c)
	ctx := t.Context()
	cm := createConfigMap(t, c, ns, "shared", map[string]string{"k": "v0"})
	annotateConfigMap(t, c, ns, cm.Name, map[string]string{confighash.AnnotationWaveSize: "1", confighash.AnnotationOnFailure: "revert"})
	names := []string{"agent-0", "agent-1", "agent-2"}
	for _, name := range names {
		d := fixtures.DaemonSet(name, fixtures.EnvFromTemplate(cm.Name))
		d.Annotations = map[string]string{confighash.AnnotationPin: "true"}
		one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
		d.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxSurge: &one, MaxUnavailable: &zero}}
		if _, err := c.Client.AppsV1().DaemonSets(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	daemonSets := func() map[string]appsv1.DaemonSet {
		list, err := c.Client.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]appsv1.DaemonSet{}
		for _, d := range list.Items {
			out[d.Name] = d
		}
		return out
	}
	rolledOut := func() bool {
		for _, d := range daemonSets() {
			if d.Status.ObservedGeneration < d.Generation || d.Status.DesiredNumberScheduled == 0 || d.Status.UpdatedNumberScheduled < d.Status.DesiredNumberScheduled ||
				d.Status.NumberAvailable < d.Status.DesiredNumberScheduled {
				return false
			}
		}
		return true
	}
	revisions := func() map[string]int64 {
		list, err := c.Client.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, r := range list.Items {
			out[r.Labels["app"]] = max(out[r.Labels["app"]], r.Revision)
		}
		return out
	}
	marked := func(annotation string) []string {
		var out []string
		for name, d := range daemonSets() {
			if d.Annotations[annotation] != "" {
				out = append(out, name)
			}
		}
		slices.Sort(out)
		return out
	}
	waitFor(t, 2*time.Minute, "the DaemonSets rolled out", rolledOut)
	waitQuiet(t, w)
	before := map[string]string{}
	for name, d := range daemonSets() {
		before[name] = d.Spec.Template.Annotations[confighash.AnnotationPinned]
	}
	want := map[string]int64{"agent-0": 1, "agent-1": 1, "agent-2": 1}
	if got := revisions(); !maps.Equal(got, want) {
		t.Fatalf("revisions %v before the change, want %v", got, want)
	}

	quota := noMorePods(t, c, ns, len(names))
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: cm.Name}, "k", "bad")
	waitFor(t, 2*time.Minute, "the first reverted, the rest held", func() bool {
		return slices.Equal(marked(confighash.AnnotationReverted), names[:1]) && slices.Equal(marked(confighash.AnnotationHeld), names[1:])
	})
	if got := daemonSets()["agent-0"].Spec.Template.Annotations[confighash.AnnotationPinned]; got != before["agent-0"] {
		t.Errorf("agent-0 reverted to the snapshots %q, want those it ran before, %q", got, before["agent-0"])
	}
	waitFor(t, time.Minute, "the reverted one rolled out", rolledOut)
	waitQuiet(t, w)
	want["agent-0"] = 3 // forward, and back
	if got := revisions(); !maps.Equal(got, want) {
		t.Errorf("revisions %v after the revert, want %v", got, want)
	}

	if err := c.Client.CoreV1().ResourceQuotas(ns).Delete(ctx, quota.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: cm.Name}, "k", "fixed")
	for name := range want {
		want[name]++
	}
	waitFor(t, 2*time.Minute, fmt.Sprintf("revisions %v after the fix", want), func() bool { return maps.Equal(revisions(), want) && rolledOut() })
	waitQuiet(t, w)
	if got := revisions(); !maps.Equal(got, want) {
		t.Errorf("revisions %v after the fix, want %v: each rolled once", got, want)
	}
}
