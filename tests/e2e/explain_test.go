package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// explain runs `confighash explain` against the local control plane and returns its
// explanations, its stderr and its exit status.
func explain(t *testing.T, c *cluster.Cluster, args ...string) ([]confighash.Explanation, string, int) {
	t.Helper()
	cmd := exec.Command(confighashBinary(t), append([]string{"explain", "--kubeconfig", c.Kubeconfig, "--install-namespace", installNamespace, "-o", "json"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	status := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		status = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var out []confighash.Explanation
	if status == 0 {
		if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, stdout.String())
		}
	}
	return out, stderr.String(), status
}

func explainOne(t *testing.T, c *cluster.Cluster, ns, workload string) confighash.Explanation {
	t.Helper()
	out, stderr, status := explain(t, c, workload, "-n", ns)
	if status != 0 || len(out) != 1 {
		t.Fatalf("explain %s: status %d, %d explanations: %s", workload, status, len(out), stderr)
	}
	return out[0]
}

// TestExplainGivesEachVerdict: against the real control plane, a workload up to date,
// one with a rollout pending, one not opted in, one whose namespace is not enabled,
// and the sources that do not count.
func TestExplainGivesEachVerdict(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c) // no watcher: changes stay pending
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"used": "1", "unused": "1"})
	ignored := createConfigMap(t, c, ns, "ignored", map[string]string{"k": "1"})
	ignored.Annotations = map[string]string{confighash.AnnotationIgnore: "true"}
	if _, err := c.Client.CoreV1().ConfigMaps(ns).Update(t.Context(), ignored, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tmpl := fixtures.PlainTemplate()
	tmpl.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "USED", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "used"}}}}
	tmpl.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "ignored"}}}}
	createDeployment(t, c, ns, fixtures.Deployment("web", 0, tmpl))
	createDeployment(t, c, ns, fixtures.AnnotatedDeployment("plain", nil, tmpl))

	e := explainOne(t, c, ns, "deployment/web")
	if e.Verdict != confighash.VerdictUpToDate || e.Hash == "" || e.Hash != e.TemplateHash || !strings.Contains(e.OptIn, confighash.AnnotationInject) {
		t.Fatalf("after creation: %+v", e)
	}
	sources := map[string]confighash.SourceExplanation{}
	for _, s := range e.Sources {
		sources[s.Name] = s
	}
	if s := sources["cfg"]; !s.Counts || strings.Join(s.Keys, ",") != "used" || s.Recorded != s.Now || len(s.Uses) != 1 || !strings.Contains(s.Uses[0], "env USED of container app") {
		t.Fatalf("cfg: %+v", s)
	}
	if s := sources["ignored"]; s.Counts || !strings.Contains(s.Why, "ignored") {
		t.Fatalf("ignored: %+v", s)
	}

	// Only an unused key changed: still up to date.
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "unused", "2")
	if e := explainOne(t, c, ns, "deployment/web"); e.Verdict != confighash.VerdictUpToDate {
		t.Fatalf("after a change of an unused key: %s: %s", e.Verdict, e.Why)
	}
	// A used key changed, and no watcher runs: a rollout is pending, and says why.
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "used", "2")
	if e := explainOne(t, c, ns, "deployment/web"); e.Verdict != confighash.VerdictRollout || !strings.Contains(e.Why, "ConfigMap/cfg changed") {
		t.Fatalf("after a change of the used key: %s: %s", e.Verdict, e.Why)
	}
	if e := explainOne(t, c, ns, "deployment/plain"); e.Verdict != confighash.VerdictNoRollout || !strings.Contains(e.Why, "not opted in") {
		t.Fatalf("not opted in: %s: %s", e.Verdict, e.Why)
	}
	// The namespace alone: the opted-in workloads only.
	if out, _, status := explain(t, c, "-n", ns); status != 0 || len(out) != 1 || out[0].Name != "web" {
		t.Fatalf("explain -n: status %d, %+v", status, out)
	}

	off := namespace(t, c, nil)
	createConfigMap(t, c, off, "cfg", map[string]string{"used": "1"})
	createDeployment(t, c, off, fixtures.Deployment("web", 0, fixtures.EnvFromTemplate("cfg")))
	if e := explainOne(t, c, off, "deployment/web"); e.Verdict != confighash.VerdictNoRollout || !strings.Contains(e.Why, "is not enabled") {
		t.Fatalf("namespace not enabled: %s: %s", e.Verdict, e.Why)
	}

	for _, args := range [][]string{{"deployment/nope", "-n", ns}, {"job/x", "-n", ns}, {"deployment", "-n", ns}} {
		_, stderr, status := explain(t, c, args...)
		if status != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || strings.Contains(stderr, "goroutine") {
			t.Errorf("explain %v: status %d, stderr %q; want 2 and one line", args, status, stderr)
		}
	}
}
