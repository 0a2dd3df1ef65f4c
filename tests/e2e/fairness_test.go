package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
)

// TestPendingWorkloadsOfOneNamespaceDoNotHoldEveryRollingSlot: with at most 2 rolling
// at once, namespace "stuck" changes first and its 2 released Deployments' new pods
// stay Pending (their nodeSelector matches no node any more); namespace "free"
// changes next. Once the stuck pods have been Pending for --pending-timeout, their
// slots go to "free", whose 4 Deployments each roll once within seconds, where they
// waited for --wave-timeout (10 minutes).
func TestPendingWorkloadsOfOneNamespaceDoNotHoldEveryRollingSlot(t *testing.T) {
	c := sharedCluster(t)
	const n, size, most = 4, 2, 2
	startWebhook(t, c, fmt.Sprintf("--wave-size=%d", size))
	w := startWatcher(t, c, fmt.Sprintf("--wave-size=%d", size), fmt.Sprintf("--max-rolling=%d", most), "--pending-timeout=2s")
	stuck, free := labeledNamespace(t, c), labeledNamespace(t, c)

	label := "e2e.confighash.dev/" + stuck
	labelNodes(t, c, label, ptrString("yes"))
	t.Cleanup(func() { labelNodes(t, c, label, nil) })
	pacedAppsWith(t, c, stuck, n, 600, func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{label: "yes"} })
	pacedApps(t, c, free, n, 600)
	labelNodes(t, c, label, nil) // new pods of "stuck" can be scheduled nowhere

	shared := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}
	setKey(t, c, stuck, shared, "k", "v1")
	waitFor(t, 30*time.Second, "the first wave of "+stuck+" to be Pending", func() bool {
		pods, err := c.Client.CoreV1().Pods(stuck).List(t.Context(), metav1.ListOptions{FieldSelector: "status.phase=Pending"})
		return err == nil && len(pods.Items) == size
	})
	start := time.Now()
	setKey(t, c, free, shared, "k", "v1")
	waitFor(t, 45*time.Second, "every Deployment of "+free+" to roll once", func() bool {
		r := replicaSetsPerApp(t, c, free)
		return len(r) == n && !slices.ContainsFunc(slices.Collect(maps.Values(r)), func(k int) bool { return k < 2 }) && rolledOutCount(t, c, free) == n
	})
	took := time.Since(start)
	time.Sleep(quietPeriod)
	for name, got := range replicaSetsPerApp(t, c, free) {
		if got != 2 {
			t.Errorf("%s/%s rolled %d times for one change, want once", free, name, got-1)
		}
	}
	if got := rolledOutCount(t, c, stuck); got != n-size {
		t.Errorf("%d of %s's Deployments rolled out, want the %d its first wave did not release", got, stuck, n-size)
	}
	events, err := c.Client.CoreV1().Events(stuck).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=PendingTooLong,type=Warning"})
	if err != nil || len(events.Items) != size {
		t.Fatalf("PendingTooLong Events in %s: %d (%v), want one for each of the %d Pending", stuck, len(events.Items), err, size)
	}
	if got := w.metric(t, "confighash_watcher_pending_too_long_total"); got != size {
		t.Errorf("confighash_watcher_pending_too_long_total = %v, want %d", got, size)
	}
	t.Logf("%s's change rolled its %d Deployments in %v while %s's first wave stayed Pending", free, n, took.Round(100*time.Millisecond), stuck)
}

// TestOneNamespacesBacklogDelaysNoOtherNamespacesRollout: each touch of a workload of
// namespace "busy" is held 1 s on its way to the API server (as an admission webhook of
// its own that answers slowly would hold it), and a change of a ConfigMap its 24
// Deployments use makes a backlog of 12 s for 2 workers. A change in namespace "quiet"
// made once that backlog is queued rolls quiet's Deployment while most of busy's
// touches still wait: the workers take namespaces in turn. With one FIFO, it waited
// behind all 24.
func TestOneNamespacesBacklogDelaysNoOtherNamespacesRollout(t *testing.T) {
	c := sharedCluster(t)
	const n = 24
	startWebhook(t, c)
	busy, quiet := labeledNamespace(t, c), labeledNamespace(t, c)
	var held atomic.Int64
	kubeconfig := proxyAPIServer(t, c, func(r *http.Request) bool {
		if r.Method != http.MethodPatch || !strings.Contains(r.URL.Path, "/namespaces/"+busy+"/deployments/") {
			return true
		}
		held.Add(1)
		select {
		case <-time.After(time.Second):
			return true
		case <-r.Context().Done():
			return false
		}
	})
	startWatcher(t, c, "--kubeconfig="+kubeconfig, "--workers=2")
	pacedApps(t, c, busy, n, 600)
	pacedApps(t, c, quiet, 1, 600)

	shared := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "shared"}
	setKey(t, c, busy, shared, "k", "v1")
	waitFor(t, 10*time.Second, "the backlog of "+busy+" to be under way", func() bool { return held.Load() >= 2 })
	setKey(t, c, quiet, shared, "k", "v1")
	waitFor(t, 30*time.Second, quiet+"'s Deployment to roll", func() bool { return replicaSetsPerApp(t, c, quiet)["app-00"] == 2 })
	touched := held.Load()
	if touched > n/2 {
		t.Errorf("%s's Deployment rolled after %d of %s's %d touches, want it among the first: behind the backlog", quiet, touched, busy, n)
	}
	waitFor(t, 60*time.Second, "every Deployment of "+busy+" to roll", func() bool {
		r := replicaSetsPerApp(t, c, busy)
		return len(r) == n && !slices.ContainsFunc(slices.Collect(maps.Values(r)), func(k int) bool { return k < 2 })
	})
	time.Sleep(quietPeriod)
	for _, ns := range []string{busy, quiet} {
		for name, got := range replicaSetsPerApp(t, c, ns) {
			if got != 2 {
				t.Errorf("%s/%s rolled %d times for one change, want once", ns, name, got-1)
			}
		}
	}
	t.Logf("%s's Deployment rolled after %d of %s's %d held touches", quiet, touched, busy, n)
}

// labelNodes sets the label on every node, or removes it for nil.
func labelNodes(t testing.TB, c *cluster.Cluster, label string, value *string) {
	t.Helper()
	ctx := context.Background() // also at cleanup, once the test's context is done
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]*string{label: value}}})
	for _, node := range nodes.Items {
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !strings.Contains(err.Error(), "not found") {
			t.Fatal(err)
		}
	}
}

func ptrString(s string) *string { return &s }
