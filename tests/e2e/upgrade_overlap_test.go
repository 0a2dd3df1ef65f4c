package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// overlapApps is how many Deployments the overlap tests run, each using a ConfigMap
// and a Secret of its own.
const overlapApps = 10

// overlap runs the components of two builds side by side, as an upgrade or a rollback
// with helm does, and counts each Deployment's rollouts.
type overlap struct {
	t       *testing.T
	c       *cluster.Cluster
	ns      string
	hook    *webhookProcess
	watcher *component
	// watcherBinary is the build the watcher runs.
	watcherBinary string
	want          map[string]int
}

// startOverlap installs the webhook and the watcher of a build, and overlapApps
// Deployments under them.
func startOverlap(t *testing.T, c *cluster.Cluster, binary string) *overlap {
	o := &overlap{t: t, c: c, hook: startWebhookBinary(t, c, binary), want: map[string]int{}}
	o.watcher, o.watcherBinary = o.lead(binary), binary
	o.ns = labeledNamespace(t, c)
	for i := range overlapApps {
		name := fmt.Sprintf("app-%d", i)
		createConfigMap(t, c, o.ns, name, map[string]string{"greeting": "v1"})
		createSecret(t, c, o.ns, name, map[string]string{"password": "p1"})
		tmpl := fixtures.EnvFromTemplate(name)
		tmpl.Spec.Volumes = fixtures.SecretVolumeTemplate(name).Spec.Volumes
		createDeployment(t, c, o.ns, fixtures.Deployment(name, 1, tmpl))
		o.want[name] = 1
	}
	o.expect("created")
	return o
}

// lead starts a watcher of binary and waits until it leads.
func (o *overlap) lead(binary string) *component {
	o.t.Helper()
	w := startBinary(o.t, o.c, binary, watcherArgs()...)
	waitFor(o.t, 10*time.Second, "the watcher to lead", func() bool { return w.metric(o.t, "confighash_watcher_leader") == 1 })
	return w
}

// run replaces the running webhook and watcher by those of the builds given.
func (o *overlap) run(webhookBinary, watcherBinary string) {
	o.t.Helper()
	if o.hook.binary != webhookBinary {
		o.hook.component.stop(o.t)
		o.hook.binary = webhookBinary
		o.hook.restart(o.t, o.c)
	}
	if o.watcherBinary != watcherBinary {
		o.watcher.stop(o.t)
		o.watcher, o.watcherBinary = o.lead(watcherBinary), watcherBinary
	}
}

// change writes new data into each app's Secret: each Deployment is due to roll once.
func (o *overlap) change(value string) {
	o.t.Helper()
	for name := range o.want {
		setKey(o.t, o.c, o.ns, confighash.SourceRef{Kind: confighash.Secret, Name: name}, "password", value)
		o.want[name]++
	}
}

// expect waits for the rollouts wanted, then checks that no more follow.
func (o *overlap) expect(when string) {
	o.t.Helper()
	expectSettled(o.t, o.c, o.ns, o.watcher, o.want, 60*time.Second, when)
	o.t.Logf("%s: %d ReplicaSets, as wanted", when, total(o.want))
}

// forms counts the apps' records by the version they are written in.
func (o *overlap) forms() map[string]int {
	o.t.Helper()
	out := map[string]int{}
	for name := range o.want {
		version, _, _ := strings.Cut(recordOf(o.t, o.c, o.ns, name), " ")
		out[version]++
	}
	return out
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestAnUpgradeWithBothReleasesRunningRollsEachChangeOnce: helm rolls the webhook and
// the watcher at once, so for a while one of each release runs. From the last release
// that reads only v1 records, and from the last whose watcher does not say what it
// reads, each way round, every change made meanwhile rolls its users once.
func TestAnUpgradeWithBothReleasesRunningRollsEachChangeOnce(t *testing.T) {
	c := sharedCluster(t)
	for _, from := range []string{previousRelease, lastUnannounced} {
		t.Run("from "+from, func(t *testing.T) {
			previous, current := previousBinary(t, from), confighashBinary(t)
			o := startOverlap(t, c, previous)

			o.run(current, previous)
			o.change("p2")
			o.expect("changed under this release's webhook and " + from + "'s watcher")

			o.run(previous, current)
			o.change("p3")
			o.expect("changed under " + from + "'s webhook and this release's watcher")

			o.run(current, current)
			o.change("p4")
			o.expect("changed under this release")
			if got := o.forms(); got["v2"] != overlapApps {
				t.Fatalf("records by form after a change under this release: %v, want all %d in v2", got, overlapApps)
			}
		})
	}
}

// TestARollbackRollsNothing: going back from this release to the one before rolls
// nothing, at the takeover or at a restart of the watcher, and the next change rolls
// each user once.
func TestARollbackRollsNothing(t *testing.T) {
	c := sharedCluster(t)
	previous, current := previousBinary(t, lastUnannounced), confighashBinary(t)
	o := startOverlap(t, c, current)
	o.change("p2")
	o.expect("changed under this release")

	o.run(current, previous)
	o.expect("the watcher rolled back")
	o.run(previous, previous)
	o.expect("the webhook rolled back")
	o.watcher.stop(t)
	o.watcher = o.lead(previous)
	o.expect("the previous release's watcher restarted")

	o.change("p3")
	o.expect("changed under the previous release")
}

// TestARecordOfALaterReleaseIsLeftAloneUntilASourceItUsesChanges: gone back by more
// than one release, confighash meets records in a form it does not read. It leaves
// them alone at their write, at a restart of the watcher and at an unrelated write;
// a change of a source the workload uses rolls it once, in this release's form.
func TestARecordOfALaterReleaseIsLeftAloneUntilASourceItUsesChanges(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	w := startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"greeting": "v1"})
	createDeployment(t, c, ns, fixtures.Deployment("web", 1, fixtures.EnvFromTemplate("cfg")))
	want := map[string]int{"web": 1}
	expect := func(when string) {
		t.Helper()
		expectSettled(t, c, ns, w, want, 30*time.Second, when)
	}
	expect("created")

	later := "v3 configmap/cfg=0123456789abcdef,digest-of-a-later-form"
	mergeAnnotations(t, c, ns, "Deployment", "web", map[string]*string{confighash.AnnotationSources: &later})
	expect("its record written in a later form")
	w.stop(t)
	w = startWatcher(t, c)
	expect("the watcher restarted")
	relabel(t, c, ns, "web", "b")
	expect("an unrelated write")
	if got := recordOf(t, c, ns, "web"); got != later {
		t.Fatalf("the later record became %q; want it left alone", got)
	}

	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "greeting", "v2")
	want["web"]++
	expect("a change of the ConfigMap it uses")
	if got := recordOf(t, c, ns, "web"); !strings.HasPrefix(got, "v2 ") {
		t.Fatalf("record after the change %q, want it rewritten in v2", got)
	}
}
