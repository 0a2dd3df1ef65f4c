package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/alert"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
	"github.com/confighash/confighash/tests/rollouts"
)

// pacedApps creates n Deployments of one pod that use ConfigMap "shared", each rolling
// one pod at a time and giving up after deadline, and waits until all have rolled out.
func pacedApps(t *testing.T, c *cluster.Cluster, ns string, n int, deadline int32) []string {
	t.Helper()
	return pacedAppsWith(t, c, ns, n, deadline, func(*corev1.PodSpec) {})
}

// pacedAppsWith is pacedApps, with the pod spec changed by spec.
func pacedAppsWith(t *testing.T, c *cluster.Cluster, ns string, n int, deadline int32, spec func(*corev1.PodSpec)) []string {
	t.Helper()
	createConfigMap(t, c, ns, "shared", map[string]string{"k": "v0"})
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("app-%02d", i)
		d := fixtures.AnnotatedDeployment(names[i], map[string]string{confighash.AnnotationInject: "true"}, fixtures.EnvFromTemplate("shared"))
		d.Spec.Template.Labels = map[string]string{"app": names[i]}
		d.Spec.Selector.MatchLabels = map[string]string{"app": names[i]}
		one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
		d.Spec.Replicas = ptrInt32(1)
		spec(&d.Spec.Template.Spec)
		d.Spec.ProgressDeadlineSeconds = ptrInt32(deadline)
		d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &one, MaxUnavailable: &zero}}
		createDeployment(t, c, ns, d)
	}
	waitFor(t, 2*time.Minute, "every Deployment to roll out", func() bool { return rolledOutCount(t, c, ns) == n })
	return names
}

func ptrInt32(v int32) *int32 { return &v }

// noMorePods caps the namespace's pods at the n it runs, and waits until the cap is
// counted: a rollout's new pods cannot start, as a crash-looping image would never
// become ready, and it passes its progress deadline.
func noMorePods(t *testing.T, c *cluster.Cluster, ns string, n int) *corev1.ResourceQuota {
	t.Helper()
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-more-pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse(fmt.Sprint(n))}}}
	if _, err := c.Client.CoreV1().ResourceQuotas(ns).Create(t.Context(), quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the quota to be counted", func() bool {
		q, err := c.Client.CoreV1().ResourceQuotas(ns).Get(t.Context(), quota.Name, metav1.GetOptions{})
		return err == nil && q.Status.Used.Pods().Value() == int64(n)
	})
	return quota
}

