package e2e

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/fixtures"
)

// TestTyposAndNoOpsAreTold: as a new user writes them, a misspelt opt-in, an opt-in
// that is not a boolean and a source's bad settings each get a Warning Event on their
// object, naming the key meant; the workload that opted in rightly rolls once, with
// the source's good settings.
func TestTyposAndNoOpsAreTold(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	startWatcher(t, c)
	ns := labeledNamespace(t, c)

	cm := createConfigMap(t, c, ns, "app", map[string]string{"k": "v0"})
	updateConfigMap(t, c, ns, cm.Name, func(cm *corev1.ConfigMap) {
		cm.Annotations = map[string]string{confighash.AnnotationWaveSize: "lots", confighash.Domain + "/ignroe": "true"}
	})
	tmpl := fixtures.EnvFromTemplate("app")
	createDeployment(t, c, ns, fixtures.AnnotatedDeployment("typo", map[string]string{confighash.Domain + "/injct": "true"}, tmpl))
	createDeployment(t, c, ns, fixtures.AnnotatedDeployment("yes", map[string]string{confighash.AnnotationInject: "yes"}, tmpl))
	createDeployment(t, c, ns, fixtures.AnnotatedDeployment("good", map[string]string{confighash.AnnotationInject: "true",
		confighash.Domain + "/include-configmap": "app"}, tmpl))
	expectRollouts(t, c, ns, map[string]int{"typo": 1, "yes": 1, "good": 1})

	for _, c := range []struct{ kind, name, reason, want string }{
		{"Deployment", "typo", "BadAnnotation", "did you mean " + confighash.AnnotationInject + "?"},
		{"Deployment", "yes", "BadAnnotation", `want "true" or "false"`},
		{"Deployment", "good", "BadAnnotation", "did you mean " + confighash.AnnotationIncludeConfigMaps + "?"},
		{"ConfigMap", "app", "BadSetting", `want a number of workloads`},
		{"ConfigMap", "app", "BadSetting", "did you mean " + confighash.AnnotationIgnore + "?"},
	} {
		if got := warningOn(t, testCluster, ns, c.kind, c.name, c.reason); !strings.Contains(got, c.want) {
			t.Errorf("%s %s: %s Event %q, want it to say %q", c.kind, c.name, c.reason, got, c.want)
		}
	}
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "app"}, "k", "v1")
	expectRollouts(t, c, ns, map[string]int{"typo": 1, "yes": 1, "good": 2})
}
