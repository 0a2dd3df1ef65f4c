package e2e

import (
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
	"github.com/confighash/confighash/watcher"
)

// TestTwoWritersFightingOverASecretRollItsUsersABoundedNumberOfTimes: two controllers
// rewrite one Secret twice a second for 20 s, each undoing the other. Its 10 users
// roll at most --flap-limit times, then are held, each told by an Event that names both
// writers; when the writing stops they roll once more, with the last data. A ConfigMap
// changed at a normal pace meanwhile rolls its users once per change.
func TestTwoWritersFightingOverASecretRollItsUsersABoundedNumberOfTimes(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	const quiet = 10 * time.Second
	w := startWatcher(t, c, fmt.Sprintf("--flap-quiet=%s", quiet))
	ns := labeledNamespace(t, c)
	ctx := t.Context()
	createSecret(t, c, ns, "tls", map[string]string{"tls.crt": "0"})
	createConfigMap(t, c, ns, "calm", map[string]string{"greeting": "v1"})
	want := map[string]int{}
	fought := []string{}
	for i := range 10 {
		name := fmt.Sprintf("fought-%d", i)
		createDeployment(t, c, ns, fixtures.Deployment(name, 1, fixtures.SecretVolumeTemplate("tls")))
		fought = append(fought, name)
		want[name] = 1
	}
	for i := range 2 {
		name := fmt.Sprintf("calm-%d", i)
		createDeployment(t, c, ns, fixtures.Deployment(name, 1, fixtures.EnvFromTemplate("calm")))
		want[name] = 1
	}
	waitFor(t, 30*time.Second, "every Deployment created", func() bool { return maps.Equal(replicaSetsPerApp(t, c, ns), want) })

	writers := []string{"cert-manager-certificates-issuing", "external-secrets"}
	start := time.Now()
	calmChanges := 0
	const changes, every = 40, 500 * time.Millisecond // four times --flap-limit, past the debounce
	for i := 1; i <= changes; i++ {
		s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, "tls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Data = map[string][]byte{"tls.crt": []byte(fmt.Sprint(i))}
		if _, err := c.Client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{FieldManager: writers[i%2]}); err != nil {
			t.Fatal(err)
		}
		if i%20 == 10 {
			setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "calm"}, "greeting", fmt.Sprint("v", i))
			calmChanges++
		}
		time.Sleep(time.Until(start.Add(time.Duration(i) * every)))
	}
	during := replicaSetsPerApp(t, c, ns)
	for _, name := range fought {
		if rolled := during[name] - 1; rolled > watcher.DefaultFlapLimit {
			t.Errorf("%s rolled %d times during %d changes, want at most --flap-limit (%d)", name, rolled, changes, watcher.DefaultFlapLimit)
		}
	}

	// Held until quiet: explain says so, and who writes the Secret.
	if e := explainOne(t, c, ns, "deployment/"+fought[0]); e.Verdict != confighash.VerdictHeld ||
		!strings.Contains(e.Why, writers[0]) || !strings.Contains(e.Why, writers[1]) {
		t.Errorf("explain %s while held: %s, %q; want held, naming both writers", fought[0], e.Verdict, e.Why)
	} else {
		t.Logf("explain %s while held: %s: %s", fought[0], e.Verdict, e.Why)
	}

	// One is resumed at once; the others roll when the Secret is quiet.
	resume := exec.Command(confighashBinary(t), "resume", "deployment/"+fought[0], "-n", ns, "--kubeconfig", c.Kubeconfig)
	if out, err := resume.CombinedOutput(); err != nil {
		t.Fatalf("confighash resume: %v\n%s", err, out)
	}
	waitFor(t, quiet/2, fought[0]+" rolled at its resume, before the Secret is quiet", func() bool { return replicaSets(t, c, ns, fought[0]) == during[fought[0]]+1 })

	// Quiet now: each user rolls once more, to the last data.
	key := hashKey(t, c)
	tmpl := fixtures.SecretVolumeTemplate("tls")
	lastData := expectedHash(t, c, key, ns, map[string]string{confighash.AnnotationInject: "true"}, &tmpl)
	for _, name := range fought {
		want[name] = during[name] + 1
	}
	for i := range 2 {
		want[fmt.Sprintf("calm-%d", i)] = 1 + calmChanges
	}
	expectSettled(t, c, ns, w, want, quiet+30*time.Second, "one rollout of each user with the last data, once quiet")
	total := 0
	for _, name := range fought {
		total += want[name] - 1
		if h := templateHash(t, c, ns, name); h != lastData {
			t.Errorf("%s rolled to %s, want the hash of the last data %s", name, h, lastData)
		}
		if !namesBoth(t, c, ns, name, "FlappingHeld", writers) {
			t.Errorf("%s: no FlappingHeld Event names both writers", name)
		}
	}
	if !namesBoth(t, c, ns, "tls", "Flapping", writers) {
		t.Errorf("secret/tls: no Flapping Event names both writers")
	}
	if n := w.metric(t, "confighash_watcher_flapping_sources_total"); n != 1 {
		t.Errorf("confighash_watcher_flapping_sources_total = %v, want 1", n)
	}
	t.Logf("%d changes of secret/tls rolled its 10 users %d times in all (at most %d each while it changed, then once when quiet); %d changes of configmap/calm rolled each of its users %d times",
		changes, total, watcher.DefaultFlapLimit, calmChanges, calmChanges)
}

