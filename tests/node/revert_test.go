package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/alert"
	"github.com/confighash/confighash/tests/cluster"
)

// badChangesRevertThemselves: 6 pinned Deployments of the demo app read a ConfigMap
// that rolls in waves of 2 and reverts a failed change. The watcher, as installed, is
// given a real Prometheus and an alert sink. Each bad change below rolls back what it
// reached with no one's help, the rest untouched, and each fix then rolls all 6 once;
// rollouts are counted in the Deployments' revisions:
//   - the key the pods need removed: the first wave's new pods cannot start;
//   - a crash 30 s after the pods are Ready, caught by a 1-minute bake of a canary of 1;
//   - an error ratio that a Prometheus scraping the pods sees past the bake's gate.
func badChangesRevertThemselves(t *testing.T, env *Env) {
	ctx, cancel := context.WithTimeout(t.Context(), 12*time.Minute)
	defer cancel()
	c := env.Cluster.Client
	sink := newNodeAlertSink(t, env)
	prom := startNodePrometheus(t, env)
	watchWith(ctx, t, env, "--prometheus-url="+prom, `--analysis-query=error-ratio=max(demo_error_ratio{namespace="$namespace",deployment="$workload"})`,
		"--alert-on-reload", "--alert-sink=webhook", "--alert-webhook-url="+sink.url)

	ns, err := env.Cluster.CreateNamespace(ctx, "revert", map[string]string{confighash.InjectionLabel: confighash.InjectionEnabled})
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "shared", Annotations: map[string]string{
		confighash.AnnotationWaveSize: "2", confighash.AnnotationOnFailure: "revert",
	}}, Data: map[string]string{"message": "r1"}}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 6)
	for i := range names {
		names[i] = fmt.Sprintf("d%d", i)
		if _, err := c.AppsV1().Deployments(ns).Create(ctx, pinnedWeb(names[i]), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitServed(ctx, t, env, ns, names, "r1")
	// readRevisions reads each Deployment's revision; a poll retries what it cannot read.
	readRevisions := func(ctx context.Context) (map[string]int, error) {
		out := map[string]int{}
		for _, name := range names {
			d, err := c.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			out[name], _ = strconv.Atoi(d.Annotations["deployment.kubernetes.io/revision"])
		}
		return out, nil
	}
	revisions := func() map[string]int {
		out, err := readRevisions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	patch := func(p string) {
		t.Helper()
		if _, err := c.CoreV1().ConfigMaps(ns).Patch(ctx, "shared", types.MergePatchType, []byte(p), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// reverted waits until the first of the wave, failed, are rolled back and serve was
	// again, the rest untouched, and counts the rollouts: forward and back for those
	// reverted, none for the rest.
	reverted := func(step string, first int, was string, before map[string]int, failedAt func() time.Time) {
		t.Helper()
		want := maps.Clone(before)
		for _, name := range names[:first] {
			want[name] += 2
		}
		// Its own deadline, well within the step's, so that a revert that does not come
		// is told with the state it left.
		err := wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(context.Context) (bool, error) {
			got, err := readRevisions(ctx)
			return err == nil && maps.Equal(got, want) && slices.Equal(annotatedWith(ctx, t, env, ns, confighash.AnnotationReverted), names[:first]), nil
		})
		if err != nil {
			t.Fatalf("%s: revisions %v, want %v; reverted %v, want %v\n%s", step, revisions(), want, annotatedWith(ctx, t, env, ns, confighash.AnnotationReverted), names[:first], env.describe(ctx, ns))
		}
		waitServed(ctx, t, env, ns, names, was)
		t.Logf("figures: %s: the old page served by all again %s after it failed", step, time.Since(failedAt()).Round(100*time.Millisecond))
		time.Sleep(10 * time.Second) // the rest would have rolled by now
		if got := revisions(); !maps.Equal(got, want) {
			t.Errorf("%s: revisions %v, want %v: the rest untouched", step, got, want)
		}
	}
	fixed := func(step, message string) {
		t.Helper()
		want := revisions()
		for _, name := range names {
			want[name]++
		}
		waitServed(ctx, t, env, ns, names, message)
		time.Sleep(5 * time.Second)
		if got := revisions(); !maps.Equal(got, want) {
			t.Errorf("%s: revisions %v, want %v: each rolled once", step, got, want)
		}
	}

	// The key the pods need removed.
	before := revisions()
	patch(`{"data":{"message":null}}`)
	reverted("the key removed", 2, "r1", before, func() time.Time { return firstFailure(ctx, t, env, ns) })
	if n := sink.count(alert.Reverted); n != 1 {
		t.Errorf("the key removed: %d reverted alerts, want 1", n)
	}
	patch(`{"data":{"message":"r2"}}`)
	fixed("the fix of the key", "r2")

	// A crash 30 s after the pods are Ready, caught by a 1-minute bake.
	patch(fmt.Sprintf(`{"metadata":{"annotations":{%q:"1",%q:"1m"}}}`, confighash.AnnotationCanary, confighash.AnnotationBake))
	before = revisions()
	patch(`{"data":{"message":"r3","crash-after":"30s"}}`)
	reverted("a crash 30 s into the bake", 1, "r2", before, func() time.Time { return crashOf(ctx, t, env, ns, names[0]) })
	// The fix comes with a shorter bake, gated on the error ratio a real Prometheus
	// scrapes from the pods: 0, which holds.
	patch(fmt.Sprintf(`{"metadata":{"annotations":{%q:"20s",%q:"error-ratio < 0.1"}},"data":{"message":"r4","crash-after":null}}`,
		confighash.AnnotationBake, confighash.AnnotationAnalysis))
	fixed("the fix of the crash, after a 20-second bake its gate passed", "r4")

	// An error ratio the gate sees past its threshold while the canary bakes.
	before = revisions()
	patch(`{"data":{"message":"r5","error-ratio":"0.5"}}`)
	reverted("an error ratio past the gate", 1, "r4", before, func() time.Time { return bakeOf(ctx, t, env, ns, names[0]) })
	patch(`{"data":{"message":"r6","error-ratio":null}}`)
	fixed("the fix of the error ratio", "r6")
	if n := sink.count(alert.Reverted); n != 3 {
		t.Errorf("%d reverted alerts, want 3: one per bad change", n)
	}
}

// pinnedWeb is the demo app as a pinned Deployment of one pod, labelled app=name, whose
// MESSAGE is the ConfigMap shared's message, and whose CRASH_AFTER and ERROR_RATIO, when
// it has them, its crash-after and error-ratio.
func pinnedWeb(name string) *appsv1.Deployment {
	d := DemoDeployment()
	labels := map[string]string{"app": name, "group": "revert"}
	d.Name = name
	d.Annotations[confighash.AnnotationPin] = "true"
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
	d.Spec.Template.Labels = labels
	d.Spec.ProgressDeadlineSeconds = ptr.To[int32](60)
	ctr := &d.Spec.Template.Spec.Containers[0]
	ctr.Env[0].ValueFrom.ConfigMapKeyRef.Name = "shared"
	for env, key := range map[string]string{"CRASH_AFTER": "crash-after", "ERROR_RATIO": "error-ratio"} {
		ctr.Env = append(ctr.Env, corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "shared"}, Key: key, Optional: ptr.To(true)}}})
	}
	return d
}

