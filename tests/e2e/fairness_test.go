package e2e

import (
	"context"
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
	"github.com/confighash/confighash/tests/cluster"
)

// TestPendingWorkloadsOfOneNamespaceDoNotHoldEveryRollingSlot: with at most 2 rolling
// at once, namespace "stuck" changes first and its 2 released Deployments' new pods
// stay Pending (their nodeSelector matches no node any more); namespace "free"
// changes next. Once the stuck pods have been Pending for --pending-timeout, their
// slots go to "free", whose 4 Deployments each roll once within seconds, where they
// waited for --wave-timeout (10 minutes).
func TestPendingWorkloadsOfOneNamespaceDoNotHoldEveryRollingSlot(t *testing.T) {
	c := cluster.Require(t, testCluster)
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
