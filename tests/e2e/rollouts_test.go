package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/rollouts"
)

// quietPeriod is how long a test watches for a rollout that must not happen: well past
// the debounce and a touch.
const quietPeriod = 2 * time.Second

// replicaSets returns the number of ReplicaSets of Deployment name.
func replicaSets(t testing.TB, c *cluster.Cluster, ns, name string) int {
	t.Helper()
	n, err := rollouts.ReplicaSets(t.Context(), c.Client, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// replicaSetsPerApp returns each Deployment's number of ReplicaSets.
func replicaSetsPerApp(t testing.TB, c *cluster.Cluster, ns string) map[string]int {
	t.Helper()
	counts, err := rollouts.ReplicaSetsPerApp(t.Context(), c.Client, ns)
	if err != nil {
		t.Fatal(err)
	}
	return counts
}

// controllerRevisions returns the number of ControllerRevisions of StatefulSet or
// DaemonSet name.
func controllerRevisions(t testing.TB, c *cluster.Cluster, ns, name string) int {
	t.Helper()
	n, err := rollouts.ControllerRevisions(t.Context(), c.Client, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// expectReplicaSets waits until Deployment name has want ReplicaSets and has rolled
// out, then checks that no other rollout follows within the quiet period.
func expectReplicaSets(t testing.TB, c *cluster.Cluster, ns, name string, want int) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("%s to have %d ReplicaSets", name, want), func() bool { return replicaSets(t, c, ns, name) >= want })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := c.WaitRolledOut(ctx, ns, name); err != nil {
		t.Fatal(err)
	}
	time.Sleep(quietPeriod)
	if got := replicaSets(t, c, ns, name); got != want {
		t.Fatalf("%s has %d ReplicaSets, want %d", name, got, want)
	}
}

// expectReplicaSetsNoWait waits until Deployment name has want ReplicaSets.
func expectReplicaSetsNoWait(t testing.TB, c *cluster.Cluster, ns, name string, want int) {
	t.Helper()
	waitFor(t, 60*time.Second, fmt.Sprintf("%s to have %d ReplicaSets", name, want), func() bool { return replicaSets(t, c, ns, name) >= want })
}

// expectRollouts waits until each Deployment has the number of ReplicaSets given,
// then checks that none rolls again within the quiet period.
// expectSettled waits until the namespace's Deployments have the ReplicaSets wanted,
// within timeout, and the watcher has been quiet since, then checks that no more came.
func expectSettled(t testing.TB, c *cluster.Cluster, ns string, w *component, want map[string]int, timeout time.Duration, when string) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("ReplicaSets %v %s", want, when), func() bool { return maps.Equal(replicaSetsPerApp(t, c, ns), want) })
	waitQuiet(t, w)
	time.Sleep(quietPeriod)
	if got := replicaSetsPerApp(t, c, ns); !maps.Equal(got, want) {
		t.Fatalf("%s: ReplicaSets %v, want %v", when, got, want)
	}
}

func expectRollouts(t testing.TB, c *cluster.Cluster, ns string, want map[string]int) {
	t.Helper()
	names := slices.Sorted(maps.Keys(want))
	for _, name := range names {
		waitFor(t, 30*time.Second, fmt.Sprintf("%s to have %d ReplicaSets", name, want[name]), func() bool { return replicaSets(t, c, ns, name) >= want[name] })
	}
	time.Sleep(quietPeriod)
	for _, name := range names {
		if got := replicaSets(t, c, ns, name); got != want[name] {
			t.Errorf("%s has %d ReplicaSets, want %d", name, got, want[name])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}