// waitServed waits until each Deployment has rolled out and its pods serve want.
func waitServed(ctx context.Context, t *testing.T, env *Env, ns string, names []string, want string) {
	t.Helper()
	// Its own deadline, well within the step's, so that the failure is told with the
	// state it left.
	err := wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := env.Cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "group=revert"})
		if err != nil {
			return false, nil
		}
		serving := map[string]bool{}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp != nil {
				continue
			}
			if got, _ := Get(ctx, "http://"+p.Status.PodIP+":8080/"); !podReady(p) || got != want {
				return false, nil
			}
			serving[p.Labels["app"]] = true
		}
		return len(serving) == len(names), nil
	})
	if err != nil {
		t.Fatalf("the Deployments do not all serve %q: %v\n%s", want, err, env.describe(ctx, ns))
	}
}

// annotatedWith returns the names of the namespace's Deployments that carry the
// annotation, sorted.
func annotatedWith(ctx context.Context, t *testing.T, env *Env, ns, annotation string) []string {
	t.Helper()
	list, err := env.Cluster.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range list.Items {
		if d.Annotations[annotation] != "" {
			out = append(out, d.Name)
		}
	}
	slices.Sort(out)
	return out
}

// firstFailure is when the first pod of the namespace that could not start was made.
func firstFailure(ctx context.Context, t *testing.T, env *Env, ns string) time.Time {
	t.Helper()
	events, err := env.Cluster.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Failed"})
	if err != nil {
		t.Fatal(err)
	}
	var first time.Time
	for _, e := range events.Items {
		if at := e.FirstTimestamp.Time; first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first
}

// crashOf is when the crash that failed the Deployment's bake was seen, as the
// watcher's Reverted Event on it says from the pod's status: its container restarted,
// or, first, its pod lost its readiness.
func crashOf(ctx context.Context, t *testing.T, env *Env, ns, name string) time.Time {
	t.Helper()
	events, err := env.Cluster.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Reverted,involvedObject.name=" + name})
	if err != nil || len(events.Items) == 0 {
		t.Fatalf("no Reverted Event on %s (%v)", name, err)
	}
	for _, e := range events.Items {
		for _, said := range []string{"restarted at ", "lost its readiness at "} {
			// A time in UTC, as the watcher writes it: 2026-11-29T12:54:46Z.
			if _, after, ok := strings.Cut(e.Message, said); ok && len(after) >= len(time.RFC3339)-5 {
				if at, err := time.Parse(time.RFC3339, after[:len(time.RFC3339)-5]); err == nil {
					return at
				}
			}
		}
	}
	t.Fatalf("no Reverted Event on %s names a restart or a readiness lost: %v", name, events.Items)
	return time.Time{}
}

// bakeOf is when the Deployment's bake of its latest change started: when its ratio
// was first served to Prometheus, as good as the failure's time.
func bakeOf(ctx context.Context, t *testing.T, env *Env, ns, name string) time.Time {
	t.Helper()
	events, err := env.Cluster.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Baking,involvedObject.name=" + name})
	if err != nil || len(events.Items) == 0 {
		t.Fatalf("no Baking Event on %s (%v)", name, err)
	}
	latest := events.Items[0].LastTimestamp.Time
	for _, e := range events.Items {
		if e.LastTimestamp.After(latest) {
			latest = e.LastTimestamp.Time
		}
	}
	return latest
}

// watchWith adds arguments to the installed watcher's container and waits for its
// rollout.
func watchWith(ctx context.Context, t *testing.T, env *Env, args ...string) {
	t.Helper()
	var ops []map[string]any
	for _, a := range args {
		ops = append(ops, map[string]any{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": a})
	}
	body, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Cluster.Client.AppsV1().Deployments(InstallNamespace).Patch(ctx, "confighash-watcher", types.JSONPatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := env.Cluster.Kubectl(ctx, nil, "-n", InstallNamespace, "rollout", "status", "deployment/confighash-watcher", "--timeout=3m"); err != nil {
		t.Fatalf("the watcher's rollout: %v: %s\n%s", err, out, env.describe(ctx, InstallNamespace))
	}
}

// nodeAlertSink is a real HTTP server on the host's end of the node network, where the
// watcher's pods reach it, standing for a chat's webhook.
type nodeAlertSink struct {
	url    string
	mu     sync.Mutex
	alerts []alert.Alert
}

func newNodeAlertSink(t *testing.T, env *Env) *nodeAlertSink {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(env.network.HostIP.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	s := &nodeAlertSink{url: "http://" + l.Addr().String() + "/hooks"}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a alert.Alert
		if body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20)); err == nil && json.Unmarshal(body, &a) == nil {
			s.mu.Lock()
			s.alerts = append(s.alerts, a)
			s.mu.Unlock()
		}
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

func (s *nodeAlertSink) count(what alert.What) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.alerts {
		if a.What == what {
			n++
		}
	}
	return n
}

// startNodePrometheus starts a real Prometheus on the host's end of the node network,
// where the watcher's pods reach it, scraping every second the demo pods of the
// namespaces the test makes: their addresses, namespace and Deployment come from an
// HTTP service discovery the test serves from the API server's pods. It returns its
// URL; the test's end stops it, by its pid.
func startNodePrometheus(t *testing.T, env *Env) string {
	t.Helper()
	sd, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sdSrv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pods, err := env.Cluster.Client.CoreV1().Pods("").List(r.Context(), metav1.ListOptions{LabelSelector: "group=revert"})
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		type group struct {
			Targets []string          `json:"targets"`
			Labels  map[string]string `json:"labels"`
		}
		groups := []group{}
		for _, p := range pods.Items {
			if p.Status.PodIP != "" && p.DeletionTimestamp == nil {
				groups = append(groups, group{[]string{p.Status.PodIP + ":8080"}, map[string]string{"namespace": p.Namespace, "deployment": p.Labels["app"]}})
			}
		}
		w.Header().Set("Content-Type", "application/json") // Prometheus takes no other
		_ = json.NewEncoder(w).Encode(groups)
	})}
	go func() { _ = sdSrv.Serve(sd) }()
	t.Cleanup(func() { _ = sdSrv.Close() })

	config := fmt.Sprintf("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: demo\n    http_sd_configs:\n      - url: http://%s/\n        refresh_interval: 1s\n", sd.Addr())
	proc, url, err := cluster.StartPrometheus(t.Context(), t.TempDir(), env.network.HostIP.String(), config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus log:\n%s", proc.LogTail(20))
		}
		_ = proc.Stop()
	})
	return url
}
