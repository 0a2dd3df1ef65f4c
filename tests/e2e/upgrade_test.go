package e2e

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// previousRelease is the last commit whose digests are not bound to the namespace,
// and which reads records in the shared form alone (FormShared).
const previousRelease = "4654d83"

// lastUnannounced is the last commit whose watcher does not say on its Lease what
// record forms it reads.
const lastUnannounced = "0579f85"

var previousBuilds sync.Map // commit -> *previousBuild

type previousBuild struct {
	once   sync.Once
	binary string
	err    error
}

// previousBinary returns confighash as it was at commit, built from the repository's
// history once and kept in the cache beside the control plane's binaries; without that
// commit (a shallow clone) the test skips.
func previousBinary(t *testing.T, commit string) string {
	t.Helper()
	repo, err := repoWith(commit)
	if err != nil {
		t.Skipf("the upgrade test builds the previous release %s from the git history: %v", commit, err)
	}
	binary, err := buildPrevious(repo, commit)
	if err != nil {
		t.Fatal(err)
	}
	return binary
}

// repoWith returns the top of the repository, if its history holds commit.
func repoWith(commit string) (string, error) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("no git history: %v", err)
	}
	repo := strings.TrimSpace(string(root))
	if exec.Command("git", "-C", repo, "cat-file", "-e", commit+"^{commit}").Run() != nil {
		return "", errors.New("this clone's history lacks it (a shallow clone)")
	}
	return repo, nil
}

// buildPrevious builds confighash at commit, once per test binary, into the cache
// ($CONFIGHASH_CACHE, as the Makefile sets it), where a built one is taken as it is.
func buildPrevious(repo, commit string) (string, error) {
	b, _ := previousBuilds.LoadOrStore(commit, &previousBuild{})
	build := b.(*previousBuild)
	build.once.Do(func() {
		cache := os.Getenv("CONFIGHASH_CACHE")
		if cache == "" {
			dir, err := os.UserCacheDir()
			if err != nil {
				build.err = err
				return
			}
			cache = filepath.Join(dir, "confighash")
		}
		build.binary = filepath.Join(cache, "confighash-"+commit, "confighash")
		if _, err := os.Stat(build.binary); err == nil {
			return
		}
		src, err := os.MkdirTemp("", "confighash-"+commit+"-")
		if err != nil {
			build.err = err
			return
		}
		defer os.RemoveAll(src)
		if out, err := exec.Command("sh", "-c", `git -C "$0" archive "$1" | tar -x -C "$2"`, repo, commit, src).CombinedOutput(); err != nil {
			build.err = fmt.Errorf("git archive %s: %v\n%s", commit, err, out)
			return
		}
		// Built aside and renamed into place: a build cut short leaves no binary.
		if err := os.MkdirAll(filepath.Dir(build.binary), 0o755); err != nil {
			build.err = err
			return
		}
		tmp := build.binary + ".part"
		cmd := exec.Command("go", "build", "-o", tmp, "./cmd/confighash")
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build at %s: %v\n%s", commit, err, out)
			return
		}
		build.err = os.Rename(tmp, build.binary)
	})
	return build.binary, build.err
}

// prebuildPrevious builds the previous releases the upgrade tests run, beside the
// first tests of a whole run rather than in the middle of their own.
func prebuildPrevious() {
	for _, commit := range []string{previousRelease, lastUnannounced} {
		if repo, err := repoWith(commit); err == nil {
			_, _ = buildPrevious(repo, commit)
		}
	}
}

