package confighash

import (
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

var testTemplate = corev1.PodTemplateSpec{
	ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"t": "1"}},
	Spec: withVolume(corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}),
}

var testMeta = metav1.ObjectMeta{Namespace: "ns", Name: "w", Annotations: map[string]string{AnnotationInject: "true"}}

func TestWorkloadOf(t *testing.T) {
	rollout := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": map[string]any{"namespace": "ns", "name": "w", "annotations": map[string]any{AnnotationInject: "true"}},
		"spec": map[string]any{
			"strategy": map[string]any{"canary": map[string]any{}},
			"template": map[string]any{
				"metadata": map[string]any{"annotations": map[string]any{"t": "1"}},
				"spec":     map[string]any{"volumes": []any{map[string]any{"name": "v", "configMap": map[string]any{"name": "cfg"}}}},
			},
		},
	}}
	unstructuredDeployment, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, ObjectMeta: testMeta,
		Spec: appsv1.DeploymentSpec{Template: testTemplate},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		obj  runtime.Object
		kind Kind
	}{
		{"a Deployment's template is spec.template", &appsv1.Deployment{ObjectMeta: testMeta, Spec: appsv1.DeploymentSpec{Template: testTemplate}}, Deployment},
		{"a StatefulSet's template is spec.template", &appsv1.StatefulSet{ObjectMeta: testMeta, Spec: appsv1.StatefulSetSpec{Template: testTemplate}}, StatefulSet},
		{"a DaemonSet's template is spec.template", &appsv1.DaemonSet{ObjectMeta: testMeta, Spec: appsv1.DaemonSetSpec{Template: testTemplate}}, DaemonSet},
		{"a CronJob's template is spec.jobTemplate.spec.template", &batchv1.CronJob{ObjectMeta: testMeta, Spec: batchv1.CronJobSpec{JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: testTemplate}}}}, CronJob},
		{"an Argo Rollout is read without Argo's types", rollout, Rollout},
		{"an unstructured Deployment reads like a typed one", &unstructured.Unstructured{Object: unstructuredDeployment}, Deployment},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := Builtin.WorkloadOf(tt.obj)
			if err != nil {
				t.Fatal(err)
			}
			if w.Kind.Kind != tt.kind.Kind || w.Namespace != "ns" || w.Name != "w" || w.Annotations[AnnotationInject] != "true" {
				t.Fatalf("WorkloadOf() = %s %s/%s %v", w.Kind.Kind, w.Namespace, w.Name, w.Annotations)
			}
			if w.Template.Annotations["t"] != "1" {
				t.Fatalf("template annotations = %v, want t=1", w.Template.Annotations)
			}
			refs := References(w.Template)
			if len(refs) != 1 || refs[0].SourceRef != (SourceRef{ConfigMap, "cfg"}) || !refs[0].AllKeys {
				t.Fatalf("References() = %+v, want the whole ConfigMap cfg", refs)
			}
		})
	}
}

func TestWorkloadOfRejectsWhatItCannotRead(t *testing.T) {
	tests := []struct {
		name    string
		obj     runtime.Object
		wantErr error
	}{
		{"a Pod is not a workload kind", &corev1.Pod{}, ErrUnsupportedKind},
		{"no object", nil, ErrUnsupportedKind},
		{"an unknown unstructured kind", &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Thing"}}, ErrUnsupportedKind},
		{"a Rollout of another version", &unstructured.Unstructured{Object: map[string]any{"apiVersion": "argoproj.io/v1beta1", "kind": "Rollout"}}, ErrUnsupportedKind},
		{"a template that is not an object", &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "spec": map[string]any{"template": "oops"}}}, nil},
		{"a template with a wrongly typed field", &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "spec": map[string]any{"template": map[string]any{"spec": map[string]any{"volumes": "oops"}}}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Builtin.WorkloadOf(tt.obj)
			if err == nil {
				t.Fatal("WorkloadOf() succeeded, want an error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("WorkloadOf() error = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestWorkloadsWithoutAPodTemplateOfTheirOwn(t *testing.T) {
	tests := []struct {
		name string
		spec map[string]any
		want string
	}{
		{"a Rollout with a workloadRef", map[string]any{"workloadRef": map[string]any{"kind": "Deployment", "name": "web"}},
			"uses the pod template of Deployment/web through workloadRef"},
		// Argo's types write an empty template next to the workloadRef.
		{"a Rollout with a workloadRef and an empty template", map[string]any{
			"workloadRef": map[string]any{"kind": "Deployment", "name": "web"},
			"template":    map[string]any{"metadata": map[string]any{}, "spec": map[string]any{}}},
			"uses the pod template of Deployment/web through workloadRef"},
		{"a Rollout without a template", map[string]any{}, "spec.template is not set"},
		{"a Rollout with a null template", map[string]any{"template": nil}, "spec.template is not set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Builtin.WorkloadOf(&unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "spec": tt.spec}})
			if !errors.Is(err, ErrNoPodTemplate) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("WorkloadOf() error = %v, want ErrNoPodTemplate saying %q", err, tt.want)
			}
		})
	}
}

// FuzzWorkloadFromJSON feeds arbitrary JSON through the unstructured path the webhook
// uses for Rollouts: it may fail, never panic.
func FuzzWorkloadFromJSON(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"argoproj.io/v1alpha1","kind":"Rollout","spec":{"template":{"spec":{"containers":[{"name":"c","envFrom":[{"configMapRef":{"name":"a"}}]}]}}}}`))
	f.Add([]byte(`{"apiVersion":"batch/v1","kind":"CronJob","spec":{"jobTemplate":{"spec":{"template":{"spec":{"volumes":[{"name":"v","secret":{"secretName":"s","items":[{"key":"k","path":"p"}]}}]}}}}}}`))
	f.Add([]byte(`{"apiVersion":"apps/v1","kind":"Deployment","spec":{"template":[]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			return
		}
		w, err := Builtin.WorkloadOf(u)
		if err != nil {
			return
		}
		for _, r := range References(w.Template) {
			if r.Name == "" || (r.AllKeys && len(r.Keys) > 0) {
				t.Fatalf("bad reference %+v", r)
			}
		}
	})
}

