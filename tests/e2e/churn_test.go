package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/bench"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// A tenant's create and delete loop must cost nothing that stays (rule 13, issue 52):
// every map either component keeps of a tenant's objects is pruned when they go. Each
// cycle makes, in a namespace confighash acts in, what each kept map is keyed by: a
// ConfigMap that a workload's pattern matches, the workload, its record rewritten in a
// later form, a change of the ConfigMap (the flapping breaker's entry, the later
// record's), and a pod labelled for restart in place; then deletes them.

// churnWorkers make cycles at once: enough to keep the 2-core control plane busy.
const churnWorkers = 8

// churnSample is each component's size after some cycles.
type churnSample struct {
	cycles    int
	rss, heap map[string]float64 // MiB, by component
	elapsed   time.Duration
}

// churn runs cycles in samples steps, against a watcher with the bench's flags, on a
// control plane of its own, and returns each step's sizes, the first taken before any
// cycle. Its controllers are the rollout's, and the garbage collector, which deletes
// each deleted Deployment's ReplicaSet.
func churn(tb testing.TB, cycles, samples int) []churnSample {
	tb.Helper()
	c := isolatedCluster(tb, "deployment", "replicaset", "garbagecollector")
	wh := startWebhook(tb, c, benchLogLevel, "--profiling")
	w := startBenchWatcher(tb, c, "--profiling")
	ns := labeledNamespace(tb, c)
	victim := usedConfigMap(tb, c)
	components := map[string]*component{"webhook": wh.component, "watcher": w}
	sample := func(done int, began time.Time) churnSample {
		s := churnSample{cycles: done, rss: map[string]float64{}, heap: map[string]float64{}, elapsed: time.Since(began)}
		for name, p := range components {
			s.heap[name] = p.liveHeap(tb) / (1 << 20)
			s.rss[name] = rssMiB(tb, p.cmd.Process.Pid)
		}
		return s
	}
	began := time.Now()
	out := []churnSample{sample(0, began)}
	step := cycles / samples
	for done := 0; done < cycles; done += step {
		var g errgroup.Group
		g.SetLimit(churnWorkers)
		for i := done; i < done+step; i++ {
			g.Go(func() error { return churnCycle(tb.Context(), c, ns, i%churnWorkers, i) })
		}
		if err := g.Wait(); err != nil {
			tb.Fatal(err)
		}
		out = append(out, sample(done+step, began))
	}
	// A change in another namespace still rolls its user exactly once.
	setKey(tb, c, victim, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "after the churn")
	expectReplicaSets(tb, c, victim, "web", 2)
	return out
}

// churnCycle makes and deletes one of each object a kept map is keyed by. The workload
// of a lane (a cycle's number modulo the workers) matches its lane's ConfigMaps by a
// pattern (Reloader's regular expression).
func churnCycle(ctx context.Context, c *cluster.Cluster, ns string, worker, i int) error {
	name := fmt.Sprintf("churn-%d-%06d", worker, i)
	core := c.Client.CoreV1()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "0"}}
	if _, err := core.ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("cycle %d: %w", i, err)
	}
	d := fixtures.AnnotatedDeployment(name, map[string]string{"configmap.reloader.stakater.com/reload": fmt.Sprintf("churn-%d-.*", worker)}, fixtures.PlainTemplate())
	deployments := c.Client.AppsV1().Deployments(ns)
	if _, err := deployments.Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("cycle %d: %w", i, err)
	}
	later := fmt.Sprintf(`{"metadata":{"annotations":{%q:"v3 configmap/%s=0123456789abcdef,digest-of-a-later-form"}}}`, confighash.AnnotationSources, name)
	if _, err := deployments.Patch(ctx, name, types.MergePatchType, []byte(later), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("cycle %d: %w", i, err)
	}
	cm.Data["k"] = "1"
	if _, err := core.ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("cycle %d: %w", i, err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{confighash.LabelRestart: confighash.RestartInPlace.String()}},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"churn.example.com/nowhere": "true"}, Containers: []corev1.Container{{
			Name: "app", Image: "registry.example.com/app:1",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}}}}}
	if _, err := core.Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("cycle %d: %w", i, err)
	}
	now := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
	for _, del := range []func() error{
		func() error { return core.Pods(ns).Delete(ctx, name, now) },
		func() error { return deployments.Delete(ctx, name, metav1.DeleteOptions{}) },
		func() error { return core.ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}) },
	} {
		if err := del(); err != nil {
			return fmt.Errorf("cycle %d: %w", i, err)
		}
	}
	return nil
}

