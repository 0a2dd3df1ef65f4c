package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// BenchmarkChangeToRollout measures, for a ConfigMap used by 1, 100, 1,000 and
// 10,000 Deployments, the time from the ConfigMap update call returning to each
// Deployment's generation bump (its pod template changed), with no debounce and no
// touch-rate limit to speak of. It also counts the API server's PATCHes of Deployments
// and LISTs of what the watcher reads during the fan-out: one PATCH per Deployment and
// no LIST are expected. At 10,000 it measures the floor in the same run: a client with
// no rate limit patching the same Deployments' pod templates itself.
func BenchmarkChangeToRollout(b *testing.B) {
	c := cluster.Require(b, testCluster)
	startWebhook(b, c)
	const workers = 16
	startWatcher(b, c, "--debounce=0", "--touch-rate=100000", fmt.Sprintf("--workers=%d", workers))
	for _, fanOut := range []int{1, 100, 1000, 10_000} {
		b.Run(fmt.Sprintf("fanout-%d", fanOut), func(b *testing.B) {
			ns := changeToRollout(b, c, fanOut)
			if fanOut < 10_000 {
				return
			}
			floor := plainPatchFloor(b, c, ns, fanOut, workers)
			b.ReportMetric(float64(floor.Milliseconds()), "plain-PATCH-floor-ms")
		})
	}
}

// BenchmarkChangeToRolloutAtDefaults is the same for 10 Deployments, with the
// watcher's default flags: its quiet period, which lets a release's writes roll once.
func BenchmarkChangeToRolloutAtDefaults(b *testing.B) {
	c := cluster.Require(b, testCluster)
	startWebhook(b, c)
	startBenchWatcher(b, c)
	b.Run("fanout-10", func(b *testing.B) { changeToRollout(b, c, 10) })
}

// changeToRollout creates fanOut Deployments using a ConfigMap in a new namespace,
// changes the ConfigMap at each round, and reports how soon they rolled; it returns
// the namespace.
func changeToRollout(b *testing.B, c *cluster.Cluster, fanOut int) string {
	ns := labeledNamespace(b, c)
	createConfigMap(b, c, ns, "shared", map[string]string{"k": "0"})
	createUsersOfShared(b, c, ns, fanOut, nil)
	var latencies []time.Duration
	var patches, lists float64
	round := 0
	for b.Loop() {
		round++
		gen := generations(b, c, ns, fanOut)
		done := watchGenerationBumps(b, c, ns, gen)
		before := apiRequests(b, c) // after the lists of this test's own
		start := time.Now()
		setKey(b, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}, "k", fmt.Sprint(round))
		for _, at := range done(fanOut) {
			latencies = append(latencies, at.Sub(start))
		}
		after := apiRequests(b, c)
		patches += after["PATCH deployments"] - before["PATCH deployments"]
		for _, r := range watchedResources {
			lists += after["LIST "+r] - before["LIST "+r]
		}
		for k, v := range after {
			if strings.HasPrefix(k, "LIST ") && v != before[k] {
				b.Logf("%s: %v during the fan-out", k, v-before[k])
			}
		}
	}
	b.StopTimer()
	slices.Sort(latencies)
	at := func(q float64) float64 { return float64(latencies[int(q*float64(len(latencies)-1))].Milliseconds()) }
	b.ReportMetric(at(0.5), "p50-ms")
	b.ReportMetric(at(0.95), "p95-ms")
	b.ReportMetric(float64(latencies[len(latencies)-1].Milliseconds()), "max-ms")
	b.ReportMetric(patches/float64(round*fanOut), "PATCH/workload")
	b.ReportMetric(lists/float64(round), "LIST/change")
	return ns
}

// plainPatchFloor returns how long a client with no rate limit, workers requests at
// once, takes from its first PATCH of an annotation onto the pod template of each of
// the namespace's n Deployments web-i to the last generation bump: the least any tool
// that rolls them takes on this cluster. Its PATCHes pass the webhook, as touches do.
func plainPatchFloor(b *testing.B, c *cluster.Cluster, ns string, n, workers int) time.Duration {
	b.Helper()
	return slices.Max(timeFanOut(b, c, ns, n, func() { patchEach(b, c, ns, n, workers) }))
}

// watchedResources are what the watcher reads: LISTs of them during a fan-out are its
// own or its informers' relists. Others are not: the API server LISTs every Service
// every 3 minutes to repair its NodePort allocations, whatever else runs.
var watchedResources = []string{"configmaps", "secrets", "deployments", "statefulsets", "daemonsets", "cronjobs", "pods", "namespaces"}

// generations waits until n Deployments exist and returns their generations.
func generations(b *testing.B, c *cluster.Cluster, ns string, n int) map[string]int64 {
	b.Helper()
	gens := map[string]int64{}
	waitFor(b, 2*time.Minute, fmt.Sprintf("%d Deployments", n), func() bool {
		list, err := c.Client.AppsV1().Deployments(ns).List(b.Context(), metav1.ListOptions{})
		if err != nil || len(list.Items) != n {
			return false
		}
		for _, d := range list.Items {
			gens[d.Name] = d.Generation
		}
		return true
	})
	return gens
}

