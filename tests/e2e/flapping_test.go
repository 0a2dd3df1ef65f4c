package e2e

import (
	"fmt"
	"maps"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
