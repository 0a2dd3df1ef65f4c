package e2e

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// TestTheHashKeyNeverLeaks: through a creation, a change, a rollout, a heal and an
// alert, at debug level, the HMAC key appears in no log line, metric, Event,
// annotation or alert, in any of its usual spellings.
func TestTheHashKeyNeverLeaks(t *testing.T) {
	c := sharedCluster(t)
	sink := newAlertSink(t, 0)
	wh := startWebhook(t, c)
	w := startWatcher(t, c, append(alertArgs(sink.URL), "--heal-after=1")...)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	createDeployment(t, c, ns, fixtures.Deployment("web", 1, fixtures.EnvFromTemplate("cfg")))
	expectReplicaSets(t, c, ns, "web", 1)
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	expectReplicaSets(t, c, ns, "web", 2)
	webhookMetrics := metricsText(t, wh.ops)
	wh.stop(t) // the next change is healed by the watcher
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "2")
	expectReplicaSets(t, c, ns, "web", 3)
	waitFor(t, 30*time.Second, "two alerts", func() bool { return len(sink.received()) >= 2 })

	secret, err := c.Client.CoreV1().Secrets(installNamespace).Get(t.Context(), "confighash-hash-key", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw := secret.Data["key"]
	spellings := map[string]string{
		"hex": hex.EncodeToString(raw), "HEX": strings.ToUpper(hex.EncodeToString(raw)),
		"base64": base64.StdEncoding.EncodeToString(raw), "base64url": base64.RawURLEncoding.EncodeToString(raw),
		"raw": string(raw),
	}
	places := map[string]string{
		"webhook log": cluster.LogTail(wh.logPath, 1<<20),
		"watcher log": cluster.LogTail(w.logPath, 1<<20),
	}
	places["webhook metrics"], places["watcher metrics"] = webhookMetrics, metricsText(t, w.ops)
	events, err := c.Client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(events)
	places["events"] = string(b)
	d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(d.ObjectMeta.Annotations)
	a, _ := json.Marshal(d.Spec.Template.Annotations)
	places["annotations"] = string(b) + string(a)
	b, _ = json.Marshal(sink.received())
	places["alerts"] = string(b)
	if len(places["webhook log"]) == 0 || len(places["watcher log"]) == 0 || !strings.Contains(places["events"], "Healed") {
		t.Fatalf("nothing to search: the test did not exercise the components")
	}
	for place, text := range places {
		for spelling, s := range spellings {
			if strings.Contains(text, s) {
				t.Errorf("the hash key (%s) appears in the %s", spelling, place)
			}
		}
	}
}

func metricsText(t *testing.T, ops string) string {
	t.Helper()
	resp, err := http.Get(ops + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