func TestParseKinds(t *testing.T) {
	kinds, err := ParseKinds(" Deployments, cronjobs,deployments,", nil)
	if err != nil || len(kinds) != 2 || kinds[0].Kind != "Deployment" || kinds[1].Kind != "CronJob" {
		t.Fatalf("ParseKinds() = %v, %v; want Deployment and CronJob", kinds, err)
	}
	if kinds, err := ParseKinds("", nil); err != nil || len(kinds) != len(Builtin) {
		t.Fatalf("ParseKinds(\"\") = %v, %v; want every kind", kinds, err)
	}
	if _, err := ParseKinds("deployments,pods", nil); !errors.Is(err, ErrUnsupportedKind) || !strings.Contains(err.Error(), `"pods"`) {
		t.Fatalf("ParseKinds(pods) error = %v, want the unsupported kind named", err)
	}
}

func TestParseKindReadsAnExtraKind(t *testing.T) {
	kinds, err := ParseKinds("deployments", []string{"serving.knative.dev/v1:Service:services:spec.template", " apps.kruise.io/v1alpha1:CloneSet:clonesets:spec.template "})
	if err != nil {
		t.Fatal(err)
	}
	if len(kinds) != 3 {
		t.Fatalf("ParseKinds() = %v, want Deployment and two extra kinds", kinds)
	}
	knative := kinds[1]
	if knative.Group != "serving.knative.dev" || knative.Version != "v1" || knative.Kind != "Service" || knative.Resource != "services" || strings.Join(knative.TemplatePath, ".") != "spec.template" {
		t.Fatalf("Knative Service read as %+v", knative)
	}
	for _, tt := range []struct{ spec, want string }{
		{"serving.knative.dev/v1:Service:services", "want apiVersion:Kind:resource:template path"},
		{"serving.knative.dev:Service:services:spec.template", "is not an apiVersion"},
		{"serving.knative.dev/v1:service:services:spec.template", "capital letter"},
		{"serving.knative.dev/v1:Service:Services:spec.template", "lower case and plural"},
		{"serving.knative.dev/v1:Service:services:spec..template", "fields separated by dots"},
		{"example.com/v1:Deployment:deployments:spec.template", "kind Deployment is already handled"},
	} {
		if _, err := ParseKinds("", []string{tt.spec}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseKinds(%q) error = %v, want one saying %q", tt.spec, err, tt.want)
		}
	}
	if _, err := ParseKinds("", []string{"a.io/v1:Web:webs:spec.template", "b.io/v1:Web:webs:spec.template"}); err == nil {
		t.Error("two extra kinds of one name were accepted")
	}
}

func TestAnExtraKindIsReadAtItsPathAndOnlyWhenListed(t *testing.T) {
	kinds, err := ParseKinds("", []string{"apps.example.com/v1:Web:webs:spec.workload.template"})
	if err != nil {
		t.Fatal(err)
	}
	web := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps.example.com/v1", "kind": "Web",
		"metadata": map[string]any{"namespace": "ns", "name": "w"},
		"spec": map[string]any{"workload": map[string]any{"template": map[string]any{
			"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "envFrom": []any{map[string]any{"configMapRef": map[string]any{"name": "cfg"}}}}}},
		}}},
	}}
	w, err := kinds.WorkloadOf(web)
	if err != nil {
		t.Fatal(err)
	}
	if refs := References(w.Template); w.Kind.Kind != "Web" || len(refs) != 1 || refs[0].Name != "cfg" {
		t.Fatalf("WorkloadOf() = %s using %v, want Web using ConfigMap cfg", w.Kind.Kind, refs)
	}
	if _, err := Builtin.WorkloadOf(web); !errors.Is(err, ErrUnsupportedKind) {
		t.Fatalf("a kind not listed: error = %v, want ErrUnsupportedKind", err)
	}
}