// rolledOutCount counts the namespace's Deployments whose every pod runs the latest
// template and is available.
func rolledOutCount(t testing.TB, c *cluster.Cluster, ns string) int {
	list, err := c.Client.AppsV1().Deployments(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range list.Items {
		s := d.Status
		if s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == *d.Spec.Replicas && s.Replicas == s.UpdatedReplicas && s.AvailableReplicas == s.UpdatedReplicas {
			n++
		}
	}
	return n
}

// sampleRolling samples rollouts.Rolling, summed over the namespaces, every 100 ms
// until stop is called, which returns the most seen at once.
func sampleRolling(t *testing.T, c *cluster.Cluster, namespaces ...string) (stop func() int) {
	var most atomic.Int64
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			sum := 0
			for _, ns := range namespaces {
				n, err := rollouts.Rolling(ctx, c.Client, ns)
				if err != nil {
					sum = 0
					break
				}
				sum += n
			}
			if int64(sum) > most.Load() {
				most.Store(int64(sum))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return func() int { cancel(); <-done; return int(most.Load()) }
}

// annotated returns the names of the namespace's Deployments that carry the annotation.
func annotated(t testing.TB, c *cluster.Cluster, ns, annotation string) []string {
	list, err := c.Client.AppsV1().Deployments(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range list.Items {
		if _, ok := d.Annotations[annotation]; ok {
			out = append(out, d.Name)
		}
	}
	return out
}

// TestWavesRollAFewAtATimeAndHaltOnAFailure: 20 Deployments use one ConfigMap, in
// waves of 5. A good change rolls each once, never more than 5 at a time; a bad one
// whose first wave cannot roll out halts with 15 held, through a restart of the
// watcher, and one alert names the failed; the fix rolls every one once more.
func TestWavesRollAFewAtATimeAndHaltOnAFailure(t *testing.T) {
	c := isolatedCluster(t) // among the longest: the own lane evens the lanes
	const n, size = 20, 5
	sink := newAlertSink(t, 0)
	startWebhook(t, c, fmt.Sprintf("--wave-size=%d", size))
	args := append([]string{fmt.Sprintf("--wave-size=%d", size)}, alertArgs(sink.URL)...)
	w := startWatcher(t, c, args...)
	ns := labeledNamespace(t, c)
	names := pacedApps(t, c, ns, n, 5)
	ctx := t.Context()

	// A good change: each rolls once, at most 5 at a time.
	stop := sampleRolling(t, c, ns)
	start := time.Now()
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}, "k", "v1")
	waitFor(t, 5*time.Minute, "every Deployment to roll once", func() bool {
		r := replicaSetsPerApp(t, c, ns)
		return !slices.ContainsFunc(names, func(name string) bool { return r[name] < 2 }) && rolledOutCount(t, c, ns) == n
	})
	took := time.Since(start)
	if most := stop(); most > size || most == 0 {
		t.Fatalf("%d Deployments rolled at once; want at most %d (and some)", most, size)
	}
	for name, got := range replicaSetsPerApp(t, c, ns) {
		if got != 2 {
			t.Errorf("%s rolled %d times for one change, want once", name, got-1)
		}
	}
	t.Logf("a good change rolled %d Deployments in waves of %d in %v", n, size, took.Round(100*time.Millisecond))

	// A bad change: the first wave cannot start its pods (a quota, as a crash-looping
	// image would never become ready) and passes its progress deadline.
	quota := noMorePods(t, c, ns, n)
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}, "k", "bad")
	defer func() {
		if t.Failed() {
			describeDeployments(t, c, ns)
		}
	}()
	waitFor(t, 2*time.Minute, "the wave to halt", func() bool {
		return len(annotated(t, c, ns, confighash.AnnotationHeld)) == n-size && len(annotated(t, c, ns, confighash.AnnotationFailed)) == size
	})
	failed := annotated(t, c, ns, confighash.AnnotationFailed)
	if !slices.Equal(failed, names[:size]) {
		t.Fatalf("failed: %v; want the first wave, %v", failed, names[:size])
	}

	// Held through a restart of the watcher: nothing more rolls.
	w.stop(t)
	startWatcher(t, c, args...)
	time.Sleep(2 * quietPeriod)
	r := replicaSetsPerApp(t, c, ns)
	for i, name := range names {
		if want := map[bool]int{true: 3, false: 2}[i < size]; r[name] != want {
			t.Errorf("%s has %d ReplicaSets while the wave is halted, want %d", name, r[name], want)
		}
	}
	if held := annotated(t, c, ns, confighash.AnnotationHeld); len(held) != n-size {
		t.Errorf("%d Deployments held after the restart, want %d", len(held), n-size)
	}
	if t.Failed() {
		t.FailNow()
	}
	waitFor(t, 30*time.Second, "the alert", func() bool {
		return slices.ContainsFunc(sink.received(), func(a alert.Alert) bool { return a.What == alert.Halted })
	})
	var halts []alert.Alert
	for _, a := range sink.received() {
		if a.What == alert.Halted {
			halts = append(halts, a)
		}
	}
	if len(halts) != 1 || len(halts[0].Workloads) != size || len(halts[0].Sources) != 1 || halts[0].Sources[0].Name != "shared" {
		for _, a := range halts {
			t.Logf("halt alert: %s %v %v: %s", a.Namespace, a.Sources, a.Workloads, a.Reason)
		}
		t.Fatalf("%d halt alerts; want one naming ConfigMap shared and the %d failed", len(halts), size)
	}

	// explain says why each stands where it does.
	out, stderr, status := explain(t, c, "deployment/app-10", "-n", ns, fmt.Sprintf("--wave-size=%d", size))
	if status != 0 || len(out) != 1 || out[0].Verdict != confighash.VerdictHeld || !strings.Contains(out[0].Why, "halted") {
		t.Fatalf("explain a held one: status %d, %+v, %s", status, out, stderr)
	}
	if out, _, _ := explain(t, c, "deployment/app-00", "-n", ns); len(out) != 1 || out[0].Failed == "" {
		t.Fatalf("explain a failed one: %+v; want its failure shown", out)
	}

	// Resumed by hand, a held one rolls, fails as its wave did, and halts it again.
	resume := exec.Command(confighashBinary(t), "resume", "deployment/app-05", "-n", ns, "--kubeconfig", c.Kubeconfig)
	if b, err := resume.CombinedOutput(); err != nil || !strings.Contains(string(b), "resumed Deployment/app-05") {
		t.Fatalf("confighash resume: %v: %s", err, b)
	}
	waitFor(t, time.Minute, "the resumed one to fail and halt again", func() bool {
		return len(annotated(t, c, ns, confighash.AnnotationFailed)) == size+1
	})
	failedCount := size + 1 // app-05 now counts among the failed, the first six

	// The fix: every one rolls once more, the failed ones first.
	if err := c.Client.CoreV1().ResourceQuotas(ns).Delete(ctx, quota.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Without the quota, the failed ones finish the rollouts they had started, by
	// themselves; then the fix.
	waitFor(t, time.Minute, "the stalled rollouts to finish", func() bool { return rolledOutCount(t, c, ns) == n })
	stop = sampleRolling(t, c, ns)
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}, "k", "fixed")
	waitFor(t, 5*time.Minute, "every Deployment to roll once more", func() bool {
		r := replicaSetsPerApp(t, c, ns)
		return !slices.ContainsFunc(names, func(name string) bool {
			return r[name] < map[bool]int{true: 4, false: 3}[slices.Index(names, name) < failedCount]
		}) &&
			rolledOutCount(t, c, ns) == n
	})
	if most := stop(); most > size {
		t.Errorf("%d Deployments rolled at once after the fix; want at most %d", most, size)
	}
	time.Sleep(quietPeriod)
	r = replicaSetsPerApp(t, c, ns)
	for i, name := range names {
		if want := map[bool]int{true: 4, false: 3}[i < failedCount]; r[name] != want {
			t.Errorf("%s has %d ReplicaSets after the fix, want %d", name, r[name], want)
		}
	}
	if held := annotated(t, c, ns, confighash.AnnotationHeld); len(held) != 0 {
		t.Errorf("still held after the fix: %v", held)
	}
}

