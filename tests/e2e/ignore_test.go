package e2e

import (
	"testing"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/fixtures"
)

// TestResourcesToIgnoreSecretsLeavesSecretsOut: installed with Reloader's
// --resources-to-ignore=secrets, a Deployment that uses a ConfigMap and a Secret rolls
// once for a change of the ConfigMap and never for one of the Secret; the webhook
// reads no Secret to decide, and the watcher watches none.
func TestResourcesToIgnoreSecretsLeavesSecretsOut(t *testing.T) {
	c := sharedCluster(t)
	wh := startWebhook(t, c, "--resources-to-ignore=secrets")
	w := startWatcher(t, c, "--resources-to-ignore=secrets")
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	createSecret(t, c, ns, "db", map[string]string{"k": "0"})
	createDeployment(t, c, ns, fixtures.Deployment("web", 0, fixtures.UsingTemplate([]string{"cfg"}, []string{"db"})))
	expectRollouts(t, c, ns, map[string]int{"web": 1})

	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.Secret, Name: "db"}, "k", "1")
	expectRollouts(t, c, ns, map[string]int{"web": 1})
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	expectRollouts(t, c, ns, map[string]int{"web": 2})
	reads := func(kind string) float64 {
		return wh.metric(t, `confighash_webhook_source_reads_total{from="cache",kind="`+kind+`"}`) +
			wh.metric(t, `confighash_webhook_source_reads_total{from="live",kind="`+kind+`"}`)
	}
	if cms, secrets := reads("ConfigMap"), reads("Secret"); cms == 0 || secrets != 0 {
		t.Fatalf("the webhook read %v ConfigMaps and %v Secrets, want some and none", cms, secrets)
	}
	seen := func(kind string) float64 {
		return w.metric(t, `confighash_watcher_source_changes_total{kind="`+kind+`"}`)
	}
	if cms, secrets := seen("ConfigMap"), seen("Secret"); cms == 0 || secrets != 0 {
		t.Fatalf("the watcher saw %v ConfigMap changes and %v Secret changes, want some and none", cms, secrets)
	}
}
