package e2e

import (
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
	prom := startPrometheus(t, target)

	flags := []string{"--pin-by-default"}
	startWebhook(t, c, flags...)
	w := startWatcher(t, c, append(slices.Clone(flags), "--prometheus-url="+prom.url,
		`--analysis-query=error-ratio=max(canary_error_ratio{namespace="$namespace",deployment="$workload"})`)...)
	ns := labeledNamespace(t, c)
	names := pacedApps(t, c, ns, n, 5)
	for _, name := range names {
		errorRatio.WithLabelValues(ns, name).Set(0)
	}
	ctx := t.Context()
	shared := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"1",%q:%q,%q:"revert",%q:"error-ratio < 0.1"}}}`,
		confighash.AnnotationCanary, confighash.AnnotationBake, bake.String(), confighash.AnnotationOnFailure, confighash.AnnotationAnalysis)
	if _, err := c.Client.CoreV1().ConfigMaps(ns).Patch(ctx, shared.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
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
		d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, names[0], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := confighash.ParseBaking(d.Annotations[confighash.AnnotationBaking])
		return !b.Since.IsZero() && b.Hash == d.Spec.Template.Annotations[confighash.AnnotationHash]
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

	// The fix: each rolls once, the canary first.
	errorRatio.WithLabelValues(ns, names[0]).Set(0)
	setKey(t, c, ns, shared, "k", "fixed")
	for _, name := range names {
		want[name]++
	}
	waitFor(t, 3*time.Minute, fmt.Sprintf("ReplicaSets %v after the fix", want), func() bool {
		return maps.Equal(replicaSetsPerApp(t, c, ns), want) && rolledOutCount(t, c, ns) == n
	})

	// Prometheus stops: the next canary is halted, not reverted, and the rest held.
	prom.stop()
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

// promServer is a real Prometheus, scraping a target every second.
type promServer struct {
	url  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startPrometheus starts Prometheus on a loopback port, scraping target, and waits until
// it has scraped it; the test's end stops it.
func startPrometheus(t *testing.T, target string) *promServer {
	t.Helper()
	bin, err := cluster.Prometheus(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := fmt.Sprintf("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: app\n    static_configs:\n      - targets: [%q]\n", target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ports, err := cluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	p := &promServer{url: "http://" + addr, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", cluster.LogTail(log.Name(), 20))
		}
		log.Close()
	})
	waitFor(t, time.Minute, "Prometheus to scrape its target", func() bool {
		resp, err := http.Get(p.url + `/api/v1/query?query=up{job="app"}`)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return err == nil && resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"1"]`)
	})
	return p
}

// stop stops Prometheus, by its pid, and waits until it has exited.
func (p *promServer) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