// TestAnUpgradeRollsNothingUntilAChange: workloads of every kind, admitted and rolled
// once by a change under the previous release, are taken over by this one: nothing
// rolls at the takeover, at a restart of the watcher, or at an unrelated write of each;
// they keep their records until a change of a source they use rolls each of them
// once, in the namespaced form.
func TestAnUpgradeRollsNothingUntilAChange(t *testing.T) {
	c := sharedCluster(t)
	previous := previousBinary(t, previousRelease)
	hook := startWebhookBinary(t, c, previous)
	watcher := startBinary(t, c, previous, watcherArgs()...)
	waitFor(t, 10*time.Second, "the previous watcher to lead", func() bool { return watcher.metric(t, "confighash_watcher_leader") == 1 })
	ns := labeledNamespace(t, c)
	ctx := t.Context()
	createEverySource(t, c, ns)
	every := fixtures.EveryUseTemplate(nil)
	pinned := fixtures.EnvFromTemplate("app-config")
	pinned.Spec.Volumes = fixtures.SecretVolumeTemplate("app-secret").Spec.Volumes
	createDeployment(t, c, ns, fixtures.Deployment("every", 1, every))
	createDeployment(t, c, ns, fixtures.Deployment("plain", 1, fixtures.PlainTemplate()))
	createDeployment(t, c, ns, fixtures.AnnotatedDeployment("pinned", map[string]string{confighash.AnnotationInject: "true", confighash.AnnotationPin: "true"}, pinned))
	if _, err := c.Client.AppsV1().StatefulSets(ns).Create(ctx, fixtures.StatefulSet("sts", every), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().DaemonSets(ns).Create(ctx, fixtures.DaemonSet("ds", every), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.BatchV1().CronJobs(ns).Create(ctx, fixtures.CronJob("cron", every), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Rollouts: a Deployment's ReplicaSets, a StatefulSet's and a DaemonSet's
	// ControllerRevisions, a CronJob's generation (a touch changes its metadata alone).
	rolled := func() map[string]int {
		out := map[string]int{}
		for _, name := range []string{"every", "plain", "pinned"} {
			out[name] = replicaSets(t, c, ns, name)
		}
		for _, name := range []string{"sts", "ds"} {
			out[name] = controllerRevisions(t, c, ns, name)
		}
		cj, err := c.Client.BatchV1().CronJobs(ns).Get(ctx, "cron", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out["cron"] = int(cj.Generation)
		return out
	}
	want := map[string]int{"every": 1, "plain": 1, "pinned": 1, "sts": 1, "ds": 1, "cron": 1}
	users := []string{"every", "pinned", "sts", "ds", "cron"} // of app-config
	expect := func(when string) {
		t.Helper()
		waitFor(t, 30*time.Second, fmt.Sprintf("rollouts %v %s", want, when), func() bool { return maps.Equal(rolled(), want) })
		waitQuiet(t, watcher)
		time.Sleep(quietPeriod)
		got := rolled()
		if !maps.Equal(got, want) {
			t.Fatalf("%s: rollouts %v, want %v", when, got, want)
		}
		t.Logf("%s: rollouts %v", when, got)
	}
	// forms checks the version each user's record is written in.
	forms := func(when, version string) {
		t.Helper()
		for _, name := range users {
			if text := recordOf(t, c, ns, name); !strings.HasPrefix(text, version+" ") {
				t.Errorf("%s: %s's record %q, want it in %s", when, name, text, version)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	expect("created under the previous release")
	app := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "app-config"}
	setKey(t, c, ns, app, "greeting", "v2")
	for _, name := range users {
		want[name]++
	}
	expect("after a change under the previous release")
	forms("under the previous release", "v1")

	watcher.stop(t)
	hook.component.stop(t)
	hook.binary = confighashBinary(t)
	hook.restart(t, c)
	watcher = startWatcher(t, c)
	expect("at the takeover")

	watcher.stop(t)
	watcher = startWatcher(t, c)
	expect("after a restart of the watcher")

	label := []byte(`{"metadata":{"labels":{"team":"a"}}}`)
	for _, name := range []string{"every", "plain", "pinned"} {
		if _, err := c.Client.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Client.AppsV1().StatefulSets(ns).Patch(ctx, "sts", types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().DaemonSets(ns).Patch(ctx, "ds", types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.BatchV1().CronJobs(ns).Patch(ctx, "cron", types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("after an unrelated write of each workload")
	forms("until a rollout is due", "v1")

	setKey(t, c, ns, app, "greeting", "v3")
	for _, name := range users {
		want[name]++
	}
	expect("after a change under this release")
	forms("after a rollout under this release", "v2")
}

// recordOf returns the sources record of a workload of the test's kinds.
func recordOf(t *testing.T, c *cluster.Cluster, ns, name string) string {
	t.Helper()
	var meta metav1.Object
	var err error
	switch name {
	case "sts":
		meta, err = c.Client.AppsV1().StatefulSets(ns).Get(t.Context(), name, metav1.GetOptions{})
	case "ds":
		meta, err = c.Client.AppsV1().DaemonSets(ns).Get(t.Context(), name, metav1.GetOptions{})
	case "cron":
		meta, err = c.Client.BatchV1().CronJobs(ns).Get(t.Context(), name, metav1.GetOptions{})
	default:
		meta, err = c.Client.AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	return meta.GetAnnotations()[confighash.AnnotationSources]
}
