package confighash

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind is a workload kind confighash supports.
type Kind struct {
	schema.GroupVersionKind
	// Resource is the plural resource name, as in webhook rules and RBAC.
	Resource string
	// TemplatePath is where the pod template lives in the object.
	TemplatePath []string
}

// The supported workload kinds. Argo Rollouts are read as unstructured objects, so
// confighash does not depend on Argo's Go module.
var (
	Deployment  = Kind{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "deployments", []string{"spec", "template"}}
	StatefulSet = Kind{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}, "statefulsets", []string{"spec", "template"}}
	DaemonSet   = Kind{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}, "daemonsets", []string{"spec", "template"}}
	CronJob     = Kind{schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "CronJob"}, "cronjobs", []string{"spec", "jobTemplate", "spec", "template"}}
	Rollout     = Kind{schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Rollout"}, "rollouts", []string{"spec", "template"}}
)

// Kinds lists every supported workload kind.
var Kinds = []Kind{Deployment, StatefulSet, DaemonSet, CronJob, Rollout}

// ErrUnsupportedKind is returned for objects that are not a supported workload kind.
var ErrUnsupportedKind = errors.New("unsupported workload kind")

// ErrNoPodTemplate is returned for a workload of a supported kind that has no pod
// template of its own: an Argo Rollout that references a Deployment's (workloadRef),
// whose template Argo requires to stay empty.
var ErrNoPodTemplate = errors.New("no pod template of its own")

// LookupKind returns the supported kind with the given group, version and kind.
func LookupKind(gvk schema.GroupVersionKind) (Kind, error) {
	for _, k := range Kinds {
		if k.GroupVersionKind == gvk {
			return k, nil
		}
	}
	return Kind{}, fmt.Errorf("%w: %s", ErrUnsupportedKind, gvk)
}

// ParseKinds parses a comma-separated list of workload resources, as in
// "deployments,cronjobs"; empty means every supported kind.
func ParseKinds(list string) ([]Kind, error) {
	var kinds []Kind
	for _, field := range strings.Split(list, ",") {
		name := strings.ToLower(strings.TrimSpace(field))
		if name == "" {
			continue
		}
		i := slices.IndexFunc(Kinds, func(k Kind) bool { return k.Resource == name })
		if i < 0 {
			return nil, fmt.Errorf("%w: %q; want some of deployments, statefulsets, daemonsets, cronjobs, rollouts", ErrUnsupportedKind, name)
		}
		if !slices.ContainsFunc(kinds, func(k Kind) bool { return k.Resource == name }) {
			kinds = append(kinds, Kinds[i])
		}
	}
	if len(kinds) == 0 {
		return Kinds, nil
	}
	return kinds, nil
}

// Workload is what confighash reads of a workload.
type Workload struct {
	Kind        Kind
	Namespace   string
	Name        string
	Annotations map[string]string
	// Template is the pod template; for a typed object it points into the object.
	Template *corev1.PodTemplateSpec
}

// WorkloadOf returns the workload view of a typed object of a supported kind, or of an
// unstructured object of any supported kind.
func WorkloadOf(obj runtime.Object) (*Workload, error) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return typed(Deployment, o.ObjectMeta, &o.Spec.Template), nil
	case *appsv1.StatefulSet:
		return typed(StatefulSet, o.ObjectMeta, &o.Spec.Template), nil
	case *appsv1.DaemonSet:
		return typed(DaemonSet, o.ObjectMeta, &o.Spec.Template), nil
	case *batchv1.CronJob:
		return typed(CronJob, o.ObjectMeta, &o.Spec.JobTemplate.Spec.Template), nil
	case *unstructured.Unstructured:
		return fromUnstructured(o)
	case nil:
		return nil, fmt.Errorf("%w: no object", ErrUnsupportedKind)
	default:
		return nil, fmt.Errorf("%w: %T", ErrUnsupportedKind, obj)
	}
}

func typed(kind Kind, meta metav1.ObjectMeta, tmpl *corev1.PodTemplateSpec) *Workload {
	return &Workload{Kind: kind, Namespace: meta.Namespace, Name: meta.Name, Annotations: meta.Annotations, Template: tmpl}
}

func fromUnstructured(u *unstructured.Unstructured) (*Workload, error) {
	kind, err := LookupKind(u.GroupVersionKind())
	if err != nil {
		return nil, err
	}
	if ref, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "workloadRef"); ref != nil && kind.GroupVersionKind == Rollout.GroupVersionKind {
		return nil, fmt.Errorf("%w: the Rollout uses the pod template of %s through workloadRef; opt that in instead", ErrNoPodTemplate, refName(ref))
	}
	// No copy: the converter only reads the template into a new typed one.
	field, _, err := unstructured.NestedFieldNoCopy(u.Object, kind.TemplatePath...)
	if err != nil {
		return nil, fmt.Errorf("read %s pod template: %w", kind.Kind, err)
	}
	if field == nil {
		return nil, fmt.Errorf("%w: %s is not set", ErrNoPodTemplate, strings.Join(kind.TemplatePath, "."))
	}
	raw, ok := field.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("read %s pod template: %s is of type %T, want an object", kind.Kind, strings.Join(kind.TemplatePath, "."), field)
	}
	tmpl := &corev1.PodTemplateSpec{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, tmpl); err != nil {
		return nil, fmt.Errorf("decode %s pod template: %w", kind.Kind, err)
	}
	return &Workload{Kind: kind, Namespace: u.GetNamespace(), Name: u.GetName(), Annotations: u.GetAnnotations(), Template: tmpl}, nil
}

// refName names the object a workloadRef points to, as Kind/name when it can.
func refName(ref any) string {
	m, _ := ref.(map[string]any)
	kind, _ := m["kind"].(string)
	name, _ := m["name"].(string)
	if kind == "" || name == "" {
		return "another workload"
	}
	return kind + "/" + name
}

// TemplateChanged reports whether a pod template changed apart from confighash's hash:
// the workload rolls by itself, and its new pods read the current data.
func TemplateChanged(old, now *corev1.PodTemplateSpec) bool {
	withoutHash := func(t *corev1.PodTemplateSpec) corev1.PodTemplateSpec {
		c := *t
		c.Annotations = maps.Clone(t.Annotations)
		delete(c.Annotations, AnnotationHash)
		if len(c.Annotations) == 0 {
			c.Annotations = nil
		}
		return c
	}
	a, b := withoutHash(old), withoutHash(now)
	return !equality.Semantic.DeepEqual(&a, &b)
}