// namesBoth reports whether an Event of that reason on the named object of the
// namespace names both writers: the breaker tells again when it learns of another.
func namesBoth(t testing.TB, c *cluster.Cluster, ns, name, reason string, writers []string) bool {
	t.Helper()
	events, err := c.Client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if strings.Contains(e.Message, writers[0]) && strings.Contains(e.Message, writers[1]) {
			return true
		}
	}
	return false
}

// TestAFlappingHoldHoldsThroughAWriteAndANewLeader: the breaker's hold is on the
// workloads, where the webhook reads it. Two writers fight over a Secret its 3 users
// read; once held, a user's annotate of one rolls nothing, and neither does the
// watcher's leader dying while the fight goes on (it rolled the 3 sixty times in 25 s
// when the hold lived in the leader's memory): the new leader holds them on, and each
// rolls once, to the last data, when the Secret is quiet. Rollouts are counted by the
// Deployments' revisions, which no history limit caps.
func TestAFlappingHoldHoldsThroughAWriteAndANewLeader(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	const quiet = 10 * time.Second
	flags := append(slices.Clone(fastLease), fmt.Sprintf("--flap-quiet=%s", quiet))
	leader := startWatcher(t, c, flags...)
	ns := labeledNamespace(t, c)
	ctx := t.Context()
	createSecret(t, c, ns, "tls", map[string]string{"tls.crt": "0"})
	users := []string{"d1", "d2", "d3"}
	for _, name := range users {
		createDeployment(t, c, ns, fixtures.Deployment(name, 1, fixtures.SecretVolumeTemplate("tls")))
	}
	revisions := func() map[string]string {
		out := map[string]string{}
		for _, name := range users {
			d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			out[name] = d.Annotations["deployment.kubernetes.io/revision"]
		}
		return out
	}
	waitFor(t, 30*time.Second, "each Deployment at revision 1", func() bool {
		return maps.Equal(revisions(), map[string]string{"d1": "1", "d2": "1", "d3": "1"})
	})

	// The fight: two writers, each undoing the other twice a second, until stopped.
	writers := []string{"issuer-a", "issuer-b"}
	stop, fought := make(chan struct{}), make(chan int)
	go func() {
		i := 0
		defer func() { fought <- i }()
		for tick := time.NewTicker(500 * time.Millisecond); i < 600; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, "tls", metav1.GetOptions{})
			if err == nil {
				s.Data = map[string][]byte{"tls.crt": []byte(fmt.Sprint(i + 1))}
				_, err = c.Client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{FieldManager: writers[i%2]})
			}
			if err != nil && ctx.Err() == nil {
				t.Errorf("write the Secret: %v", err)
				return
			}
		}
	}()
	stopFight := sync.OnceValue(func() int { close(stop); return <-fought })
	t.Cleanup(func() { stopFight() })

	// Held, and the rollout of the change before the hold under way in each: its
	// revision is known once the Deployment controller has seen its latest template.
	waitFor(t, 60*time.Second, "the 3 users marked held, their last rollout seen", func() bool {
		for _, name := range users {
			d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || d.Annotations[confighash.AnnotationFlapping] == "" || d.Status.ObservedGeneration != d.Generation {
				return false
			}
		}
		return true
	})
	held := revisions()
	t.Logf("held at revisions %v", held)

	// A user's write of a held workload, as kubectl annotate makes it.
	patch := []byte(`{"metadata":{"annotations":{"team":"payments"}}}`)
	if _, err := c.Client.AppsV1().Deployments(ns).Patch(ctx, "d1", types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-annotate"}); err != nil {
		t.Fatal(err)
	}

	// The leader dies while the fight goes on; a new one takes over.
	time.Sleep(2 * time.Second)
	leader.kill()
	leader = startWatcher(t, c, flags...)
	time.Sleep(2 * quiet / 3)
	if got := revisions(); !maps.Equal(got, held) {
		t.Errorf("during the hold, after a user's write of d1 and a new leader: revisions %v, want %v", got, held)
	}

	// Quiet now: each rolls once, to the last data.
	changes := stopFight()
	key := hashKey(t, c)
	tmpl := fixtures.SecretVolumeTemplate("tls")
	lastData := expectedHash(t, c, key, ns, map[string]string{confighash.AnnotationInject: "true"}, &tmpl)
	want := map[string]string{}
	for name, rev := range held {
		n, _ := strconv.Atoi(rev)
		want[name] = strconv.Itoa(n + 1)
	}
	waitFor(t, quiet+30*time.Second, fmt.Sprintf("revisions %v once quiet", want), func() bool { return maps.Equal(revisions(), want) })
	waitQuiet(t, leader)
	time.Sleep(2 * time.Second) // a rollout too many shows in the revisions by now
	if got := revisions(); !maps.Equal(got, want) {
		t.Errorf("settled at revisions %v, want %v: one rollout each once quiet", got, want)
	}
	for _, name := range users {
		if h := templateHash(t, c, ns, name); h != lastData {
			t.Errorf("%s rolled to %s, want the hash of the last data %s", name, h, lastData)
		}
	}
	t.Logf("%d changes of secret/tls, a write and a new leader during the hold: revisions %v, then %v", changes, held, want)
}
