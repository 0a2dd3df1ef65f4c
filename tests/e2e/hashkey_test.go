package e2e

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/fixtures"
)

// TestFaultHashKeyDeleted: the components read the key once, at start. Deleting its
// Secret while they run changes nothing: a change still rolls once. Restarted, they
// create a new key, which changes every hash: each opted-in workload rolls exactly
// once, and then nothing more (docs/security.md says so).
func TestFaultHashKeyDeleted(t *testing.T) {
	c := sharedCluster(t)
	wh, w := startWebhook(t, c), startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	for _, name := range []string{"web", "api"} {
		createDeployment(t, c, ns, fixtures.Deployment(name, 0, fixtures.EnvFromTemplate("cfg")))
	}
	expectRollouts(t, c, ns, map[string]int{"web": 1, "api": 1})
	keyBytes := func() string {
		s, err := c.Client.CoreV1().Secrets(installNamespace).Get(t.Context(), "confighash-hash-key", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return string(s.Data["key"])
	}
	old := keyBytes()

	if err := c.Client.CoreV1().Secrets(installNamespace).Delete(t.Context(), "confighash-hash-key", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	expectRollouts(t, c, ns, map[string]int{"web": 2, "api": 2})

	wh.stop(t)
	w.stop(t)
	startWebhook(t, c)
	startWatcher(t, c)
	expectRollouts(t, c, ns, map[string]int{"web": 3, "api": 3})
	if keyBytes() == old {
		t.Fatal("the key was not replaced")
	}
}
