package watcher

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/confighash/confighash"
)

// toView is the transform as the watcher runs it by default.
var toView = viewTransform(confighash.Vocabulary{Reloader: true}, confighash.Builtin)

func deploymentUsing(annotations map[string]string, cm string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", ResourceVersion: "5", Annotations: annotations},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}},
		}}}}},
	}
}

func TestViewKeepsWhatTheIndexAndTheCheckNeed(t *testing.T) {
	obj, err := toView(deploymentUsing(map[string]string{
		confighash.AnnotationInject:  "true",
		confighash.AnnotationSources: "v1 configmap/cfg=0100000000000000",
	}, "cfg"))
	if err != nil {
		t.Fatal(err)
	}
	v, ok := obj.(*view)
	if !ok {
		t.Fatalf("toView() = %T", obj)
	}
	if v.Kind.Kind != "Deployment" || v.Namespace != "ns" || v.Name != "web" || v.ResourceVersion != "5" {
		t.Fatalf("view = %+v", v)
	}
	if len(v.References) != 1 || v.References[0].Name != "cfg" || len(v.Record) != 1 || v.RecordErr != nil {
		t.Fatalf("references %+v, record %v (%v)", v.References, v.Record, v.RecordErr)
	}
	if !v.MayUse(confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}) || v.MayUse(confighash.SourceRef{Kind: confighash.Secret, Name: "cfg"}) {
		t.Fatal("the view may not use ConfigMap/cfg, or may use Secret/cfg")
	}
}

// A workload without annotations may count in a namespace that opts every workload
// in; one that opts out never does.
func TestWorkloadsThatOptOutUseNothing(t *testing.T) {
	cfg := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}
	obj, _ := toView(deploymentUsing(nil, "cfg"))
	if !obj.(*view).MayUse(cfg) {
		t.Fatal("a workload without annotations may not use the ConfigMap its pod template uses")
	}
	obj, _ = toView(deploymentUsing(map[string]string{confighash.ReloaderAuto: "false"}, "cfg"))
	if obj.(*view).MayUse(cfg) {
		t.Fatal("a workload that opts out may use a ConfigMap")
	}
}

func TestAWorkloadMayUseWhatItNamesOrMatches(t *testing.T) {
	obj, _ := toView(deploymentUsing(map[string]string{
		confighash.ReloaderSecretReload:    "db",
		confighash.ReloaderConfigMapReload: "app-.*",
	}, "cfg"))
	v := obj.(*view)
	for ref, want := range map[confighash.SourceRef]bool{
		{Kind: confighash.ConfigMap, Name: "cfg"}:     true,
		{Kind: confighash.Secret, Name: "db"}:         true,
		{Kind: confighash.ConfigMap, Name: "app-web"}: true,
		{Kind: confighash.Secret, Name: "app-web"}:    false,
		{Kind: confighash.ConfigMap, Name: "other"}:   false,
	} {
		if v.MayUse(ref) != want {
			t.Errorf("MayUse(%s) = %v, want %v", ref, !want, want)
		}
	}
}

// A Rollout that takes its pod template from a Deployment must never be touched or
// healed: Argo refuses a template next to a workloadRef.
func TestRolloutWithAWorkloadRefIsNotAWorkloadToWatch(t *testing.T) {
	ro := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": map[string]any{"namespace": "ns", "name": "r", "annotations": map[string]any{confighash.AnnotationInject: "true"}},
		"spec":     map[string]any{"workloadRef": map[string]any{"kind": "Deployment", "name": "web"}},
	}}
	obj, err := toView(ro)
	if err != nil {
		t.Fatal(err)
	}
	if _, isView := obj.(*view); isView {
		t.Fatal("a Rollout with a workloadRef became a view the watcher acts on")
	}
}

func TestAViewChangesOnlyWithWhatDecides(t *testing.T) {
	a, _ := toView(deploymentUsing(map[string]string{confighash.AnnotationInject: "true"}, "cfg"))
	b := deploymentUsing(map[string]string{confighash.AnnotationInject: "true", "other": "x"}, "cfg")
	b.ResourceVersion = "6"
	bv, _ := toView(b)
	if !a.(*view).State.Equal(bv.(*view).State) {
		t.Fatal("another annotation and a new resourceVersion make a different view")
	}
	c, _ := toView(deploymentUsing(map[string]string{confighash.AnnotationInject: "true"}, "other"))
	if a.(*view).State.Equal(c.(*view).State) {
		t.Fatal("a different source makes the same view")
	}
}