// TestAWaveHaltsOnPodsThatCannotStart: 6 Deployments in waves of 2, whose progress
// deadline is far off; the first wave's new pods crash-loop. The wave halts on the
// pods, long before any deadline: 2 failed, 4 held, and the Event says why.
func TestAWaveHaltsOnPodsThatCannotStart(t *testing.T) {
	c := sharedCluster(t)
	const n, size = 6, 2
	startWebhook(t, c, fmt.Sprintf("--wave-size=%d", size))
	startWatcher(t, c, fmt.Sprintf("--wave-size=%d", size))
	ns := labeledNamespace(t, c)
	names := pacedApps(t, c, ns, n, 600)
	ctx := t.Context()
	// New pods are available only a minute after they are ready: time for the test,
	// as the kubelet would, to report that they crash-loop.
	old := map[string]bool{}
	for _, name := range names {
		d, err := c.Client.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"minReadySeconds":60}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		old[d.Spec.Template.Annotations[confighash.AnnotationHash]] = true
	}

	start := time.Now()
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}, "k", "crashes")
	defer func() {
		if t.Failed() {
			describeDeployments(t, c, ns)
		}
	}()
	waitFor(t, time.Minute, "the wave to halt on its pods", func() bool {
		crashNewPods(t, c, ns, old)
		return len(annotated(t, c, ns, confighash.AnnotationHeld)) == n-size && len(annotated(t, c, ns, confighash.AnnotationFailed)) == size
	})
	t.Logf("halted %v after the change", time.Since(start).Round(100*time.Millisecond))
	if failed := annotated(t, c, ns, confighash.AnnotationFailed); !slices.Equal(failed, names[:size]) {
		t.Fatalf("failed: %v; want the first wave, %v", failed, names[:size])
	}
	events, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=RolloutFailed"})
	if err != nil || len(events.Items) == 0 || !strings.Contains(events.Items[0].Message, "CrashLoopBackOff") {
		t.Fatalf("RolloutFailed Events %v (%v); want one that says CrashLoopBackOff", events, err)
	}
	t.Logf("Event: %s", events.Items[0].Message)
	if r := replicaSetsPerApp(t, c, ns); slices.ContainsFunc(names[size:], func(name string) bool { return r[name] != 1 }) {
		t.Fatalf("ReplicaSets %v: a held one rolled", r)
	}
}

