package e2e

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/fixtures"
)

// TestAnArgoRolloutWithTheRestartStrategyIsRestartedOncePerChange: an Argo Rollout
// given Reloader's rollout-strategy: restart is not rolled through its pod template,
// which keeps the hash it was created with; each change of its data sets its
// spec.restartAt once, with the hash its pods are restarted for recorded beside it, so
// that a watcher started afterwards restarts nothing again.
func TestAnArgoRolloutWithTheRestartStrategyIsRestartedOncePerChange(t *testing.T) {
	c := sharedCluster(t)
	installRolloutCRD(t, c)
	startWebhook(t, c)
	w := startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "v0"})
	createRollout(t, c, ns, "web", fixtures.EnvFromTemplate("cfg"))
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	rollouts := dyn.Resource(rolloutGVR).Namespace(ns)
	// Said after its creation: a change of how it rolls rolls nothing.
	if _, err := rollouts.Patch(t.Context(), "web", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+confighash.ReloaderRolloutStrategy+`":"restart"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	type seen struct{ hash, restartAt, mark string }
	read := func() seen {
		t.Helper()
		u, err := rollouts.Get(t.Context(), "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hash, _, _ := unstructured.NestedString(u.Object, "spec", "template", "metadata", "annotations", confighash.AnnotationHash)
		restartAt, _, _ := unstructured.NestedString(u.Object, "spec", "restartAt")
		return seen{hash, restartAt, u.GetAnnotations()[confighash.AnnotationRestartedHash]}
	}
	waitQuiet(t, w)
	created := read()
	if created.hash == "" || created.restartAt != "" {
		t.Fatalf("created: %+v; want hashed, not restarted", created)
	}

	last := created
	for i, value := range []string{"v1", "v2"} {
		afterTheSecond() // spec.restartAt is to the second
		setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", value)
		waitFor(t, 30*time.Second, "web to be restarted", func() bool { return read().restartAt != last.restartAt })
		if i == 0 {
			w.stop(t)
			w = startWatcher(t, c)
		}
		waitQuiet(t, w)
		time.Sleep(quietPeriod)
		now := read()
		if now.hash != created.hash || now.mark == last.mark || !isTime(now.restartAt) {
			t.Fatalf("after change %d: %+v; want its pod template's hash %s kept, restarted once, marked anew", i+1, now, created.hash)
		}
		if got := read(); got != now {
			t.Fatalf("after change %d: %+v, then %+v: restarted again", i+1, now, got)
		}
		last = now
	}
}

func isTime(s string) bool {
	_, err := time.Parse(time.RFC3339, s)
	return err == nil
}
