package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash/tests/cluster"
)

// previousChart extracts the chart as it was at commit, from the repository's history;
// without that commit (a shallow clone) the test skips.
func previousChart(t *testing.T, commit string) string {
	t.Helper()
	repo, err := repoWith(commit)
	if err != nil {
		t.Skipf("the chart upgrade test takes the chart of %s from the git history: %v", commit, err)
	}
	dir := t.TempDir()
	const path = "manifests/helm/confighash"
	if out, err := exec.Command("sh", "-c", `git -C "$0" archive "$1" "$2" | tar -x -C "$3"`, repo, commit, path, dir).CombinedOutput(); err != nil {
		t.Fatalf("git archive %s %s: %v\n%s", commit, path, err, out)
	}
	return filepath.Join(dir, path)
}

// TestTheChartUpgradesFromThePreviousReleaseAndRollsBack: helm installs the previous
// release's chart, upgrades it to this one and rolls it back, each accepted by the API
// server (no field it refuses to change, no object left behind), as users upgrade.
func TestTheChartUpgradesFromThePreviousReleaseAndRollsBack(t *testing.T) {
	c := sharedCluster(t)
	ctx := t.Context()
	if err := c.InstallCertManagerCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	helm, err := cluster.Helm(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A namespace of its own: the harness's components live in the test install's.
	const ns = "chart-upgrade"
	previous, current := previousChart(t, lastUnannounced), filepath.Join("..", "..", "manifests", "helm", "confighash")
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(helm, append(args, "--namespace", ns, "--kubeconfig", c.Kubeconfig)...).CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Cleanup(func() {
		_ = exec.Command(helm, "uninstall", "confighash", "--namespace", ns, "--kubeconfig", c.Kubeconfig, "--wait").Run()
		_ = c.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	run("install", "confighash", previous, "--create-namespace")
	run("upgrade", "confighash", current)
	lease, err := c.Client.RbacV1().Roles(ns).Get(ctx, "confighash-webhook-reads-watcher-lease", metav1.GetOptions{})
	if err != nil || len(lease.Rules) != 1 || lease.Rules[0].ResourceNames[0] != "confighash-watcher" {
		t.Fatalf("after the upgrade, the webhook's Role on the watcher's Lease: %v, %v", lease, err)
	}
	run("rollback", "confighash", "1")
	if _, err := c.Client.RbacV1().Roles(ns).Get(ctx, "confighash-webhook-reads-watcher-lease", metav1.GetOptions{}); err == nil {
		t.Fatal("after the rollback, this release's Role is still there")
	}
	if history := run("history", "confighash"); strings.Count(history, "\n") != 4 {
		t.Fatalf("helm history: want the install, the upgrade and the rollback:\n%s", history)
	}
}