// crashNewPods reports, as a kubelet would, that every pod of the namespace whose
// template hash is not one of old crash-loops.
func crashNewPods(t testing.TB, c *cluster.Cluster, ns string, old map[string]bool) {
	pods, err := c.Client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		if old[p.Annotations[confighash.AnnotationHash]] || len(p.Status.ContainerStatuses) == 0 ||
			p.Status.ContainerStatuses[0].State.Waiting != nil {
			continue
		}
		for i := range p.Status.ContainerStatuses {
			s := &p.Status.ContainerStatuses[i]
			s.Ready, s.RestartCount = false, 3
			s.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 40s restarting failed container"}}
		}
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodReady || p.Status.Conditions[i].Type == corev1.ContainersReady {
				p.Status.Conditions[i].Status = corev1.ConditionFalse
			}
		}
		_, _ = c.Client.CoreV1().Pods(ns).UpdateStatus(t.Context(), &p, metav1.UpdateOptions{}) // a conflict is retried by the next call
	}
}

// TestMaxRollingCapsWavesAcrossNamespaces: the same change in two namespaces of 6
// users each, in waves of 3, with at most 4 rolling across the cluster: never more
// than 4 roll at once, and each rolls once.
func TestMaxRollingCapsWavesAcrossNamespaces(t *testing.T) {
	c := sharedCluster(t)
	const n, size, most = 6, 3, 4
	startWebhook(t, c, fmt.Sprintf("--wave-size=%d", size))
	startWatcher(t, c, fmt.Sprintf("--wave-size=%d", size), fmt.Sprintf("--max-rolling=%d", most))
	namespaces := []string{labeledNamespace(t, c), labeledNamespace(t, c)}
	for _, ns := range namespaces {
		pacedApps(t, c, ns, n, 30)
	}

	stop := sampleRolling(t, c, namespaces...)
	start := time.Now()
	for _, ns := range namespaces {
		setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}, "k", "v1")
	}
	for _, ns := range namespaces {
		waitFor(t, 2*time.Minute, "every Deployment of "+ns+" to roll once", func() bool {
			r := replicaSetsPerApp(t, c, ns)
			return len(r) == n && !slices.ContainsFunc(slices.Collect(maps.Values(r)), func(k int) bool { return k < 2 }) && rolledOutCount(t, c, ns) == n
		})
	}
	took := time.Since(start)
	if got := stop(); got > most || got < size {
		t.Fatalf("%d Deployments rolled at once across the namespaces; want at most %d, and a whole wave", got, most)
	}
	time.Sleep(quietPeriod)
	for _, ns := range namespaces {
		for name, got := range replicaSetsPerApp(t, c, ns) {
			if got != 2 {
				t.Errorf("%s/%s rolled %d times for one change, want once", ns, name, got-1)
			}
		}
	}
	t.Logf("%d Deployments in 2 namespaces rolled in waves of %d, at most %d at once, in %v", 2*n, size, most, took.Round(100*time.Millisecond))
}

