package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// Reloader's --reload-on-create=false and --reload-on-delete, as opt-ins: what a
// source's creation and deletion roll (docs/migrating-from-reloader.md).

// lifecycleApp creates Deployment web of one pod that uses app-config, uses flags as
// optional, and names extra (confighash.dev/include-configmaps).
func lifecycleApp(t *testing.T, c *cluster.Cluster, ns string) {
	t.Helper()
	tmpl := fixtures.EnvFromTemplate("app-config")
	tmpl.Spec.Containers[0].EnvFrom = append(tmpl.Spec.Containers[0].EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "flags"}, Optional: new(true)}})
	d := fixtures.Deployment("web", 1, tmpl)
	d.Annotations = map[string]string{confighash.AnnotationInject: "true", confighash.AnnotationIncludeConfigMaps: "extra"}
	createDeployment(t, c, ns, d)
	expectRollouts(t, c, ns, map[string]int{"web": 1})
}

// recordedEntry returns web's record entry of ConfigMap name.
func recordedEntry(t *testing.T, c *cluster.Cluster, ns, name string) (confighash.RecordEntry, bool) {
	t.Helper()
	r, err := confighash.ParseRecord(recordOf(t, c, ns, "web"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range r {
		if e.SourceRef == (confighash.SourceRef{Kind: confighash.ConfigMap, Name: name}) {
			return e, true
		}
	}
	return confighash.RecordEntry{}, false
}

// expectRevision waits until web is at Deployment revision want, then checks that it
// goes no further: a return to an earlier pod template reuses its ReplicaSet, so
// revisions count rollouts where ReplicaSets do not.
func expectRevision(t *testing.T, c *cluster.Cluster, ns string, want int) {
	t.Helper()
	revision := func() int {
		d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(d.Annotations["deployment.kubernetes.io/revision"])
		return n
	}
	waitFor(t, 30*time.Second, fmt.Sprintf("web to reach revision %d", want), func() bool { return revision() >= want })
	time.Sleep(quietPeriod)
	if got := revision(); got != want {
		t.Fatalf("web is at revision %d, want %d", got, want)
	}
}

// TestReloadOnCreateFalseRecordsANewSource: with --reload-on-create=false, a named
// source and an optional one created after the pods started roll nothing; each is
// recorded, and its next change rolls the workload once.
func TestReloadOnCreateFalseRecordsANewSource(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c, "--reload-on-create=false")
	w := startWatcher(t, c, "--reload-on-create=false")
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "app-config", map[string]string{"k": "v0"})
	lifecycleApp(t, c, ns)
	waitQuiet(t, w)

	createConfigMap(t, c, ns, "extra", map[string]string{"k": "v0"})
	createConfigMap(t, c, ns, "flags", map[string]string{"k": "v0"})
	for _, name := range []string{"extra", "flags"} {
		waitFor(t, 30*time.Second, name+" to be recorded", func() bool {
			e, ok := recordedEntry(t, c, ns, name)
			return ok && e.Seen
		})
	}
	waitQuiet(t, w)
	expectRollouts(t, c, ns, map[string]int{"web": 1})
	for _, name := range []string{"extra", "flags"} {
		if e, _ := recordedEntry(t, c, ns, name); !e.Baseline || e.Absent {
			t.Fatalf("record %q: want %s recorded present, as a baseline", recordOf(t, c, ns, "web"), name)
		}
	}

	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "extra"}, "k", "v1")
	expectRollouts(t, c, ns, map[string]int{"web": 2})
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "flags"}, "k", "v1")
	expectRollouts(t, c, ns, map[string]int{"web": 3})
}

// TestReloadOnDeleteRollsOnceAndOnceMoreOnReturn: with --reload-on-delete, deleting a
// source rolls its workload once, also through a restart of the watcher, and its
// return, with the same data, once more.
func TestReloadOnDeleteRollsOnceAndOnceMoreOnReturn(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c, "--reload-on-delete")
	w := startWatcher(t, c, "--reload-on-delete")
	ns := labeledNamespace(t, c)
	for _, name := range []string{"app-config", "flags", "extra"} {
		createConfigMap(t, c, ns, name, map[string]string{"k": "v0"})
	}
	lifecycleApp(t, c, ns)
	waitQuiet(t, w)

	deleteConfigMap := func(name string) {
		t.Helper()
		if err := c.Client.CoreV1().ConfigMaps(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deleteConfigMap("extra")
	expectRevision(t, c, ns, 2)
	w.stop(t)
	w = startWatcher(t, c, "--reload-on-delete")
	waitQuiet(t, w)
	expectRevision(t, c, ns, 2)

	createConfigMap(t, c, ns, "extra", map[string]string{"k": "v0"})
	expectRevision(t, c, ns, 3)
	deleteConfigMap("app-config")
	expectRevision(t, c, ns, 4)
	waitQuiet(t, w)
	expectRevision(t, c, ns, 4)
}
