package e2e

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
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
	ns, read := restartingRollout(t, c)
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

// rolloutSeen is what the tests of the restart strategy read of a Rollout: its pod
// template's hash, its spec.restartAt and the mark of the hash it was restarted for.
type rolloutSeen struct{ hash, restartAt, mark string }

// restartingRollout makes a Rollout web using the ConfigMap cfg in a new namespace,
// then gives it Reloader's restart strategy (said after its creation: a change of how
// it rolls rolls nothing), and returns the namespace and how to read it.
func restartingRollout(t *testing.T, c *cluster.Cluster) (string, func() rolloutSeen) {
	t.Helper()
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "v0"})
	createRollout(t, c, ns, "web", fixtures.EnvFromTemplate("cfg"))
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	rollouts := dyn.Resource(rolloutGVR).Namespace(ns)
	if _, err := rollouts.Patch(t.Context(), "web", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+confighash.ReloaderRolloutStrategy+`":"restart"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns, func() rolloutSeen {
		t.Helper()
		u, err := rollouts.Get(t.Context(), "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hash, _, _ := unstructured.NestedString(u.Object, "spec", "template", "metadata", "annotations", confighash.AnnotationHash)
		restartAt, _, _ := unstructured.NestedString(u.Object, "spec", "restartAt")
		return rolloutSeen{hash, restartAt, u.GetAnnotations()[confighash.AnnotationRestartedHash]}
	}
}

func isTime(s string) bool {
	_, err := time.Parse(time.RFC3339, s)
	return err == nil
}

// TestAnUpgradeRestartsOrRollsARolloutWithTheRestartStrategyOnce: a build before Argo
// Rollouts' restart strategy (lastUnannounced) does not read it. Its webhook rolls the
// pod template in the watcher's touch: a change under it and this release's watcher
// rolls the Rollout once, through its template, and restarts nothing (with the restart
// in the touch, it did both). Its watcher heals a change under this release's webhook
// through the template, once. Under this release, a change restarts it once, its
// template kept.
func TestAnUpgradeRestartsOrRollsARolloutWithTheRestartStrategyOnce(t *testing.T) {
	c := sharedCluster(t)
	installRolloutCRD(t, c)
	previous, current := previousBinary(t, lastUnannounced), confighashBinary(t)
	hook := startWebhookBinary(t, c, current)
	w := startBinary(t, c, current, watcherArgs()...)
	ns, read := restartingRollout(t, c)
	waitQuiet(t, w)
	last := read()
	for _, round := range []struct {
		name             string
		webhook, watcher string
		rolls, restarts  bool
	}{
		{"under " + lastUnannounced + "'s webhook and this release's watcher", previous, current, true, false},
		{"under this release's webhook and " + lastUnannounced + "'s watcher", current, previous, true, false},
		{"under this release", current, current, false, true},
	} {
		if hook.binary != round.webhook {
			hook.component.stop(t)
			hook.binary = round.webhook
			hook.restart(t, c)
		}
		w.stop(t)
		w = startBinary(t, c, round.watcher, watcherArgs()...)
		waitFor(t, 10*time.Second, "the watcher to lead", func() bool { return w.metric(t, "confighash_watcher_leader") == 1 })
		afterTheSecond() // spec.restartAt is to the second
		setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", round.name)
		waitFor(t, 60*time.Second, "web to be rolled or restarted", func() bool { return read() != last })
		waitQuiet(t, w)
		time.Sleep(quietPeriod)
		now := read()
		if rolled, restarted := now.hash != last.hash, now.restartAt != last.restartAt; rolled != round.rolls || restarted != round.restarts || restarted && now.mark == last.mark {
			t.Fatalf("%s: %+v after %+v: rolled %v, restarted %v; want rolled %v, restarted %v (marked anew)", round.name, now, last, rolled, restarted, round.rolls, round.restarts)
		}
		t.Logf("%s: %+v", round.name, now)
		last = now
	}
}