// TestARolloutWindowHoldsAChangeUntilItOpens: in a namespace whose rollout window
// opens in a minute, a change rolls nothing, not even when a Deployment is written
// meanwhile or the watcher restarts; when the window opens, each user rolls once, and
// a change within it rolls at once. The namespace's other settings have typos: each is
// ignored on its own, with a Warning Event on the Namespace, and the window stands.
// Each Deployment says on itself that it is held, and until when, then that it rolled.
func TestARolloutWindowHoldsAChangeUntilItOpens(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	w := startWatcher(t, c)
	ns := labeledNamespace(t, c)
	ctx := t.Context()

	createConfigMap(t, c, ns, "shared", map[string]string{"k": "v0"})
	names := []string{"web", "api", "worker"}
	for _, name := range names {
		createDeployment(t, c, ns, fixtures.AnnotatedDeployment(name, map[string]string{confighash.AnnotationInject: "true"}, fixtures.EnvFromTemplate("shared")))
	}
	expectRollouts(t, c, ns, map[string]int{"web": 1, "api": 1, "worker": 1})

	// A one-minute window starting at a minute boundary at least 25 s away: time for
	// the checks below, a restart of the watcher among them, on a busy machine.
	now := time.Now().UTC()
	opens := now.Truncate(time.Minute).Add(time.Minute)
	if opens.Sub(now) < 25*time.Second {
		opens = opens.Add(time.Minute)
	}
	window := fmt.Sprintf("daily %s-%s UTC", opens.Format("15:04"), opens.Add(time.Minute).Format("15:04"))
	mergeNamespaceAnnotations(t, c, ns, map[string]*string{confighash.AnnotationRolloutWindow: &window,
		confighash.AnnotationWaveSize: ptrTo("five"), confighash.Domain + "/rollout-windows": ptrTo("daily 00:00-00:01 UTC")})
	mergeNamespaceLabels(t, c, ns, map[string]*string{confighash.AnnotationPin: ptrTo("yes")})
	time.Sleep(time.Second) // for both components' namespace informers, which take milliseconds

	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}, "k", "v1")
	waitFor(t, 10*time.Second, "the change to be held", func() bool {
		return w.metric(t, `confighash_watcher_held_workloads{reason="window"}`) == float64(len(names))
	})
	// A write of a Deployment meanwhile keeps its hash: only the watcher releases it.
	mergeAnnotations(t, c, ns, "Deployment", "web", map[string]*string{"example.com/note": ptrTo("written while held")})
	w.stop(t)
	w = startWatcher(t, c)
	time.Sleep(quietPeriod)
	if time.Now().After(opens) {
		t.Fatalf("the window opened before the checks: the machine is too slow for this test")
	}
	if r := replicaSetsPerApp(t, c, ns); r["web"] != 1 || r["api"] != 1 || r["worker"] != 1 {
		t.Fatalf("rolled while the window was closed: %v ReplicaSets", r)
	}
	events, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Held"})
	if err != nil || len(events.Items) == 0 {
		t.Fatalf("no Held Event (%v)", err)
	}
	t.Logf("Event: %s", events.Items[0].Message)
	bad := warningOn(t, c, ns, "Namespace", ns, "BadSetting")
	for _, want := range []string{`wave size "five"`, `pin "yes"`, "did you mean " + confighash.AnnotationRolloutWindow + "?"} {
		if !strings.Contains(bad, want) {
			t.Errorf("the Namespace's Warning Event %q does not say %q", bad, want)
		}
	}
	// explain says it as the admission warning does: the one value ignored, the rest
	// standing (the window holds the change).
	if e := explainOne(t, c, ns, "deployment/web"); e.Verdict != confighash.VerdictHeld || !slices.ContainsFunc(e.Problems, func(p string) bool {
		return strings.Contains(p, "ignored, the rest stands") && strings.Contains(p, `wave size "five"`)
	}) {
		t.Errorf("explain web: %s, problems %q; want held, the wave size ignored and the rest standing", e.Verdict, e.Problems)
	}
	for _, name := range names {
		if s := statusOf(t, c, ns, name); s.Act != confighash.ActHeld || !s.Until.Equal(opens) || !strings.Contains(s.Why, "outside its rollout window") {
			t.Errorf("%s says %+v; want held until %s, outside its rollout window", name, s, opens)
		}
	}

	waitFor(t, time.Until(opens)+30*time.Second, "the window to open and the change to roll", func() bool {
		r := replicaSetsPerApp(t, c, ns)
		return r["web"] == 2 && r["api"] == 2 && r["worker"] == 2
	})
	if early := time.Until(opens); early > 0 {
		t.Fatalf("rolled %v before the window opened", early)
	}
	t.Logf("rolled %v after the window opened", time.Since(opens).Round(100*time.Millisecond))
	expectRollouts(t, c, ns, map[string]int{"web": 2, "api": 2, "worker": 2})
	for _, name := range names {
		if s := statusOf(t, c, ns, name); s.Act != confighash.ActRolled || !strings.Contains(s.Why, "ConfigMap/shared@") {
			t.Errorf("%s says %+v; want rolled for ConfigMap/shared", name, s)
		}
	}

	// Within the window, a change rolls at once.
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}, "k", "v2")
	waitFor(t, 30*time.Second, "a change within the window to roll", func() bool {
		r := replicaSetsPerApp(t, c, ns)
		return r["web"] == 3 && r["api"] == 3 && r["worker"] == 3
	})
	if closed := time.Since(opens.Add(time.Minute)); closed > 0 {
		t.Fatalf("rolled %v after the window closed: the machine is too slow for this test", closed)
	}
	expectRollouts(t, c, ns, map[string]int{"web": 3, "api": 3, "worker": 3})
}

