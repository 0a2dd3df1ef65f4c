package e2e

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/fixtures"
)

// TestRecordNeverTakesAWorkloadOverTheAnnotationLimit: a Deployment whose annotations
// are just under the API server's 256 KiB, whose sources record would take it over,
// is admitted unhashed with a warning, counted, and given a Warning Event; the patch
// does not turn the allowed write into a refused one.
func TestRecordNeverTakesAWorkloadOverTheAnnotationLimit(t *testing.T) {
	c := sharedCluster(t)
	wh := startWebhook(t, c)
	startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "app", map[string]string{"greeting": "hello"})

	d := fixtures.Deployment("big", 1, fixtures.EnvFromTemplate("app"))
	const padding = "example.com/notes"
	// 50 bytes short of the bound: the record ("confighash.dev/sources" and about 90
	// bytes) does not fit.
	d.Annotations[padding] = strings.Repeat("x", confighash.MaxAnnotationBytes-50-len(padding)-len(confighash.AnnotationInject)-len("true"))
	client, warned := warnedClient(t, c)
	created, err := client.AppsV1().Deployments(ns).Create(t.Context(), d, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a Deployment 50 bytes under the annotation limit is refused: %v", err)
	}
	if h := created.Spec.Template.Annotations[confighash.AnnotationHash]; h != "" || created.Annotations[confighash.AnnotationSources] != "" {
		t.Fatalf("hashed (%q) or recorded over the limit", h)
	}
	if !warned.has("left unhashed") {
		t.Fatalf("warnings %q, want one saying it is left unhashed", warned.all())
	}
	if got := wh.metric(t, `confighash_webhook_mutations_total{kind="Deployment",result="annotations_too_large"}`); got != 1 {
		t.Errorf("annotations_too_large admissions = %v, want 1", got)
	}
	waitFor(t, 10*time.Second, "a BadAnnotation Event saying it is left unhashed", func() bool {
		events, err := c.Client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=BadAnnotation,involvedObject.name=big"})
		return err == nil && len(events.Items) > 0 && strings.Contains(events.Items[0].Message, "left unhashed")
	})

	// Once there is room, it is recorded (adopted by the watcher: its pods have the data).
	patch := `{"metadata":{"annotations":{"` + padding + `":null}}}`
	if _, err := client.AppsV1().Deployments(ns).Patch(t.Context(), "big", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the sources record once its annotations leave room", func() bool {
		got, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), "big", metav1.GetOptions{})
		return err == nil && got.Annotations[confighash.AnnotationSources] != ""
	})
}
