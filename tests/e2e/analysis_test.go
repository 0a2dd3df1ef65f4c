package e2e

import (
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
)

// TestAMetricGateARealPrometheusSeesFailRevertsTheCanary: 3 pinned Deployments use a
// ConfigMap with a canary of one, a bake gated on a metric, and on-failure revert. A real
// Prometheus scrapes each Deployment's error ratio from a real endpoint. A bad change:
// the canary's ratio goes up while it bakes, and it is reverted, the other 2 held. The
// fix, its ratio back to 0: each rolls once. With Prometheus stopped, the next change's
// canary is halted, not reverted, and says why; the rest are held.
func TestAMetricGateARealPrometheusSeesFailRevertsTheCanary(t *testing.T) {
	c := sharedCluster(t)
	const n = 3
	const bake = 15 * time.Second
	errorRatio := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "canary_error_ratio", Help: "errors per request"}, []string{"namespace", "deployment"})
	target := serveMetrics(t, errorRatio)
	prom, promURL := startPrometheus(t, target)

	flags := []string{"--pin-by-default"}
	startWebhook(t, c, flags...)
	w := startWatcher(t, c, append(slices.Clone(flags), "--prometheus-url="+promURL,
		`--analysis-query=error-ratio=max(canary_error_ratio{namespace="$namespace",deployment="$workload"})`)...)
	ns := labeledNamespace(t, c)
	names := pacedApps(t, c, ns, n, 5)
	for _, name := range names {
		errorRatio.WithLabelValues(ns, name).Set(0)
	}
	shared := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}
	annotateConfigMap(t, c, ns, shared.Name, map[string]string{confighash.AnnotationCanary: "1", confighash.AnnotationBake: bake.String(),
		confighash.AnnotationOnFailure: "revert", confighash.AnnotationAnalysis: "error-ratio < 0.1"})
	waitQuiet(t, w)
	defer func() {
		if t.Failed() {
			describeDeployments(t, c, ns)
		}
	}()
	want := map[string]int{}
	for _, name := range names {
		want[name] = 1
	}
	baking := func() bool {
		b, current := deploymentBaking(t, c, ns, names[0])
		return !b.Since.IsZero() && current
	}

	// A bad change: Prometheus sees the canary's errors while it bakes.
	setKey(t, c, ns, shared, "k", "bad")
	want[names[0]]++
	waitFor(t, 2*time.Minute, "the canary baking the bad change", baking)
	errorRatio.WithLabelValues(ns, names[0]).Set(0.5)
	failed := time.Now()
	waitFor(t, time.Minute, "the canary reverted, the rest held", func() bool {
		return slices.Equal(annotated(t, c, ns, confighash.AnnotationReverted), names[:1]) && len(annotated(t, c, ns, confighash.AnnotationHeld)) == n-1
	})
	t.Logf("the canary's error ratio up: reverted %v later", time.Since(failed).Round(100*time.Millisecond))
	if why := eventMessage(t, c, ns, names[0], "Reverted"); !strings.Contains(why, "the metric gate failed: error-ratio is 0.5, want < 0.1") {
		t.Errorf("the Reverted Event says %q; want the gate's value and threshold", why)
	}
	waitQuiet(t, w)
	if got := replicaSetsPerApp(t, c, ns); !maps.Equal(got, want) {
		t.Errorf("ReplicaSets after the revert %v, want %v", got, want)
	}

	// The fix: each rolls once, the canary first. Its ratio is back to 0 before it, as
	// Prometheus has it: the gate reads from the bake's start.
	errorRatio.WithLabelValues(ns, names[0]).Set(0)
	waitFor(t, 30*time.Second, "Prometheus to see the canary's ratio back to 0", func() bool {
		query := url.Values{"query": {fmt.Sprintf(`canary_error_ratio{namespace=%q,deployment=%q}`, ns, names[0])}}
		resp, err := http.Get(promURL + "/api/v1/query?" + query.Encode())
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return err == nil && strings.Contains(string(body), `,"0"]`)
	})
	setKey(t, c, ns, shared, "k", "fixed")
	for _, name := range names {
		want[name]++
	}
	waitFor(t, 3*time.Minute, fmt.Sprintf("ReplicaSets %v after the fix", want), func() bool {
		return maps.Equal(replicaSetsPerApp(t, c, ns), want) && rolledOutCount(t, c, ns) == n
	})

	// Prometheus stops: the next canary is halted, not reverted, and the rest held.
	if err := prom.Stop(); err != nil {
		t.Fatal(err)
	}
	setKey(t, c, ns, shared, "k", "unseen")
	want[names[0]]++
	waitFor(t, 2*time.Minute, "the canary halted, the rest held", func() bool {
		return slices.Equal(annotated(t, c, ns, confighash.AnnotationFailed), names[:1]) && len(annotated(t, c, ns, confighash.AnnotationHeld)) == n-1
	})
	if why := eventMessage(t, c, ns, names[0], "NotReverted"); !strings.Contains(why, "could not be read from Prometheus") {
		t.Errorf("the NotReverted Event says %q; want that Prometheus could not be read", why)
	}
	for result, want := range map[string]bool{"holds": true, "fails": true, "unreadable": true} {
		if n := w.metric(t, fmt.Sprintf(`confighash_watcher_analysis_reads_total{result=%q}`, result)); (n > 0) != want {
			t.Errorf("confighash_watcher_analysis_reads_total{result=%q} = %v", result, n)
		}
	}
	waitQuiet(t, w)
	if got := replicaSetsPerApp(t, c, ns); !maps.Equal(got, want) {
		t.Errorf("ReplicaSets after the halt %v, want %v: the canary stays on the change, the rest untouched", got, want)
	}
}

// eventMessage is the message of the latest Event of the reason on the Deployment, ""
// for none.
func eventMessage(t *testing.T, c *cluster.Cluster, ns, name, reason string) string {
	t.Helper()
	events, err := c.Client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	latest := ""
	var at time.Time
	for _, e := range events.Items {
		if when := e.LastTimestamp.Time; latest == "" || when.After(at) {
			latest, at = e.Message, when
		}
	}
	return latest
}

// serveMetrics serves the collectors' metrics on 127.0.0.1 until the test ends, and
// returns the address.
func serveMetrics(t *testing.T, cs ...prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(cs...)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// startPrometheus starts Prometheus on a loopback port, scraping target every second,
// and waits until it has scraped it; the test's end stops it.
func startPrometheus(t *testing.T, target string) (*cluster.Process, string) {
	t.Helper()
	config := fmt.Sprintf("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: app\n    static_configs:\n      - targets: [%q]\n", target)
	proc, url, err := cluster.StartPrometheus(t.Context(), t.TempDir(), "127.0.0.1", config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus log:\n%s", proc.LogTail(20))
		}
		_ = proc.Stop()
	})
	waitFor(t, time.Minute, "Prometheus to scrape its target", func() bool {
		resp, err := http.Get(url + `/api/v1/query?query=up{job="app"}`)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return err == nil && resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"1"]`)
	})
	return proc, url
}
