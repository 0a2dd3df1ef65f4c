package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/alert"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// alertSink is a real HTTP server on loopback standing for a chat's webhook.
type alertSink struct {
	*httptest.Server
	mu     sync.Mutex
	alerts []alert.Alert
}

func newAlertSink(t *testing.T, delay time.Duration) *alertSink {
	s := &alertSink{}
	done := make(chan struct{})
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var a alert.Alert
		if err := json.Unmarshal(body, &a); err == nil {
			s.mu.Lock()
			s.alerts = append(s.alerts, a)
			s.mu.Unlock()
		}
		select {
		case <-time.After(delay):
		case <-done:
		}
	}))
	t.Cleanup(func() { close(done); s.Close() })
	return s
}

func (s *alertSink) received() []alert.Alert {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]alert.Alert(nil), s.alerts...)
}

func alertArgs(url string) []string {
	return []string{"--alert-on-reload", "--alert-sink=webhook", "--alert-webhook-url=" + url + "/hooks/secret-token", "--cluster-name=e2e"}
}

// TestAFanOutOf60GivesOneAlert: one ConfigMap change that rolls 60 Deployments is one
// alert naming the change, 20 of them and "40 more".
func TestAFanOutOf60GivesOneAlert(t *testing.T) {
	c := sharedCluster(t)
	sink := newAlertSink(t, 0)
	startWebhook(t, c)
	w := startWatcher(t, c, alertArgs(sink.URL)...)
	ns := labeledNamespace(t, c)
	const n = 60
	createFanOut(t, c, ns, n)
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}, "k", "1")
	for i := range n {
		expectReplicaSetsNoWait(t, c, ns, fmt.Sprintf("web-%d", i), 2)
	}
	waitFor(t, 30*time.Second, "the alert", func() bool { return len(sink.received()) > 0 })
	time.Sleep(3 * time.Second) // past the quiet period: a second alert would have come
	got := sink.received()
	cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), "shared", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d alerts for one change, want 1: %+v", len(got), got)
	}
	a := got[0]
	if a.What != alert.Rolled || a.Cluster != "e2e" || a.Namespace != ns || len(a.Workloads) != 20 || a.More != n-20 ||
		len(a.Sources) != 1 || a.Sources[0] != (alert.Object{Kind: "ConfigMap", Name: "shared", ResourceVersion: cm.ResourceVersion}) {
		t.Fatalf("alert = %+v", a)
	}
	if sent := w.metric(t, `confighash_alerts_sent_total{sink="webhook"}`); sent != 1 {
		t.Fatalf("alerts sent = %v, want 1", sent)
	}
	if log := cluster.LogTail(w.logPath, 1000); strings.Contains(log, "secret-token") {
		t.Fatal("the watcher logged the alert URL's token")
	}
}

// TestASlowAlertSinkDoesNotDelayRollouts: a sink that takes 10 s per request, and 100
// changes each rolling its own Deployment: every one rolls as fast as without alerts,
// and the alerts that cannot wait are dropped and counted.
func TestASlowAlertSinkDoesNotDelayRollouts(t *testing.T) {
	c := sharedCluster(t)
	sink := newAlertSink(t, 10*time.Second)
	startWebhook(t, c)
	w := startWatcher(t, c, alertArgs(sink.URL)...)
	ns := labeledNamespace(t, c)
	const n = 100
	for i := range n {
		name := fmt.Sprintf("web-%d", i)
		createConfigMap(t, c, ns, name, map[string]string{"k": "0"})
		createDeployment(t, c, ns, fixtures.Deployment(name, 0, fixtures.EnvFromTemplate(name)))
	}
	for i := range n {
		expectReplicaSetsNoWait(t, c, ns, fmt.Sprintf("web-%d", i), 1)
	}
	for i := range n {
		setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: fmt.Sprintf("web-%d", i)}, "k", "1")
	}
	// From the last change, the touches take the 1 s debounce and a little more; had
	// each waited on its alert, they would take 100 times 10 s.
	began := time.Now()
	waitFor(t, 30*time.Second, "100 converged touches", func() bool {
		return w.metric(t, `confighash_watcher_touches_total{result="converged"}`) == n
	})
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the touches ended %v after the last change, behind a slow alert sink", took)
	}
	for i := range n {
		expectReplicaSetsNoWait(t, c, ns, fmt.Sprintf("web-%d", i), 2)
	}
	waitFor(t, 30*time.Second, "alerts dropped", func() bool {
		return w.metric(t, `confighash_alerts_dropped_total{sink="webhook"}`) > 0
	})
	t.Logf("touches done, all rolled %v after the last change; alerts received %d, dropped %v", time.Since(began).Round(time.Millisecond),
		len(sink.received()), w.metric(t, `confighash_alerts_dropped_total{sink="webhook"}`))
}
