package confighash

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
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

// The built-in workload kinds. Argo Rollouts are read as unstructured objects, so
// confighash does not depend on Argo's Go module.
var (
	Deployment  = Kind{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "deployments", []string{"spec", "template"}}
	StatefulSet = Kind{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}, "statefulsets", []string{"spec", "template"}}
	DaemonSet   = Kind{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}, "daemonsets", []string{"spec", "template"}}
	CronJob     = Kind{schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "CronJob"}, "cronjobs", []string{"spec", "jobTemplate", "spec", "template"}}
	Job         = Kind{schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}, "jobs", []string{"spec", "template"}}
	Rollout     = Kind{schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Rollout"}, "rollouts", []string{"spec", "template"}}
)

// Kinds is the set of workload kinds an install handles.
type Kinds []Kind

// Builtin lists the kinds confighash knows without configuration.
var Builtin = Kinds{Deployment, StatefulSet, DaemonSet, CronJob, Job, Rollout}

// ErrUnsupportedKind is returned for objects that are not a supported workload kind.
var ErrUnsupportedKind = errors.New("unsupported workload kind")

// ErrNoPodTemplate is returned for a workload of a supported kind that has no pod
// template of its own: an Argo Rollout that references a Deployment's (workloadRef),
// whose template Argo requires to stay empty.
var ErrNoPodTemplate = errors.New("no pod template of its own")

// Lookup returns the kind of the set with the given group, version and kind.
func (ks Kinds) Lookup(gvk schema.GroupVersionKind) (Kind, error) {
	for _, k := range ks {
		if k.GroupVersionKind == gvk {
			return k, nil
		}
	}
	return Kind{}, fmt.Errorf("%w: %s", ErrUnsupportedKind, gvk)
}

// ParseKinds parses a comma-separated list of built-in workload resources, as in
// "deployments,cronjobs" (empty: every built-in kind), and adds the extra kinds,
// each as ParseKind reads it.
func ParseKinds(list string, extra []string) (Kinds, error) {
	var kinds Kinds
	for _, field := range strings.Split(list, ",") {
		name := strings.ToLower(strings.TrimSpace(field))
		if name == "" {
			continue
		}
		i := slices.IndexFunc(Builtin, func(k Kind) bool { return k.Resource == name })
		if i < 0 {
			return nil, fmt.Errorf("%w: %q; want some of deployments, statefulsets, daemonsets, cronjobs, jobs, rollouts", ErrUnsupportedKind, name)
		}
		if !slices.ContainsFunc(kinds, func(k Kind) bool { return k.Resource == name }) {
			kinds = append(kinds, Builtin[i])
		}
	}
	if len(kinds) == 0 {
		kinds = slices.Clone(Builtin)
	}
	for _, spec := range extra {
		k, err := ParseKind(spec)
		if err != nil {
			return nil, err
		}
		// Kind names key the watcher's caches and its Events: each must be one kind.
		if slices.ContainsFunc(Builtin, func(b Kind) bool { return b.Kind == k.Kind }) || slices.ContainsFunc(kinds, func(b Kind) bool { return b.Kind == k.Kind }) {
			return nil, fmt.Errorf("extra kind %q: kind %s is already handled", spec, k.Kind)
		}
		kinds = append(kinds, k)
	}
	return kinds, nil
}

var celIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParseKind parses an extra workload kind, any kind whose controller rolls its pods
// when their template changes: "apiVersion:Kind:resource:template path", as in
// "serving.knative.dev/v1:Service:services:spec.template".
func ParseKind(spec string) (Kind, error) {
	fields := strings.Split(strings.TrimSpace(spec), ":")
	if len(fields) != 4 {
		return Kind{}, fmt.Errorf("extra kind %q: want apiVersion:Kind:resource:template path, as in serving.knative.dev/v1:Service:services:spec.template", spec)
	}
	gv, err := schema.ParseGroupVersion(fields[0])
	if err != nil || gv.Version == "" || gv.Group == "" && gv.Version != "v1" {
		return Kind{}, fmt.Errorf("extra kind %q: %q is not an apiVersion, as in apps.kruise.io/v1alpha1", spec, fields[0])
	}
	kind, resource, path := fields[1], fields[2], strings.Split(fields[3], ".")
	if kind == "" || strings.ToUpper(kind[:1]) != kind[:1] {
		return Kind{}, fmt.Errorf("extra kind %q: the kind %q must start with a capital letter, as in CloneSet", spec, kind)
	}
	if resource == "" || strings.ToLower(resource) != resource {
		return Kind{}, fmt.Errorf("extra kind %q: the resource %q must be lower case and plural, as in clonesets", spec, resource)
	}
	// The webhook's matchCondition reads the path in CEL: fields must be identifiers.
	if slices.ContainsFunc(path, func(f string) bool { return !celIdentifier.MatchString(f) }) {
		return Kind{}, fmt.Errorf("extra kind %q: the template path %q must name fields separated by dots, as in spec.template", spec, fields[3])
	}
	return Kind{GroupVersionKind: gv.WithKind(kind), Resource: resource, TemplatePath: path}, nil
}

// Typed reports whether the kind is one of Kubernetes' own, read with its Go types;
// the others are custom resources, which an API server may not serve.
func (k Kind) Typed() bool {
	return slices.ContainsFunc([]Kind{Deployment, StatefulSet, DaemonSet, CronJob, Job}, func(t Kind) bool { return t.GroupVersionKind == k.GroupVersionKind })
}

// Recreated reports whether the kind's pod template cannot change once the object is
// made, as a Job's: the webhook hashes it at creation only, and a change of what it
// uses recreates it.
func (k Kind) Recreated() bool { return k.GroupVersionKind == Job.GroupVersionKind }

// Workload is what confighash reads of a workload.
type Workload struct {
	Kind        Kind
	Namespace   string
	Name        string
	Annotations map[string]string
	// Template is the pod template; for a typed object it points into the object.
	Template *corev1.PodTemplateSpec
}

// WorkloadOf returns the workload view of a typed object of a built-in kind, or of an
// unstructured object of a kind of the set.
func (ks Kinds) WorkloadOf(obj runtime.Object) (*Workload, error) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return typed(Deployment, o.ObjectMeta, &o.Spec.Template), nil
	case *appsv1.StatefulSet:
		return typed(StatefulSet, o.ObjectMeta, &o.Spec.Template), nil
	case *appsv1.DaemonSet:
		return typed(DaemonSet, o.ObjectMeta, &o.Spec.Template), nil
	case *batchv1.CronJob:
		return typed(CronJob, o.ObjectMeta, &o.Spec.JobTemplate.Spec.Template), nil
	case *batchv1.Job:
		return typed(Job, o.ObjectMeta, &o.Spec.Template), nil
	case *unstructured.Unstructured:
		kind, err := ks.Lookup(o.GroupVersionKind())
		if err != nil {
			return nil, err
		}
		return fromUnstructured(kind, o)
	case nil:
		return nil, fmt.Errorf("%w: no object", ErrUnsupportedKind)
	default:
		return nil, fmt.Errorf("%w: %T", ErrUnsupportedKind, obj)
	}
}

func typed(kind Kind, meta metav1.ObjectMeta, tmpl *corev1.PodTemplateSpec) *Workload {
	return &Workload{Kind: kind, Namespace: meta.Namespace, Name: meta.Name, Annotations: meta.Annotations, Template: tmpl}
}

func fromUnstructured(kind Kind, u *unstructured.Unstructured) (*Workload, error) {
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