// churnGrowth is how much a component's RSS grew after the first of parts of the
// cycles: the largest sample after it over the sample at it, and the same of its live
// heap.
func churnGrowth(samples []churnSample, name string, parts int) (rss, heap float64) {
	settled := samples[len(samples)/parts]
	var rssMost, heapMost float64
	for _, s := range samples[len(samples)/parts:] {
		rssMost, heapMost = max(rssMost, s.rss[name]), max(heapMost, s.heap[name])
	}
	return rssMost/settled.rss[name] - 1, heapMost/settled.heap[name] - 1
}

// logChurn prints the RSS curve.
func logChurn(tb testing.TB, samples []churnSample) {
	tb.Helper()
	for _, s := range samples {
		tb.Logf("| %d | %.0fs | %.1f | %.1f | %.1f | %.1f |", s.cycles, s.elapsed.Seconds(), s.rss["webhook"], s.heap["webhook"], s.rss["watcher"], s.heap["watcher"])
	}
}

// TestChurnLeavesNothingBehind is the churn scenario, short: 2,000 cycles. After the
// first quarter, neither component's RSS grows by more than 10%. What is kept for a
// while by design fills within it (client-go's caches of recent Events hold the last
// 1,024 of each); what grows after is what nothing lets go of.
func TestChurnLeavesNothingBehind(t *testing.T) {
	samples := churn(t, 2000, 20)
	t.Log("| cycles | elapsed | webhook RSS MiB | webhook heap MiB | watcher RSS MiB | watcher heap MiB |")
	logChurn(t, samples)
	for _, name := range []string{"webhook", "watcher"} {
		if rss, _ := churnGrowth(samples, name, 4); rss > 0.10 {
			t.Errorf("the %s's RSS grew by %.0f%% after the first 500 of 2,000 create and delete cycles, want at most 10%%", name, rss*100)
		}
	}
}

// BenchmarkScenarioChurn is the churn scenario of `make bench`: 100,000 cycles.
func BenchmarkScenarioChurn(b *testing.B) {
	const cycles = 100_000
	scenario(b, bench.Scenario{
		Name: "churn", Title: "A tenant's create and delete loop",
		Setup: "one namespace confighash acts in; 8 clients at once",
		Load: fmt.Sprintf("%d cycles, each: a ConfigMap, a Deployment matching it by a pattern (Reloader's reload regular expression), its record rewritten in a later form, "+
			"the ConfigMap changed, a pod labelled for restart in place using it; then all three deleted", cycles),
	}, func(s *bench.Scenario) {
		samples := churn(b, cycles, 100)
		logChurn(b, samples)
		last := samples[len(samples)-1]
		s.Add("cycles a second", float64(cycles)/last.elapsed.Seconds(), "cycles/s")
		met := true
		for _, name := range []string{"webhook", "watcher"} {
			rss, heap := churnGrowth(samples, name, 10)
			s.Add(name+" RSS after 10,000", roundMiB(samples[len(samples)/10].rss[name]), "MiB")
			s.Add(name+" RSS at the end", roundMiB(last.rss[name]), "MiB")
			s.Add(name+" RSS growth after 10,000", rss*100, "%")
			s.Add(name+" live heap growth after 10,000", heap*100, "%")
			met = met && rss <= 0.10
		}
		curve := make([]string, 0, len(samples))
		for _, smp := range samples {
			if smp.cycles%10_000 == 0 {
				curve = append(curve, fmt.Sprintf("%d: webhook %.0f, watcher %.0f MiB", smp.cycles, smp.rss["webhook"], smp.rss["watcher"]))
			}
		}
		s.Notes = append(s.Notes, "RSS every 10,000 cycles: "+strings.Join(curve, "; "))
		s.Judge("RSS flat within 10% after the first 10,000 cycles", met)
	})
}
