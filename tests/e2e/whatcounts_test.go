package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
)

// TestAppsAppliedWithTheirConfigMapsAreAdopted: 100 apps, each a ConfigMap and a
// Deployment applied together with kubectl apply -f (in the same second, as helm
// install does), annotated for Reloader; ten have their ConfigMap changed after their
// pods started. 20 s later the namespace is labelled: the 90 are adopted, none rolls;
// the ten roll once each. (Reproduction: 10 of 20 such apps rolled.)
func TestAppsAppliedWithTheirConfigMapsAreAdopted(t *testing.T) {
	c := cluster.Require(t, testCluster)
	startWebhook(t, c)
	w := startWatcher(t, c)
	ns := namespace(t, c, nil)
	const n, changed = 100, 10
	applied := time.Now()
	if out, err := c.Kubectl(t.Context(), appsManifest(t, ns, n, map[string]string{confighash.ReloaderAuto: "true"}), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	want := map[string]int{}
	for i := range n {
		want[fmt.Sprintf("app-%d", i)] = 1
	}
	expectRollouts(t, c, ns, want)
	for i := range changed {
		name := fmt.Sprintf("app-%d", i)
		if err := c.WaitRolledOut(t.Context(), ns, name); err != nil {
			t.Fatal(err)
		}
	}
	afterTheSecond()
	for i := range changed {
		name := fmt.Sprintf("app-%d", i)
		setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: name}, "k", "1")
		want[name] = 2
	}
	time.Sleep(time.Until(applied.Add(20 * time.Second)))

	enableNamespace(t, c, ns)
	waitFor(t, 90*time.Second, "every Deployment to be recorded", func() bool {
		for name := range want {
			if !recorded(t, c, ns, name) {
				return false
			}
		}
		return true
	})
	expectRollouts(t, c, ns, want)
	if got := w.metric(t, `confighash_watcher_touches_total{result="adopted"}`); got != n-changed {
		t.Fatalf("adopted = %v, want %d", got, n-changed)
	}
}
