package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/fixtures"
)

// Kinds configured by --extra-kind, and one that is not: no controller runs for them
// here, so an object's generation counts the changes of its pod template.
var (
	webGVR     = schema.GroupVersionResource{Group: "apps.example.com", Version: "v1", Resource: "webs"}
	knativeGVR = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "services"}
	gadgetGVR  = schema.GroupVersionResource{Group: "apps.example.com", Version: "v1", Resource: "gadgets"}
)

// customWorkload is an object of a custom kind with the pod template at path.
func customWorkload(t testing.TB, gvr schema.GroupVersionResource, kind, name string, annotations map[string]any, tmpl corev1.PodTemplateSpec, path ...string) *unstructured.Unstructured {
	t.Helper()
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&tmpl)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetAPIVersion(gvr.GroupVersion().String())
	u.SetKind(kind)
	u.SetName(name)
	if err := unstructured.SetNestedField(u.Object, annotations, "metadata", "annotations"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(u.Object, raw, path...); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestAnyKindWithAPodTemplateIsHashedAtCreateAndRolledOnce(t *testing.T) {
	c := sharedCluster(t)
	installCRD(t, c, webGVR, "Web")
	installCRD(t, c, knativeGVR, "Service")
	installCRD(t, c, gadgetGVR, "Gadget")
	kinds := []string{"--extra-kind=apps.example.com/v1:Web:webs:spec.workload.template", "--extra-kind=serving.knative.dev/v1:Service:services:spec.template"}
	wh := startWebhook(t, c, kinds...)
	startWatcher(t, c, kinds...)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})

	// A Web opted in on its metadata, its template at a path of its own; a Knative
	// Service opted in on its pod template, as Knative users annotate Revisions; a
	// Gadget, of a kind not listed.
	inject := map[string]any{confighash.AnnotationInject: "true"}
	templated := fixtures.EnvFromTemplate("cfg")
	templated.Annotations = map[string]string{confighash.AnnotationInject: "true"}
	createCustom(t, c, webGVR, ns, customWorkload(t, webGVR, "Web", "web", inject, fixtures.EnvFromTemplate("cfg"), "spec", "workload", "template"))
	createCustom(t, c, knativeGVR, ns, customWorkload(t, knativeGVR, "Service", "hello", nil, templated, "spec", "template"))
	createCustom(t, c, gadgetGVR, ns, customWorkload(t, gadgetGVR, "Gadget", "gadget", inject, fixtures.EnvFromTemplate("cfg"), "spec", "template"))

	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	type object struct {
		gvr  schema.GroupVersionResource
		name string
		path []string
	}
	web, knative, gadget := object{webGVR, "web", []string{"spec", "workload", "template"}}, object{knativeGVR, "hello", []string{"spec", "template"}}, object{gadgetGVR, "gadget", []string{"spec", "template"}}
	read := func(o object) (hash string, generation int64, annotations map[string]string) {
		u, err := dyn.Resource(o.gvr).Namespace(ns).Get(t.Context(), o.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hash, _, _ = unstructured.NestedString(u.Object, append(o.path, "metadata", "annotations", confighash.AnnotationHash)...)
		return hash, u.GetGeneration(), u.GetAnnotations()
	}
	created := map[string]string{}
	for _, o := range []object{web, knative} {
		hash, generation, _ := read(o)
		if !strings.HasPrefix(hash, "v1:") || generation != 1 {
			t.Fatalf("%s %s: hash %q at generation %d, want one written at create", o.gvr.Resource, o.name, hash, generation)
		}
		created[o.name] = hash
	}

	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	for _, o := range []object{web, knative} {
		waitFor(t, 30*time.Second, o.name+" to roll", func() bool { _, g, _ := read(o); return g == 2 })
	}
	// An unrelated write of the Web rolls nothing either.
	if _, err := dyn.Resource(webGVR).Namespace(ns).Patch(t.Context(), "web", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"team":"a"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(quietPeriod)
	for _, o := range []object{web, knative} {
		hash, generation, _ := read(o)
		if generation != 2 || hash == created[o.name] || !strings.HasPrefix(hash, "v1:") {
			t.Errorf("%s %s: generation %d, hash %q (at create %q); want one rollout to a new hash", o.gvr.Resource, o.name, generation, hash, created[o.name])
		}
	}

	// The kind not listed: never hashed, never touched, never sent to the webhook.
	hash, generation, annotations := read(gadget)
	if hash != "" || generation != 1 || annotations[confighash.AnnotationTrigger] != "" || annotations[confighash.AnnotationSources] != "" {
		t.Errorf("the Gadget, of a kind not listed: hash %q, generation %d, annotations %v; want it untouched", hash, generation, annotations)
	}
	if n := wh.metric(t, `confighash_webhook_mutations_total{kind="Gadget"`); n != 0 {
		t.Errorf("the webhook was called %v times for a Gadget", n)
	}
	if n := wh.metric(t, `confighash_webhook_mutations_total{kind="Web"`); n == 0 {
		t.Error("the webhook counts no admission of the Web: the metric read cannot tell what was called")
	}
}
