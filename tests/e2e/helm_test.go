package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// appChart is a release of a ConfigMap, a Secret and a Deployment that uses both, as
// charts are written.
var appChart = map[string]string{
	"Chart.yaml":  "apiVersion: v2\nname: app\nversion: 0.1.0\n",
	"values.yaml": "config: a\npassword: p\n",
	"templates/configmap.yaml": `apiVersion: v1
kind: ConfigMap
metadata: {name: app-config}
data: {greeting: {{ .Values.config | quote }}}
`,
	"templates/secret.yaml": `apiVersion: v1
kind: Secret
metadata: {name: app-secret}
stringData: {password: {{ .Values.password | quote }}}
`,
	"templates/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  annotations: {confighash.dev/inject: "true"}
spec:
  replicas: 1
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers:
      - name: app
        image: example.com/app:1
        envFrom:
        - configMapRef: {name: app-config}
        - secretRef: {name: app-secret}
`,
}

// defaultDebounce is the watcher's default --debounce: this test checks the default.
const defaultDebounce = "1s"

// TestAHelmUpgradeOfAConfigMapAndASecretRollsOnce upgrades a release three times, each
// changing its ConfigMap and its Secret: three rollouts, one each. It logs how far
// apart helm wrote the two, which the watcher's quiet period must exceed.
func TestAHelmUpgradeOfAConfigMapAndASecretRollsOnce(t *testing.T) {
	c := quietCluster(t) // helm's writes, some 10 ms apart, within the 100 ms quiet period
	helm, err := cluster.Helm(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	chart := t.TempDir()
	for name, text := range appChart {
		path := filepath.Join(chart, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	startWebhook(t, c)
	startWatcher(t, c, "--debounce="+defaultDebounce)
	ns := labeledNamespace(t, c)
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(helm, append(args, "app", chart, "--namespace", ns, "--kubeconfig", c.Kubeconfig)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helm %s: %v\n%s", args[0], err, out)
		}
	}
	run("install")
	expectRollouts(t, c, ns, map[string]int{"app": 1})

	// When each write reached a watch: the gap between a release's two writes.
	var mu sync.Mutex
	seen := map[string][]time.Time{}
	follow := func(w watch.Interface, err error) {
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		go func() {
			for e := range w.ResultChan() {
				if m, ok := e.Object.(metav1.Object); ok && e.Type == watch.Modified {
					mu.Lock()
					seen[m.GetName()] = append(seen[m.GetName()], time.Now())
					mu.Unlock()
				}
			}
		}()
	}
	follow(c.Client.CoreV1().ConfigMaps(ns).Watch(t.Context(), metav1.ListOptions{}))
	follow(c.Client.CoreV1().Secrets(ns).Watch(t.Context(), metav1.ListOptions{}))
	var gaps []time.Duration
	for i := range 3 {
		run("upgrade", "--set", fmt.Sprintf("config=c%d,password=p%d", i, i))
		expectRollouts(t, c, ns, map[string]int{"app": 2 + i})
		mu.Lock()
		cm, secret := seen["app-config"], seen["app-secret"]
		if len(cm) == i+1 && len(secret) == i+1 {
			gaps = append(gaps, cm[i].Sub(secret[i]).Abs())
		}
		mu.Unlock()
	}
	slices.Sort(gaps)
	t.Logf("helm upgrade wrote the Secret and the ConfigMap %v apart (3 upgrades, sorted)", gaps)
}

// TestHelmInstallSaysWhereScrapesAreAdmittedFrom: with a monitor and the
// NetworkPolicies on, helm install's notes say whom the NetworkPolicies let scrape, so
// that a Prometheus elsewhere does not go without metrics unawares.
func TestHelmInstallSaysWhereScrapesAreAdmittedFrom(t *testing.T) {
	c := sharedCluster(t)
	helm, _ := chartTools(t, c)
	if err := c.InstallCertManagerCRDs(t.Context()); err != nil {
		t.Fatal(err)
	}
	installMonitorCRDs(t, c) // helm maps the kinds it installs, even in a dry run
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"--set", "metrics.serviceMonitor.enabled=true"}, `only from [{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}].`},
		{[]string{"--set", "metrics.podMonitor.enabled=true", "--set", "networkPolicy.metrics.namespaceSelector=null"}, "only from any source."},
		{[]string{"--set", "metrics.podMonitor.enabled=true", "--set", "networkPolicy.enabled=false"}, ""},
	} {
		out, err := exec.Command(helm, append([]string{"install", "confighash", chartDir, "--dry-run=client", "--namespace", "confighash", "--kubeconfig", c.Kubeconfig}, tc.set...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("helm install --dry-run=client %v: %v\n%s", tc.set, err, out)
		}
		_, notes, _ := strings.Cut(string(out), "\nNOTES:\n")
		said := strings.Contains(strings.Join(strings.Fields(notes), " "), "admit scrapes of the ops port (8080) "+tc.want)
		if said != (tc.want != "") {
			t.Errorf("%v: helm install's notes:\n%s\nwant them to say %q: %v", tc.set, notes, tc.want, tc.want != "")
		}
	}
}

// TestAServerSideApplyOfTwoConfigMapsRollsOnce: a server-side apply (as kubectl apply
// --server-side, Flux or Argo CD send it) writes two ConfigMaps a Deployment uses one
// after the other, 40 ms apart, three times, each time the first seconds after its last
// write: one rollout each. The first is not a change alone, which would roll at once:
// an apply wrote it, so the watcher waits its quiet period for the second.
func TestAServerSideApplyOfTwoConfigMapsRollsOnce(t *testing.T) {
	c := quietCluster(t) // the two writes, milliseconds apart, within the 100 ms quiet period
	startWebhook(t, c)
	startWatcher(t, c, "--debounce="+defaultDebounce)
	ns := labeledNamespace(t, c)
	apply := func(name, value string) {
		t.Helper()
		cm := corev1ac.ConfigMap(name, ns).WithData(map[string]string{"k": value})
		if _, err := c.Client.CoreV1().ConfigMaps(ns).Apply(t.Context(), cm, metav1.ApplyOptions{FieldManager: "kubectl", Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	apply("a", "0")
	apply("b", "0")
	createDeployment(t, c, ns, fixtures.Deployment("app", 0, fixtures.UsingTemplate([]string{"a", "b"}, nil)))
	expectRollouts(t, c, ns, map[string]int{"app": 1})
	for i := range 3 {
		time.Sleep(5 * time.Second) // with expectRollouts' sleep, past the burst gap and its second
		apply("a", fmt.Sprint(i+1))
		time.Sleep(40 * time.Millisecond) // as an apply writes other objects between
		apply("b", fmt.Sprint(i+1))
		expectRollouts(t, c, ns, map[string]int{"app": 2 + i})
	}
}