// mergeNamespaceLabels patches labels of a namespace: a nil value removes one.
func mergeNamespaceLabels(t testing.TB, c *cluster.Cluster, ns string, labels map[string]*string) {
	t.Helper()
	mergeNamespaceMetadata(t, c, ns, "labels", labels)
}

// statusOf reads what the watcher says on the Deployment (confighash.AnnotationStatus).
func statusOf(t testing.TB, c *cluster.Cluster, ns, name string) confighash.Status {
	t.Helper()
	d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := confighash.ParseStatus(d.Annotations[confighash.AnnotationStatus])
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s
}

// warningOn waits for the Warning Event of that reason on the object, in ns, and
// returns its message.
func warningOn(t testing.TB, c *cluster.Cluster, ns, kind, name, reason string) string {
	t.Helper()
	var msg string
	waitFor(t, 10*time.Second, fmt.Sprintf("a %s Event on %s %s", reason, kind, name), func() bool {
		list, err := c.Client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{
			FieldSelector: fmt.Sprintf("reason=%s,involvedObject.kind=%s,involvedObject.name=%s,type=Warning", reason, kind, name)})
		if err != nil || len(list.Items) == 0 {
			return false
		}
		msg = list.Items[0].Message
		return true
	})
	t.Logf("%s on %s %s: %s", reason, kind, name, msg)
	return msg
}

// mergeNamespaceAnnotations patches annotations of a namespace: a nil value removes one.
func mergeNamespaceAnnotations(t testing.TB, c *cluster.Cluster, ns string, annotations map[string]*string) {
	t.Helper()
	mergeNamespaceMetadata(t, c, ns, "annotations", annotations)
}

func mergeNamespaceMetadata(t testing.TB, c *cluster.Cluster, ns, field string, values map[string]*string) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{field: values}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Namespaces().Patch(t.Context(), ns, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// describeDeployments logs where each Deployment of the namespace stands.
func describeDeployments(t testing.TB, c *cluster.Cluster, ns string) {
	list, err := c.Client.AppsV1().Deployments(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return
	}
	r := replicaSetsPerApp(t, c, ns)
	for _, d := range list.Items {
		var conds []string
		for _, c := range d.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
		}
		t.Logf("%s: %d ReplicaSets, generation %d/%d, updated %d available %d, %v, held %q, failed %q, release %.12s, hash %.12s", d.Name, r[d.Name],
			d.Status.ObservedGeneration, d.Generation, d.Status.UpdatedReplicas, d.Status.AvailableReplicas, conds,
			d.Annotations[confighash.AnnotationHeld], d.Annotations[confighash.AnnotationFailed], d.Annotations[confighash.AnnotationRelease], d.Spec.Template.Annotations[confighash.AnnotationHash])
	}
}