// watchGenerationBumps starts watching the namespace's Deployments; the returned
// function waits until n of them have a generation above gen and returns when each
// was seen. It watches through an informer of their metadata, which lists again when
// its watch ends: the API server closes a watch whose reader lags, as one of
// thousands of Deployments can, and a bump that watch would have carried is then seen
// by the list.
func watchGenerationBumps(b *testing.B, c *cluster.Cluster, ns string, gen map[string]int64) func(n int) []time.Time {
	b.Helper()
	timeout := max(5*time.Minute, time.Duration(len(gen))*60*time.Millisecond)
	client, err := metadata.NewForConfig(c.Config)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	inf := metadatainformer.NewFilteredMetadataInformer(client, appsv1.SchemeGroupVersion.WithResource("deployments"), ns, 0, cache.Indexers{}, nil).Informer()
	seen := map[string]time.Time{}
	var mu sync.Mutex
	record := func(obj any) {
		m, ok := obj.(*metav1.PartialObjectMetadata)
		if !ok {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if _, done := seen[m.Name]; !done && m.Generation > gen[m.Name] {
			seen[m.Name] = now
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, obj any) { record(obj) }}); err != nil {
		b.Fatal(err)
	}
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		b.Fatal("the Deployments' metadata were not listed")
	}
	return func(n int) []time.Time {
		defer cancel()
		bumped := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(seen)
		}
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
			return bumped() >= n, nil
		}); err != nil {
			listed := 0
			for name, g := range generations(b, c, ns, len(gen)) {
				if g > gen[name] {
					listed++
				}
			}
			b.Fatalf("waiting for %d generation bumps: %v; %d seen, %d listed", n, err, bumped(), listed)
		}
		mu.Lock()
		defer mu.Unlock()
		out := make([]time.Time, 0, len(seen))
		for _, t := range seen {
			out = append(out, t)
		}
		return out
	}
}

// webhookCalls reads the API server's own record of its calls to admission webhooks:
// by webhook name, the calls and the seconds they took, from the API server's side of
// the connection.
func webhookCalls(b *testing.B, c *cluster.Cluster) map[string]struct{ count, seconds float64 } {
	b.Helper()
	out := map[string]struct{ count, seconds float64 }{}
	const metric = "apiserver_admission_webhook_admission_duration_seconds"
	forEachSample(bytes.NewReader(apiServerMetrics(b, c)), metric, func(line string, v float64) {
		name := metricLabel(line, "name")
		calls := out[name]
		switch {
		case strings.HasPrefix(line, metric+"_count{"):
			calls.count += v
		case strings.HasPrefix(line, metric+"_sum{"):
			calls.seconds += v
		}
		out[name] = calls
	})
	return out
}

// apiServerMetrics returns the API server's metrics, as Prometheus text.
func apiServerMetrics(b *testing.B, c *cluster.Cluster) []byte {
	b.Helper()
	raw, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

// metricLabel returns the value of the named label in a Prometheus sample line.
func metricLabel(line, name string) string {
	_, rest, ok := strings.Cut(line, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// apiRequests reads the API server's request counters, summed by "VERB resource" (as
// "PATCH deployments") and by verb alone (as "LIST").
func apiRequests(b *testing.B, c *cluster.Cluster) map[string]float64 {
	b.Helper()
	out := map[string]float64{}
	forEachSample(bytes.NewReader(apiServerMetrics(b, c)), "apiserver_request_total{", func(line string, v float64) {
		verb := metricLabel(line, "verb")
		out[verb] += v
		out[verb+" "+metricLabel(line, "resource")] += v
	})
	return out
}

// BenchmarkWatcherMemory measures the watcher's (and the webhook's) resident memory with 2,000 Secrets of
// 100 KiB and 1,000 opted-in Deployments in the cluster, after its caches synced and
// it checked every workload.
func BenchmarkWatcherMemory(b *testing.B) {
	c := cluster.Require(b, testCluster)
	wh := startWebhook(b, c)
	ns := labeledNamespace(b, c)
	value := strings.Repeat("s", 100<<10)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for worker := range 8 {
		wg.Go(func() {
			for i := worker; i < 2000; i += 8 {
				_, err := c.Client.CoreV1().Secrets(ns).Create(b.Context(), &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("secret-%d", i)},
					StringData: map[string]string{"value": value},
				}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	for i := range 1000 {
		createDeployment(b, c, ns, fixtures.Deployment(fmt.Sprintf("web-%d", i), 0, fixtures.SecretVolumeTemplate(fmt.Sprintf("secret-%d", i%2000))))
	}
	for b.Loop() {
		w := startWatcher(b, c)
		waitFor(b, 2*time.Minute, "the resync", func() bool {
			return w.metric(b, "confighash_watcher_drifted_workloads") == 0 && w.metric(b, "confighash_watcher_queue_depth") == 0
		})
		b.ReportMetric(rssMiB(b, w.cmd.Process.Pid), "watcher-RSS-MiB")
		b.ReportMetric(w.metric(b, "go_memstats_heap_inuse_bytes")/(1<<20), "watcher-heap-MiB")
		// The webhook caches the same digests, and admitted the 1,000 Deployments.
		b.ReportMetric(rssMiB(b, wh.cmd.Process.Pid), "webhook-RSS-MiB")
		w.stop(b)
	}
}

// rssMiB reads a process's resident set size.
func rssMiB(tb testing.TB, pid int) float64 { return procMiB(tb, pid, "VmRSS") }

// peakRSSMiB reads the largest resident set size a process has had.
func peakRSSMiB(tb testing.TB, pid int) float64 { return procMiB(tb, pid, "VmHWM") }

// procMiB reads a size in kB from a process's /proc status, in MiB.
func procMiB(tb testing.TB, pid int, field string) float64 {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if value, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(value, "kB")), 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb / 1024
		}
	}
	tb.Fatalf("no %s", field)
	return 0
}
