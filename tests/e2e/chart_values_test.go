package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	runtimeconv "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/webhook"
)

// chartDir is the chart, from this package's directory.
var chartDir = filepath.Join("..", "..", "manifests", "helm", "confighash")

// chartRender is the chart rendered with some values: its objects, or the error helm
// gave instead.
type chartRender struct {
	objs []*unstructured.Unstructured
	err  string
}

// renderChart runs helm template for release confighash in namespace ns.
func renderChart(helm, kubeVersion, ns string, set []string) (*chartRender, error) {
	cmd := exec.Command(helm, append([]string{"template", "confighash", chartDir, "--namespace", ns, "--kube-version", kubeVersion}, set...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			return nil, err
		}
		return &chartRender{err: strings.TrimSpace(stderr.String())}, nil
	}
	r := &chartRender{}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return r, nil
			}
			return nil, fmt.Errorf("helm template %s: %w", strings.Join(set, " "), err)
		}
		if obj != nil {
			r.objs = append(r.objs, &unstructured.Unstructured{Object: obj})
		}
	}
}

// find returns the first object of kind whose decoded form satisfies match.
func find[T any](r *chartRender, kind string, match func(*T) bool) (*T, error) {
	for _, u := range r.objs {
		if u.GetKind() != kind {
			continue
		}
		v := new(T)
		if err := runtimeconv.DefaultUnstructuredConverter.FromUnstructured(u.Object, v); err != nil {
			return nil, err
		}
		if match(v) {
			return v, nil
		}
	}
	return nil, nil
}

// selectsPods reports whether a selector selects a component's pods, whatever the chart's names.
func selectsPods(component string, selector map[string]string) bool {
	return strings.HasSuffix(selector["app.kubernetes.io/name"], "-"+component)
}

func (r *chartRender) deployment(component string) (*appsv1.Deployment, error) {
	d, err := find(r, "Deployment", func(d *appsv1.Deployment) bool { return selectsPods(component, d.Spec.Selector.MatchLabels) })
	if err == nil && d == nil {
		err = fmt.Errorf("no Deployment of the %s", component)
	}
	return d, err
}

func (r *chartRender) container(component string) (corev1.Container, error) {
	d, err := r.deployment(component)
	if err != nil {
		return corev1.Container{}, err
	}
	return d.Spec.Template.Spec.Containers[0], nil
}

func (r *chartRender) pdb(component string) (*policyv1.PodDisruptionBudget, error) {
	return find(r, "PodDisruptionBudget", func(p *policyv1.PodDisruptionBudget) bool { return selectsPods(component, p.Spec.Selector.MatchLabels) })
}

func (r *chartRender) networkPolicy(component string) (*networkingv1.NetworkPolicy, error) {
	return find(r, "NetworkPolicy", func(p *networkingv1.NetworkPolicy) bool {
		return selectsPods(component, p.Spec.PodSelector.MatchLabels)
	})
}

func (r *chartRender) webhooks() ([]admissionregistrationv1.MutatingWebhook, error) {
	cfg, err := find(r, "MutatingWebhookConfiguration", func(*admissionregistrationv1.MutatingWebhookConfiguration) bool { return true })
	if err == nil && cfg == nil {
		err = errors.New("no MutatingWebhookConfiguration")
	}
	if err != nil {
		return nil, err
	}
	return cfg.Webhooks, nil
}

// get returns the object of kind and name, in any namespace, or nil.
func (r *chartRender) get(kind, name string) *unstructured.Unstructured {
	for _, u := range r.objs {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	return nil
}

// check says what is wrong with a render, or nil.
type check func(r *chartRender) error

func allOf(checks ...check) check {
	return func(r *chartRender) error {
		var errs []error
		for _, c := range checks {
			errs = append(errs, c(r))
		}
		return errors.Join(errs...)
	}
}

// rendered fails where helm refused to render.
func rendered(c check) check {
	return func(r *chartRender) error {
		if r.err != "" {
			return fmt.Errorf("not rendered: %s", r.err)
		}
		return c(r)
	}
}

// fails wants helm to refuse, with a message naming what is wrong.
func fails(message string) check {
	return func(r *chartRender) error {
		if !strings.Contains(r.err, message) {
			return fmt.Errorf("want a refusal saying %q, got %q", message, r.err)
		}
		return nil
	}
}

func onContainer(component string, f func(corev1.Container) error) check {
	return rendered(func(r *chartRender) error {
		ctr, err := r.container(component)
		if err != nil {
			return err
		}
		return f(ctr)
	})
}

func onPod(component string, f func(corev1.PodSpec, metav1.ObjectMeta) error) check {
	return rendered(func(r *chartRender) error {
		d, err := r.deployment(component)
		if err != nil {
			return err
		}
		return f(d.Spec.Template.Spec, d.Spec.Template.ObjectMeta)
	})
}

// argIs wants the last value a component is given for a flag to be want; "": the flag
// not given at all.
func argIs(component, name, want string) check {
	return onContainer(component, func(ctr corev1.Container) error {
		got, given := "", false
		for _, arg := range ctr.Args {
			if k, v, _ := strings.Cut(arg, "="); k == name {
				got, given = v, true
			}
		}
		if got != want || (want == "" && given) {
			return fmt.Errorf("%s %s=%q (given: %v), want %q", component, name, got, given, want)
		}
		return nil
	})
}

// switchIs wants a component given a boolean flag, or not.
func switchIs(component, name string, want bool) check {
	return onContainer(component, func(ctr corev1.Container) error {
		return equal(component+" "+name, slices.Contains(ctr.Args, name), want)
	})
}

// emptyFlag wants a flag given, empty.
func emptyFlag(component, name string) check {
	return onContainer(component, func(ctr corev1.Container) error {
		if !slices.Contains(ctr.Args, name+"=") {
			return fmt.Errorf("%s is not given %s= (args %q)", component, name, ctr.Args)
		}
		return nil
	})
}

func bothFlag(name, want string) check {
	return allOf(argIs("webhook", name, want), argIs("watcher", name, want))
}

func envVar(component, name string, want *corev1.EnvVar) check {
	return onContainer(component, func(ctr corev1.Container) error {
		var got *corev1.EnvVar
		for i := range ctr.Env {
			if ctr.Env[i].Name == name {
				got = &ctr.Env[i]
			}
		}
		if !equality.Semantic.DeepEqual(got, want) {
			return fmt.Errorf("%s env %s = %+v, want %+v", component, name, got, want)
		}
		return nil
	})
}

// imageIs wants the components' image to be want.
func imageIs(want string) check {
	return onContainer("watcher", func(ctr corev1.Container) error {
		if ctr.Image != want {
			return fmt.Errorf("image %q, want %q", ctr.Image, want)
		}
		return nil
	})
}

// hasObject wants an object of kind and name to be there, or not, and, there, to satisfy f.
func hasObject(kind, name string, there bool, f func(*unstructured.Unstructured) error) check {
	return rendered(func(r *chartRender) error {
		u := r.get(kind, name)
		switch {
		case u == nil && there:
			return fmt.Errorf("no %s %s", kind, name)
		case u != nil && !there:
			return fmt.Errorf("%s %s is there", kind, name)
		case u != nil && f != nil:
			return f(u)
		}
		return nil
	})
}

// field wants obj's field at path (keys, and indexes of lists) to equal want.
func field(obj *unstructured.Unstructured, want any, path ...string) error {
	var got any = obj.Object
	for _, key := range path {
		switch at := got.(type) {
		case map[string]any:
			got = at[key]
		case []any:
			i, err := strconv.Atoi(key)
			if err != nil || i >= len(at) {
				return fmt.Errorf("%s %s: no .%s", obj.GetKind(), obj.GetName(), strings.Join(path, "."))
			}
			got = at[i]
		default:
			got = nil
		}
	}
	if jsonOf(got) != jsonOf(want) {
		return fmt.Errorf("%s %s .%s = %s, want %s", obj.GetKind(), obj.GetName(), strings.Join(path, "."), jsonOf(got), jsonOf(want))
	}
	return nil
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// scrapeFrom wants both NetworkPolicies' ops-port rule to admit exactly these peers (nil: any source).
func scrapeFrom(peers string) check {
	return rendered(func(r *chartRender) error {
		var want []networkingv1.NetworkPolicyPeer
		if peers != "" {
			if err := json.Unmarshal([]byte(peers), &want); err != nil {
				return err
			}
		}
		for _, component := range []string{"webhook", "watcher"} {
			np, err := r.networkPolicy(component)
			if err != nil || np == nil {
				return fmt.Errorf("the %s's NetworkPolicy: %v", component, err)
			}
			rule := np.Spec.Ingress[len(np.Spec.Ingress)-1]
			if rule.Ports[0].Port.IntValue() != 8080 || !equality.Semantic.DeepEqual(rule.From, want) {
				return fmt.Errorf("the %s's NetworkPolicy admits scrapes from %s, want %s", component, jsonOf(rule.From), jsonOf(want))
			}
		}
		return nil
	})
}

// allowsEvictions wants a component's PodDisruptionBudget, if any, to let at least one
// of replicas pods go.
func allowsEvictions(component string, replicas int) check {
	return rendered(func(r *chartRender) error {
		p, err := r.pdb(component)
		if err != nil || p == nil {
			return err
		}
		if allowed := disruptionsAllowed(p.Spec, replicas); allowed < 1 {
			return fmt.Errorf("the %s's PodDisruptionBudget %s lets %d of %d replicas go", component, jsonOf(p.Spec), allowed, replicas)
		}
		return nil
	})
}

// disruptionsAllowed is what the disruption controller allows of healthy replicas.
func disruptionsAllowed(spec policyv1.PodDisruptionBudgetSpec, replicas int) int {
	if spec.MaxUnavailable != nil {
		v, _ := intstr.GetScaledValueFromIntOrPercent(spec.MaxUnavailable, replicas, true)
		return v
	}
	if spec.MinAvailable != nil {
		v, _ := intstr.GetScaledValueFromIntOrPercent(spec.MinAvailable, replicas, true)
		return replicas - v
	}
	return replicas
}

// chartValue is a value of values.yaml: set (on), null, and, where its default is a
// scalar or list that is not empty, empty.
type chartValue struct {
	name string   // as values.yaml and docs/install.md name it
	form string   // which way of setting it, where a value has several
	with []string // helm flags of every render of the row: what the value needs on, say
	on   []string // helm flags that set it
	// whenOn and whenOff say what must be true of the render with it on, and off.
	whenOn, whenOff check
}

// componentValues are the rows of the values each component has.
func componentValues(component string) []chartValue {
	v := func(s string) string { return component + "." + s }
	defaultAffinity := func(pod corev1.PodSpec, _ metav1.ObjectMeta) error {
		if pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil || pod.Affinity.NodeAffinity != nil {
			return fmt.Errorf("affinity %s, want the default anti-affinity", jsonOf(pod.Affinity))
		}
		return nil
	}
	podField := func(get func(corev1.PodSpec, metav1.ObjectMeta) any, want string) check {
		return onPod(component, func(pod corev1.PodSpec, meta metav1.ObjectMeta) error {
			if got := jsonOf(get(pod, meta)); got != want {
				return fmt.Errorf("%s: %s, want %s", component, got, want)
			}
			return nil
		})
	}
	ctrField := func(get func(corev1.Container) any, want string) check {
		return onContainer(component, func(ctr corev1.Container) error {
			if got := jsonOf(get(ctr)); got != want {
				return fmt.Errorf("%s: %s, want %s", component, got, want)
			}
			return nil
		})
	}
	replicas := func(want string, evictable int) check {
		return allOf(rendered(func(r *chartRender) error {
			d, err := r.deployment(component)
			if err != nil {
				return err
			}
			if got := jsonOf(d.Spec.Replicas); got != want && !(want == "null" && got == "0") {
				return fmt.Errorf("replicas %s, want %s", got, want)
			}
			return nil
		}), allowsEvictions(component, evictable))
	}
	pdbSpec := func(want string) check {
		return rendered(func(r *chartRender) error {
			p, err := r.pdb(component)
			if err != nil {
				return err
			}
			got := "none"
			if p != nil {
				got = jsonOf(map[string]any{"minAvailable": p.Spec.MinAvailable, "maxUnavailable": p.Spec.MaxUnavailable})
			}
			if got != want {
				return fmt.Errorf("the %s's PodDisruptionBudget: %s, want %s", component, got, want)
			}
			return nil
		})
	}
	extra := `[{"name":"GOMAXPROCS","value":"2"},{"name":"TOKEN","valueFrom":{"secretKeyRef":{"name":"s","key":"k"}}}]`
	return []chartValue{
		{name: v("replicas"), on: []string{"--set", v("replicas=3")}, whenOn: replicas("3", 3), whenOff: replicas("null", 1)},
		{name: v("resources"), on: []string{"--set", v("resources.limits.memory=512Mi")},
			whenOn:  ctrField(func(c corev1.Container) any { return c.Resources.Limits.Memory().String() }, `"512Mi"`),
			whenOff: ctrField(func(c corev1.Container) any { return c.Resources }, `{}`)},
		{name: v("extraArgs"), form: "a list", on: []string{"--set-json", v(`extraArgs=["--log-format=console","--log-level=debug"]`)},
			whenOn: allOf(argIs(component, "--log-format", "console"), argIs(component, "--log-level", "debug")), whenOff: argIs(component, "--log-format", "")},
		{name: v("extraArgs"), form: "a map", on: []string{"--set-json", v(`extraArgs={"log-format":"console","--log-level":"debug"}`)},
			whenOn: allOf(argIs(component, "--log-format", "console"), argIs(component, "--log-level", "debug")), whenOff: argIs(component, "--log-format", "")},
		{name: v("extraEnv"), on: []string{"--set-json", v("extraEnv=" + extra)},
			whenOn: allOf(envVar(component, "GOMAXPROCS", &corev1.EnvVar{Name: "GOMAXPROCS", Value: "2"}),
				envVar(component, "TOKEN", &corev1.EnvVar{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}})),
			whenOff: envVar(component, "GOMAXPROCS", nil)},
		{name: v("extraEnv"), form: "naming a variable the chart sets", on: []string{"--set-json", v(`extraEnv=[{"name":"CONFIGHASH_NAMESPACE","value":"x"}]`)},
			whenOn: fails(v("extraEnv") + ": CONFIGHASH_NAMESPACE is set by the chart"), whenOff: envVar(component, "GOMAXPROCS", nil)},
		{name: v("podDisruptionBudget.enabled"), on: []string{"--set", v("podDisruptionBudget.enabled=true")},
			whenOn: pdbSpec(`{"maxUnavailable":null,"minAvailable":1}`), whenOff: pdbSpec("none")},
		{name: v("podDisruptionBudget.minAvailable"), on: []string{"--set-string", v("podDisruptionBudget.minAvailable=50%")},
			whenOn: pdbSpec(`{"maxUnavailable":null,"minAvailable":"50%"}`), whenOff: allowsEvictions(component, 2)},
		{name: v("podDisruptionBudget.minAvailable"), form: "as many as the replicas", on: []string{"--set", v("podDisruptionBudget.minAvailable=2")},
			whenOn: fails(v("podDisruptionBudget.minAvailable") + ": 2 of 2 replicas would block every drain"), whenOff: allowsEvictions(component, 2)},
		{name: v("podDisruptionBudget.maxUnavailable"), on: []string{"--set", v("podDisruptionBudget.maxUnavailable=1")},
			whenOn: pdbSpec(`{"maxUnavailable":1,"minAvailable":null}`), whenOff: pdbSpec(`{"maxUnavailable":null,"minAvailable":1}`)},
		{name: v("podDisruptionBudget.maxUnavailable"), form: "0", on: []string{"--set", v("podDisruptionBudget.maxUnavailable=0")},
			whenOn: fails(v("podDisruptionBudget.maxUnavailable") + ": 0 would block every drain"), whenOff: allowsEvictions(component, 2)},
		{name: v("podSecurityContext"), on: []string{"--set", v("podSecurityContext.runAsUser=1000")},
			whenOn:  podField(func(p corev1.PodSpec, _ metav1.ObjectMeta) any { return p.SecurityContext }, `{"runAsUser":1000,"runAsGroup":65532,"runAsNonRoot":true,"seccompProfile":{"type":"RuntimeDefault"}}`),
			whenOff: podField(func(p corev1.PodSpec, _ metav1.ObjectMeta) any { return p.SecurityContext }, `null`)},
		{name: v("securityContext"), on: []string{"--set", v("securityContext.runAsNonRoot=true")},
			whenOn:  ctrField(func(c corev1.Container) any { return c.SecurityContext }, `{"capabilities":{"drop":["ALL"]},"runAsNonRoot":true,"readOnlyRootFilesystem":true,"allowPrivilegeEscalation":false}`),
			whenOff: ctrField(func(c corev1.Container) any { return c.SecurityContext }, `null`)},
		{name: v("nodeSelector"), on: []string{"--set", v("nodeSelector.pool=system")},
			whenOn:  podField(func(p corev1.PodSpec, _ metav1.ObjectMeta) any { return p.NodeSelector }, `{"pool":"system"}`),
			whenOff: podField(func(p corev1.PodSpec, _ metav1.ObjectMeta) any { return p.NodeSelector }, `null`)},
		{name: v("tolerations"), on: []string{"--set-json", v(`tolerations=[{"key":"system","operator":"Exists","effect":"NoSchedule"}]`)},
			whenOn:  podField(func(p corev1.PodSpec, _ metav1.ObjectMeta) any { return p.Tolerations }, `[{"key":"system","operator":"Exists","effect":"NoSchedule"}]`),
			whenOff: podField(func(p corev1.PodSpec, _ metav1.ObjectMeta) any { return p.Tolerations }, `null`)},
		{name: v("affinity"), on: []string{"--set-json", v(`affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"pool","operator":"In","values":["system"]}]}]}}}`)},
			whenOn: podField(func(p corev1.PodSpec, _ metav1.ObjectMeta) any {
				return p.Affinity
			}, `{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"pool","operator":"In","values":["system"]}]}]}}}`),
			whenOff: onPod(component, defaultAffinity)},
		{name: v("topologySpreadConstraints"), on: []string{"--set-json", v(`topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"ScheduleAnyway","labelSelector":{"matchLabels":{"app.kubernetes.io/name":"confighash-` + component + `"}}}]`)},
			whenOn:  podField(func(p corev1.PodSpec, _ metav1.ObjectMeta) any { return len(p.TopologySpreadConstraints) }, `1`),
			whenOff: podField(func(p corev1.PodSpec, _ metav1.ObjectMeta) any { return len(p.TopologySpreadConstraints) }, `0`)},
		{name: v("priorityClassName"), with: []string{"--set", "priorityClassName=everyone"}, on: []string{"--set", v("priorityClassName=system-cluster-critical")},
			whenOn:  podField(func(p corev1.PodSpec, _ metav1.ObjectMeta) any { return p.PriorityClassName }, `"system-cluster-critical"`),
			whenOff: podField(func(p corev1.PodSpec, _ metav1.ObjectMeta) any { return p.PriorityClassName }, `"everyone"`)},
		{name: v("podAnnotations"), on: []string{"--set", v("podAnnotations.example\\.com/a=b")},
			whenOn:  podField(func(_ corev1.PodSpec, m metav1.ObjectMeta) any { return m.Annotations }, `{"example.com/a":"b"}`),
			whenOff: podField(func(_ corev1.PodSpec, m metav1.ObjectMeta) any { return m.Annotations }, `null`)},
		{name: v("podLabels"), on: []string{"--set", v("podLabels.team=platform")},
			whenOn:  podField(func(_ corev1.PodSpec, m metav1.ObjectMeta) any { return m.Labels["team"] }, `"platform"`),
			whenOff: podField(func(_ corev1.PodSpec, m metav1.ObjectMeta) any { return len(m.Labels) }, `4`)},
		{name: v("podLabels"), form: "naming the chart's own label", on: []string{"--set", v("podLabels.app\\.kubernetes\\.io/name=x")},
			whenOn: fails(v("podLabels") + ": app.kubernetes.io/name is the chart's own label"), whenOff: podField(func(_ corev1.PodSpec, m metav1.ObjectMeta) any { return len(m.Labels) }, `4`)},
	}
}

// monitorValues are the rows of a ServiceMonitor's or PodMonitor's values.
func monitorValues(kind, key, other string) []chartValue {
	v := func(s string) string { return "metrics." + key + "." + s }
	enabled := []string{"--set", v("enabled=true")}
	endpoints := "endpoints"
	if kind == "PodMonitor" {
		endpoints = "podMetricsEndpoints"
	}
	monitor := func(f func(*unstructured.Unstructured) error) check { return hasObject(kind, "confighash", true, f) }
	endpoint := func(name string, want any) check {
		return monitor(func(u *unstructured.Unstructured) error {
			eps, _, _ := unstructured.NestedSlice(u.Object, "spec", endpoints)
			if len(eps) != 1 {
				return fmt.Errorf("%s endpoints %s", kind, jsonOf(eps))
			}
			return field(&unstructured.Unstructured{Object: eps[0].(map[string]any)}, want, name)
		})
	}
	return []chartValue{
		{name: v("enabled"), on: enabled,
			whenOn: monitor(func(u *unstructured.Unstructured) error {
				return errors.Join(field(u, map[string]any{"matchNames": []any{u.GetNamespace()}}, "spec", "namespaceSelector"), field(u, "ops", "spec", endpoints, "0", "port"))
			}),
			whenOff: hasObject(kind, "confighash", false, nil)},
		{name: v("namespace"), with: enabled, on: []string{"--set", v("namespace=" + other)},
			whenOn: monitor(func(u *unstructured.Unstructured) error {
				if u.GetNamespace() != other {
					return fmt.Errorf("%s in %s, want %s", kind, u.GetNamespace(), other)
				}
				return field(u, map[string]any{"matchNames": []any{"RELEASE"}}, "spec", "namespaceSelector")
			}),
			whenOff: monitor(func(u *unstructured.Unstructured) error {
				if u.GetNamespace() == other {
					return fmt.Errorf("%s in %s", kind, other)
				}
				return nil
			})},
		{name: v("labels"), with: enabled, on: []string{"--set", v("labels.release=kube-prometheus-stack")},
			whenOn: monitor(func(u *unstructured.Unstructured) error {
				return errors.Join(field(u, "kube-prometheus-stack", "metadata", "labels", "release"), field(u, "confighash", "metadata", "labels", "app.kubernetes.io/part-of"))
			}),
			whenOff: monitor(func(u *unstructured.Unstructured) error { return field(u, nil, "metadata", "labels", "release") })},
		{name: v("annotations"), with: enabled, on: []string{"--set", v("annotations.example\\.com/a=b")},
			whenOn: monitor(func(u *unstructured.Unstructured) error {
				return field(u, map[string]any{"example.com/a": "b"}, "metadata", "annotations")
			}),
			whenOff: monitor(func(u *unstructured.Unstructured) error { return field(u, nil, "metadata", "annotations") })},
		{name: v("interval"), with: enabled, on: []string{"--set", v("interval=15s")}, whenOn: endpoint("interval", "15s"), whenOff: endpoint("interval", nil)},
		{name: v("scrapeTimeout"), with: enabled, on: []string{"--set", v("scrapeTimeout=5s")}, whenOn: endpoint("scrapeTimeout", "5s"), whenOff: endpoint("scrapeTimeout", nil)},
		{name: v("relabelings"), with: enabled, on: []string{"--set-json", v(`relabelings=[{"targetLabel":"cluster","replacement":"a"}]`)},
			whenOn: endpoint("relabelings", []any{map[string]any{"targetLabel": "cluster", "replacement": "a"}}), whenOff: endpoint("relabelings", nil)},
		{name: v("metricRelabelings"), with: enabled, on: []string{"--set-json", v(`metricRelabelings=[{"action":"drop","regex":"go_.*","sourceLabels":["__name__"]}]`)},
			whenOn:  endpoint("metricRelabelings", []any{map[string]any{"action": "drop", "regex": "go_.*", "sourceLabels": []any{"__name__"}}}),
			whenOff: endpoint("metricRelabelings", nil)},
	}
}

// chartValues are the rows of every value of values.yaml; other is a namespace beside
// the release's.
func chartValues(appVersion, other string) []chartValue {
	webhookEntries := func(f func([]admissionregistrationv1.MutatingWebhook) error) check {
		return rendered(func(r *chartRender) error {
			hooks, err := r.webhooks()
			if err != nil {
				return err
			}
			return f(hooks)
		})
	}
	onlyOptIn := allOf(webhookEntries(func(hooks []admissionregistrationv1.MutatingWebhook) error {
		if got := names(hooks); !slices.Equal(got, []string{"hash.confighash.dev", "restart.confighash.dev"}) {
			return fmt.Errorf("webhook entries %v, want hash.confighash.dev and restart.confighash.dev alone", got)
		}
		return nil
	}), emptyFlag("webhook", "--every-workload-namespace-selector"), emptyFlag("watcher", "--every-workload-namespace-selector"))
	rule := func(resource string, there bool) check {
		return webhookEntries(func(hooks []admissionregistrationv1.MutatingWebhook) error {
			for _, h := range hooks {
				if strings.HasSuffix(h.Name, "restart.confighash.dev") {
					continue // pods only, whatever the kinds
				}
				found := slices.ContainsFunc(h.Rules, func(r admissionregistrationv1.RuleWithOperations) bool { return slices.Contains(r.Resources, resource) })
				if found != there {
					return fmt.Errorf("%s: a rule for %s is there: %v", h.Name, resource, found)
				}
			}
			return nil
		})
	}
	reloaderCondition := func(there bool) check {
		return webhookEntries(func(hooks []admissionregistrationv1.MutatingWebhook) error {
			if got := strings.Contains(hooks[0].MatchConditions[0].Expression, "reloader.stakater.com/auto"); got != there {
				return fmt.Errorf("the opt-in condition reads Reloader's annotations: %v", got)
			}
			return nil
		})
	}
	webhookTimeout := func(want string) check {
		return webhookEntries(func(hooks []admissionregistrationv1.MutatingWebhook) error {
			for _, h := range hooks {
				if got := jsonOf(h.TimeoutSeconds); got != want {
					return fmt.Errorf("%s timeoutSeconds %s, want %s", h.Name, got, want)
				}
			}
			return nil
		})
	}
	alerting := []string{"--set", "alerts.enabled=true", "--set", "alerts.webhookURLSecret.name=alerts"}
	alertEnv := func(name, value string) check {
		if value == "" {
			return envVar("watcher", name, nil)
		}
		return envVar("watcher", name, &corev1.EnvVar{Name: name, Value: value})
	}
	urlFrom := func(name, key string) check {
		return envVar("watcher", "CONFIGHASH_ALERT_WEBHOOK_URL", &corev1.EnvVar{Name: "CONFIGHASH_ALERT_WEBHOOK_URL", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}})
	}
	defaultScrapes := `[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`
	admission := func(want string) check {
		return rendered(func(r *chartRender) error {
			np, err := r.networkPolicy("webhook")
			if err != nil || np == nil {
				return fmt.Errorf("the webhook's NetworkPolicy: %v", err)
			}
			if got := jsonOf(np.Spec.Ingress[0].From); got != want {
				return fmt.Errorf("the admission port admits %s, want %s", got, want)
			}
			return nil
		})
	}
	dashboard := func(f func(*unstructured.Unstructured) error) check {
		return hasObject("ConfigMap", "confighash-dashboard", true, f)
	}
	defaultImage := "ghcr.io/confighash/confighash:" + appVersion
	rows := []chartValue{
		{name: "nameOverride", on: []string{"--set", "nameOverride=ch"},
			whenOn: allOf(hasObject("Deployment", "ch-webhook", true, func(u *unstructured.Unstructured) error {
				return field(u, "ch-webhook", "spec", "selector", "matchLabels", "app.kubernetes.io/name")
			}), hasObject("ServiceAccount", "ch-watcher", true, nil)),
			whenOff: hasObject("Deployment", "confighash-webhook", true, nil)},
		{name: "fullnameOverride", on: []string{"--set", "fullnameOverride=team-a"},
			whenOn: allOf(
				hasObject("Deployment", "team-a-webhook", true, func(u *unstructured.Unstructured) error {
					return field(u, "confighash-webhook", "spec", "selector", "matchLabels", "app.kubernetes.io/name")
				}),
				hasObject("MutatingWebhookConfiguration", "team-a", true, func(u *unstructured.Unstructured) error {
					return field(u, "RELEASE/team-a-webhook", "metadata", "annotations", "cert-manager.io/inject-ca-from")
				}),
				hasObject("ValidatingAdmissionPolicy", "team-a-writes-where-it-acts", true, func(u *unstructured.Unstructured) error {
					if !strings.Contains(jsonOf(u.Object["spec"]), `endsWith(':team-a-watcher')`) {
						return errors.New("the policy does not hold team-a-watcher")
					}
					return nil
				}),
				hasObject("ClusterRole", "confighash-webhook", false, nil),
				argIs("webhook", "--webhook-configuration", "team-a")),
			whenOff: allOf(hasObject("MutatingWebhookConfiguration", "confighash", true, nil), argIs("webhook", "--webhook-configuration", ""))},
		{name: "fullnameOverride", form: "without cert-manager", with: []string{"--set", "certManager.enabled=false"}, on: []string{"--set", "fullnameOverride=team-a"},
			whenOn: allOf(argIs("webhook", "--tls-self-signed-secret", "team-a-webhook-tls"), argIs("webhook", "--tls-dns-names", "team-a-webhook.RELEASE.svc,team-a-webhook.RELEASE.svc.cluster.local"),
				hasObject("ClusterRole", "team-a-webhook-cabundle", true, func(u *unstructured.Unstructured) error {
					return field(u, []any{"team-a"}, "rules", "0", "resourceNames")
				})),
			whenOff: allOf(argIs("webhook", "--tls-self-signed-secret", "confighash-webhook-tls"), argIs("webhook", "--tls-dns-names", ""))},
		{name: "image.registry", on: []string{"--set", "image.registry=mirror.example.com"},
			whenOn: imageIs("mirror.example.com/confighash/confighash:" + appVersion), whenOff: imageIs(defaultImage)},
		{name: "image.repository", on: []string{"--set", "image.repository=example.com/confighash"},
			whenOn: imageIs("example.com/confighash:" + appVersion), whenOff: fails("image.repository")},
		{name: "image.tag", on: []string{"--set", "image.tag=0.0.9"},
			whenOn: imageIs("ghcr.io/confighash/confighash:0.0.9"), whenOff: imageIs(defaultImage)},
		{name: "image.digest", on: []string{"--set", "image.digest=sha256:" + strings.Repeat("ab", 32)},
			whenOn: imageIs("ghcr.io/confighash/confighash@sha256:" + strings.Repeat("ab", 32)), whenOff: imageIs(defaultImage)},
		{name: "image.pullPolicy", on: []string{"--set", "image.pullPolicy=Always"},
			whenOn:  onContainer("webhook", func(c corev1.Container) error { return equal("imagePullPolicy", c.ImagePullPolicy, corev1.PullAlways) }),
			whenOff: onContainer("webhook", func(c corev1.Container) error { return equal("imagePullPolicy", c.ImagePullPolicy, "") })},
		{name: "imagePullSecrets", on: []string{"--set-json", `imagePullSecrets=[{"name":"registry"},"mirror"]`},
			whenOn: onPod("webhook", func(p corev1.PodSpec, _ metav1.ObjectMeta) error {
				return equal("imagePullSecrets", jsonOf(p.ImagePullSecrets), `[{"name":"registry"},{"name":"mirror"}]`)
			}),
			whenOff: onPod("watcher", func(p corev1.PodSpec, _ metav1.ObjectMeta) error {
				return equal("imagePullSecrets", len(p.ImagePullSecrets), 0)
			})},
		{name: "priorityClassName", on: []string{"--set", "priorityClassName=system-cluster-critical"},
			whenOn: allOf(onPod("webhook", func(p corev1.PodSpec, _ metav1.ObjectMeta) error {
				return equal("priorityClassName", p.PriorityClassName, "system-cluster-critical")
			}), onPod("watcher", func(p corev1.PodSpec, _ metav1.ObjectMeta) error {
				return equal("priorityClassName", p.PriorityClassName, "system-cluster-critical")
			})),
			whenOff: onPod("watcher", func(p corev1.PodSpec, _ metav1.ObjectMeta) error {
				return equal("priorityClassName", p.PriorityClassName, "")
			})},
		{name: "certManager.enabled", on: []string{"--set", "certManager.enabled=true"},
			whenOn:  allOf(hasObject("Certificate", "confighash-webhook", true, nil), argIs("webhook", "--tls-self-signed-secret", "")),
			whenOff: allOf(hasObject("Certificate", "confighash-webhook", false, nil), argIs("webhook", "--tls-self-signed-secret", "confighash-webhook-tls"))},
		{name: "namespaces", on: []string{"--set", "namespaces={" + other + "}"},
			whenOn:  allOf(bothFlag("--namespaces", other), hasObject("ClusterRoleBinding", "confighash-watcher", false, nil), hasObject("RoleBinding", "confighash-watcher", true, nil)),
			whenOff: allOf(bothFlag("--namespaces", ""), hasObject("ClusterRoleBinding", "confighash-watcher", true, nil))},
		{name: "namespaces", form: "with the release namespace", on: []string{"--set", "namespaces={RELEASE}"},
			whenOn: fails("namespaces must not list the release namespace"), whenOff: hasObject("ClusterRoleBinding", "confighash-watcher", true, nil)},
		{name: "namespaceSelector", on: []string{"--set-json", `namespaceSelector={"matchExpressions":[{"key":"team","operator":"In","values":["a"]}]}`},
			whenOn:  bothFlag("--namespace-selector", "confighash.dev/injection=enabled,team in (a)"),
			whenOff: fails("namespaceSelector has neither matchLabels nor matchExpressions: it would select every namespace")},
		{name: "namespaceSelector.matchLabels", on: []string{"--set", "namespaceSelector.matchLabels.team=a"},
			whenOn:  bothFlag("--namespace-selector", "confighash.dev/injection=enabled,team=a"),
			whenOff: fails("namespaceSelector has neither matchLabels nor matchExpressions")},
		{name: "everyNamespaceSelector", on: []string{"--set-json", `everyNamespaceSelector={"matchExpressions":[{"key":"team","operator":"In","values":["every"]}]}`},
			whenOn:  bothFlag("--every-workload-namespace-selector", "confighash.dev/injection=all,team in (every)"),
			whenOff: onlyOptIn},
		{name: "everyNamespaceSelector.matchLabels", on: []string{"--set", "everyNamespaceSelector.matchLabels.team=every"},
			whenOn:  bothFlag("--every-workload-namespace-selector", "confighash.dev/injection=all,team=every"),
			whenOff: onlyOptIn},
		{name: "kinds", on: []string{"--set", "kinds={deployments}"},
			whenOn:  allOf(bothFlag("--kinds", "deployments"), rule("deployments", true), rule("statefulsets", false)),
			whenOff: fails("kinds lists no workload kind")},
		{name: "viewRole.enabled", on: []string{"--set", "viewRole.enabled=true"},
			whenOn: hasObject("ClusterRole", "confighash-view", true, nil), whenOff: hasObject("ClusterRole", "confighash-view", false, nil)},
		{name: "recreateFinishedJobs", on: []string{"--set", "recreateFinishedJobs=true"},
			whenOn: switchIs("watcher", "--recreate-finished-jobs", true), whenOff: switchIs("watcher", "--recreate-finished-jobs", false)},
		{name: "reloadOnCreate", on: []string{"--set", "reloadOnCreate=true"},
			whenOn:  allOf(switchIs("webhook", "--reload-on-create=false", false), switchIs("watcher", "--reload-on-create=false", false)),
			whenOff: allOf(switchIs("webhook", "--reload-on-create=false", true), switchIs("watcher", "--reload-on-create=false", true))},
		{name: "reloadOnDelete", on: []string{"--set", "reloadOnDelete=true"},
			whenOn:  allOf(switchIs("webhook", "--reload-on-delete", true), switchIs("watcher", "--reload-on-delete", true)),
			whenOff: allOf(switchIs("webhook", "--reload-on-delete", false), switchIs("watcher", "--reload-on-delete", false))},
		{name: "pauseDeployments", on: []string{"--set", "pauseDeployments=true"},
			whenOn: switchIs("watcher", "--pause-deployments", true), whenOff: switchIs("watcher", "--pause-deployments", false)},
		{name: "runCronJobsOnChange", on: []string{"--set", "runCronJobsOnChange=true"},
			whenOn: switchIs("watcher", "--run-cronjobs-on-change", true), whenOff: switchIs("watcher", "--run-cronjobs-on-change", false)},
		{name: "extraKinds", on: []string{"--set-json", `extraKinds=[{"apiVersion":"apps.example.com/v1","kind":"Web","resource":"webs","template":"spec.template"}]`},
			whenOn:  allOf(bothFlag("--extra-kind", "apps.example.com/v1:Web:webs:spec.template"), rule("webs", true)),
			whenOff: allOf(bothFlag("--extra-kind", ""), rule("webs", false))},
		{name: "sourceLabelSelector", on: []string{"--set", "sourceLabelSelector=team=a"},
			whenOn: bothFlag("--source-label-selector", "team=a"), whenOff: bothFlag("--source-label-selector", "")},
		{name: "reloaderAnnotations", on: []string{"--set", "reloaderAnnotations=true"},
			whenOn:  allOf(bothFlag("--reloader-annotations", ""), reloaderCondition(true)),
			whenOff: allOf(bothFlag("--reloader-annotations", "false"), reloaderCondition(false))},
		{name: "enableCSIIntegration", on: []string{"--set", "enableCSIIntegration=true"},
			whenOn:  allOf(switchIs("webhook", "--enable-csi-integration", true), switchIs("watcher", "--enable-csi-integration", true)),
			whenOff: allOf(switchIs("webhook", "--enable-csi-integration", false), switchIs("watcher", "--enable-csi-integration", false))},
		{name: "ignoreConfigMaps", on: []string{"--set", "ignoreConfigMaps=true"},
			whenOn: bothFlag("--resources-to-ignore", "configMaps"), whenOff: bothFlag("--resources-to-ignore", "")},
		{name: "ignoreSecrets", on: []string{"--set", "ignoreSecrets=true"},
			whenOn: bothFlag("--resources-to-ignore", "secrets"), whenOff: bothFlag("--resources-to-ignore", "")},
		{name: "pinByDefault", on: []string{"--set", "pinByDefault=true"},
			whenOn:  allOf(switchIs("webhook", "--pin-by-default", true), switchIs("watcher", "--pin-by-default", true)),
			whenOff: allOf(switchIs("webhook", "--pin-by-default", false), switchIs("watcher", "--pin-by-default", false))},
		{name: "snapshotCap.count", on: []string{"--set", "snapshotCap.count=0"},
			whenOn: argIs("webhook", "--snapshot-max-count", "0"), whenOff: argIs("webhook", "--snapshot-max-count", "")},
		{name: "snapshotCap.bytes", on: []string{"--set", "snapshotCap.bytes=1048576"},
			whenOn: argIs("webhook", "--snapshot-max-bytes", "1048576"), whenOff: argIs("webhook", "--snapshot-max-bytes", "")},
		{name: "pacing.waveSize", on: []string{"--set", "pacing.waveSize=5"}, whenOn: bothFlag("--wave-size", "5"), whenOff: bothFlag("--wave-size", "")},
		{name: "pacing.waveThreshold", on: []string{"--set", "pacing.waveThreshold=20"}, whenOn: argIs("watcher", "--wave-threshold", "20"), whenOff: argIs("watcher", "--wave-threshold", "")},
		{name: "pacing.maxRolling", on: []string{"--set", "pacing.maxRolling=3"}, whenOn: argIs("watcher", "--max-rolling", "3"), whenOff: argIs("watcher", "--max-rolling", "")},
		{name: "pacing.waveTimeout", on: []string{"--set", "pacing.waveTimeout=30m"}, whenOn: argIs("watcher", "--wave-timeout", "30m"), whenOff: argIs("watcher", "--wave-timeout", "")},
		{name: "pacing.rolloutWindow", on: []string{"--set", "pacing.rolloutWindow=Mon-Fri 09:00-17:00"},
			whenOn: bothFlag("--rollout-window", "Mon-Fri 09:00-17:00"), whenOff: bothFlag("--rollout-window", "")},
		{name: "pacing.onFailure", on: []string{"--set", "pacing.onFailure=revert"}, whenOn: bothFlag("--on-failure", "revert"), whenOff: bothFlag("--on-failure", "")},
		{name: "pacing.prometheusURL", on: []string{"--set", "pacing.prometheusURL=http://prometheus.monitoring:9090"},
			whenOn: argIs("watcher", "--prometheus-url", "http://prometheus.monitoring:9090"), whenOff: argIs("watcher", "--prometheus-url", "")},
		{name: "pacing.analysisQueries", on: []string{"--set-json", `pacing.analysisQueries={"error-ratio":"max(errors{namespace=\"$namespace\"})"}`},
			whenOn: argIs("watcher", "--analysis-query", `error-ratio=max(errors{namespace="$namespace"})`), whenOff: argIs("watcher", "--analysis-query", "")},
		{name: "webhook.timeoutSeconds", on: []string{"--set", "webhook.timeoutSeconds=10"}, whenOn: webhookTimeout("10"), whenOff: webhookTimeout("null")},
		{name: "webhook.clientCA.configMap", on: []string{"--set", "webhook.clientCA.configMap=apiserver-ca"},
			whenOn: allOf(argIs("webhook", "--client-ca-file", "/etc/confighash/client-ca/ca.crt"), onPod("webhook", func(p corev1.PodSpec, _ metav1.ObjectMeta) error {
				return equal("volumes", slices.ContainsFunc(p.Volumes, func(v corev1.Volume) bool { return v.ConfigMap != nil && v.ConfigMap.Name == "apiserver-ca" }), true)
			})),
			whenOff: argIs("webhook", "--client-ca-file", "")},
		{name: "webhook.clientCA.allowedNames", on: []string{"--set", "webhook.clientCA.allowedNames={kube-apiserver}"},
			whenOn: argIs("webhook", "--client-allowed-names", "kube-apiserver"), whenOff: argIs("webhook", "--client-allowed-names", "")},
		{name: "webhook.admissionCallers", on: []string{"--set", "webhook.admissionCallers=192.0.2.0/24"},
			whenOn: argIs("webhook", "--admission-callers", "192.0.2.0/24"), whenOff: argIs("webhook", "--admission-callers", "")},
		{name: "webhook.restarterImage", on: []string{"--set", "webhook.restarterImage=mirror.example.com/confighash:1"},
			whenOn:  allOf(argIs("webhook", "--restarter-image", "mirror.example.com/confighash:1"), hasObject("Role", "confighash-webhook-reads-own-pod", false, nil)),
			whenOff: allOf(argIs("webhook", "--restarter-image", ""), hasObject("Role", "confighash-webhook-reads-own-pod", true, nil))},
		{name: "metrics.dashboard.enabled", on: []string{"--set", "metrics.dashboard.enabled=true"},
			whenOn: dashboard(nil), whenOff: hasObject("ConfigMap", "confighash-dashboard", false, nil)},
		{name: "metrics.dashboard.namespace", with: []string{"--set", "metrics.dashboard.enabled=true"}, on: []string{"--set", "metrics.dashboard.namespace=" + other},
			whenOn:  dashboard(func(u *unstructured.Unstructured) error { return equal("namespace", u.GetNamespace(), other) }),
			whenOff: dashboard(func(u *unstructured.Unstructured) error { return equal("namespace", u.GetNamespace(), "RELEASE") })},
		{name: "metrics.dashboard.labels", with: []string{"--set", "metrics.dashboard.enabled=true"}, on: []string{"--set", "metrics.dashboard.labels.team=a"},
			whenOn: dashboard(func(u *unstructured.Unstructured) error {
				return errors.Join(field(u, "a", "metadata", "labels", "team"), field(u, "1", "metadata", "labels", "grafana_dashboard"))
			}),
			whenOff: dashboard(func(u *unstructured.Unstructured) error {
				return field(u, nil, "metadata", "labels", "grafana_dashboard")
			})},
		{name: "networkPolicy.enabled", on: []string{"--set", "networkPolicy.enabled=true"},
			whenOn: scrapeFrom(defaultScrapes), whenOff: allOf(hasObject("NetworkPolicy", "confighash-webhook", false, nil), hasObject("NetworkPolicy", "confighash-watcher", false, nil))},
		{name: "networkPolicy.admissionFrom", on: []string{"--set-json", `networkPolicy.admissionFrom=[{"ipBlock":{"cidr":"172.16.0.0/28"}}]`},
			whenOn: admission(`[{"ipBlock":{"cidr":"172.16.0.0/28"}}]`), whenOff: admission("null")},
		{name: "networkPolicy.metrics.namespaceSelector", with: []string{"--set", "metrics.serviceMonitor.enabled=true"},
			on:     []string{"--set", "networkPolicy.metrics.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=kube-prometheus-stack"},
			whenOn: scrapeFrom(`[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"kube-prometheus-stack"}}}]`), whenOff: scrapeFrom("")},
		{name: "networkPolicy.metrics.podSelector", with: []string{"--set", "metrics.podMonitor.enabled=true"},
			on:      []string{"--set", "networkPolicy.metrics.podSelector.matchLabels.app\\.kubernetes\\.io/name=prometheus"},
			whenOn:  scrapeFrom(`[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}},"podSelector":{"matchLabels":{"app.kubernetes.io/name":"prometheus"}}}]`),
			whenOff: scrapeFrom(defaultScrapes)},
		{name: "networkPolicy.metrics.podSelector", form: "in every namespace", with: []string{"--set", "networkPolicy.metrics.namespaceSelector=null"},
			on:      []string{"--set", "networkPolicy.metrics.podSelector.matchLabels.app\\.kubernetes\\.io/name=prometheus"},
			whenOn:  scrapeFrom(`[{"namespaceSelector":{},"podSelector":{"matchLabels":{"app.kubernetes.io/name":"prometheus"}}}]`),
			whenOff: scrapeFrom("")},
		{name: "networkPolicy.metricsFrom", on: []string{"--set-json", `networkPolicy.metricsFrom=[{"ipBlock":{"cidr":"192.0.2.0/24"}}]`},
			whenOn: scrapeFrom(`[{"ipBlock":{"cidr":"192.0.2.0/24"}}]`), whenOff: scrapeFrom(defaultScrapes)},
		{name: "alerts.enabled", with: []string{"--set", "alerts.webhookURLSecret.name=alerts"}, on: []string{"--set", "alerts.enabled=true"},
			whenOn: allOf(alertEnv("CONFIGHASH_ALERT_ON_RELOAD", "true"), urlFrom("alerts", "url")), whenOff: alertEnv("CONFIGHASH_ALERT_ON_RELOAD", "")},
		{name: "alerts.sink", with: alerting, on: []string{"--set", "alerts.sink=slack"},
			whenOn: alertEnv("CONFIGHASH_ALERT_SINK", "slack"), whenOff: alertEnv("CONFIGHASH_ALERT_SINK", "")},
		{name: "alerts.webhookURLSecret.name", with: []string{"--set", "alerts.enabled=true"}, on: []string{"--set", "alerts.webhookURLSecret.name=alerts"},
			whenOn: urlFrom("alerts", "url"), whenOff: fails("alerts.enabled needs alerts.webhookURLSecret.name")},
		{name: "alerts.webhookURLSecret.key", with: alerting, on: []string{"--set", "alerts.webhookURLSecret.key=slack-url"},
			whenOn: urlFrom("alerts", "slack-url"), whenOff: urlFrom("alerts", "url")},
		{name: "alerts.clusterName", with: alerting, on: []string{"--set", "alerts.clusterName=prod"},
			whenOn: alertEnv("CONFIGHASH_CLUSTER_NAME", "prod"), whenOff: alertEnv("CONFIGHASH_CLUSTER_NAME", "")},
		{name: "alerts.additionalInfo", with: alerting, on: []string{"--set", "alerts.additionalInfo=on call: platform"},
			whenOn: alertEnv("CONFIGHASH_ALERT_ADDITIONAL_INFO", "on call: platform"), whenOff: alertEnv("CONFIGHASH_ALERT_ADDITIONAL_INFO", "")},
		{name: "alerts.proxy", with: alerting, on: []string{"--set", "alerts.proxy=http://proxy.example.com:3128"},
			whenOn: alertEnv("CONFIGHASH_ALERT_WEBHOOK_PROXY", "http://proxy.example.com:3128"), whenOff: alertEnv("CONFIGHASH_ALERT_WEBHOOK_PROXY", "")},
	}
	rows = append(rows, componentValues("webhook")...)
	rows = append(rows, componentValues("watcher")...)
	rows = append(rows, monitorValues("ServiceMonitor", "serviceMonitor", other)...)
	return append(rows, monitorValues("PodMonitor", "podMonitor", other)...)
}

func equal[T comparable](what string, got, want T) error {
	if got != want {
		return fmt.Errorf("%s %v, want %v", what, got, want)
	}
	return nil
}

func names(hooks []admissionregistrationv1.MutatingWebhook) []string {
	var out []string
	for _, h := range hooks {
		out = append(out, h.Name)
	}
	return out
}

// everyRender is what must hold of every render: a refusal comes from the chart's own
// fail, never a template error; no webhook entry without matchConditions selects every
// namespace; the components' --every-workload-namespace-selector selects what that entry
// does; and the scope policy's namespaces are not "true".
func everyRender(r *chartRender, ns string) error {
	if r.err != "" {
		if !strings.Contains(r.err, "execution error at (") {
			return fmt.Errorf("the template broke, where a value should have been refused by name: %s", r.err)
		}
		return nil
	}
	hooks, err := r.webhooks()
	if err != nil {
		return err
	}
	every := ""
	for _, h := range hooks {
		own := metav1.LabelSelector{MatchLabels: h.NamespaceSelector.MatchLabels}
		for _, e := range h.NamespaceSelector.MatchExpressions {
			// What the chart adds to every entry: not its own namespace, and the namespaces listed.
			if e.Key == corev1.LabelMetadataName && (e.Operator == metav1.LabelSelectorOpNotIn && slices.Equal(e.Values, []string{ns}) || e.Operator == metav1.LabelSelectorOpIn) {
				continue
			}
			own.MatchExpressions = append(own.MatchExpressions, e)
		}
		selector, err := metav1.LabelSelectorAsSelector(&own)
		if err != nil {
			return err
		}
		if selector.Empty() && len(h.MatchConditions) == 0 {
			return fmt.Errorf("webhook entry %s selects every namespace, with no matchConditions", h.Name)
		}
		if h.Name == "every.hash.confighash.dev" {
			every = selector.String()
		}
	}
	for _, component := range []string{"webhook", "watcher"} {
		ctr, err := r.container(component)
		if err != nil {
			return err
		}
		given := webhook.DefaultEveryNamespaceSelector
		for _, arg := range ctr.Args {
			if v, ok := strings.CutPrefix(arg, "--every-workload-namespace-selector="); ok {
				given = v
			}
		}
		selects := "" // an empty flag: none
		if given != "" {
			parsed, err := labels.Parse(given)
			if err != nil {
				return err
			}
			selects = parsed.String()
		}
		if selects != every {
			return fmt.Errorf("the %s's --every-workload-namespace-selector=%q, but the webhook's every-workload entry selects %q", component, given, every)
		}
	}
	for _, u := range r.objs {
		if u.GetKind() != "ValidatingAdmissionPolicy" {
			continue
		}
		variables, _, _ := unstructured.NestedSlice(u.Object, "spec", "variables")
		for _, v := range variables {
			v := v.(map[string]any)
			if v["name"] == "acting" && regexp.MustCompile(`(^|\|\| )true($| )`).MatchString(v["expression"].(string)) {
				return fmt.Errorf("policy %s acts in every namespace: %s", u.GetName(), v["expression"])
			}
		}
	}
	return nil
}

// valuesDefault returns values.yaml's default at a dotted path.
func valuesDefault(values map[string]any, path string) (any, bool) {
	var at any = values
	for _, key := range strings.Split(path, ".") {
		m, ok := at.(map[string]any)
		if !ok {
			return nil, false
		}
		if at, ok = m[key]; !ok {
			return nil, false
		}
	}
	return at, true
}

// leaves lists the dotted paths of values' scalars, lists and empty maps.
func leaves(prefix string, v any) []string {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return []string{prefix}
	}
	var out []string
	for k, e := range m {
		out = append(out, leaves(strings.TrimPrefix(prefix+"."+k, "."), e)...)
	}
	return out
}

// render is one render of the test: which row, which way, with which flags.
type render struct {
	row    int
	way    string // on, null, empty
	set    []string
	result *chartRender
}

// TestChartValuesAreDocumented: every value of values.yaml has a row in chartValues,
// and a line in docs/install.md's Helm table that gives its default.
func TestChartValuesAreDocumented(t *testing.T) {
	appVersion, values := chartFiles(t)
	rows := chartValues(appVersion, "other")
	docs, err := os.ReadFile(filepath.Join("..", "..", "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	helmSection, _, _ := strings.Cut(string(docs[bytes.Index(docs, []byte("\n## With Helm\n")):]), "\n### Memory")
	documented := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| (`[^|]+`) \\| ([^|]*) \\|").FindAllStringSubmatch(helmSection, -1) {
		for _, name := range strings.Split(m[1], ", ") {
			documented[strings.Trim(name, "`")] = strings.TrimSpace(m[2])
		}
	}
	for _, leaf := range leaves("", values) {
		covered := slices.ContainsFunc(rows, func(v chartValue) bool { return leaf == v.name || strings.HasPrefix(leaf, v.name+".") })
		if !covered {
			t.Errorf("values.yaml's %s has no row in chartValues", leaf)
		}
	}
	for _, v := range rows {
		def, ok := valuesDefault(values, v.name)
		if !ok {
			t.Errorf("%s is not in values.yaml", v.name)
			continue
		}
		name := strings.TrimSuffix(v.name, ".matchLabels") // a selector's matchLabels: its selector's line
		cell, ok := documented[name]
		if !ok {
			t.Errorf("docs/install.md's Helm table has no line for %s", v.name)
			continue
		}
		if want := documentedDefault(def); name == v.name && want != "" && !strings.Contains(cell, want) {
			t.Errorf("docs/install.md gives %s's default as %s; values.yaml: %s", v.name, cell, want)
		}
	}
}

// chartTools returns helm and the version of the API server, which renders are for.
func chartTools(t *testing.T, c *cluster.Cluster) (helm, kubeVersion string) {
	t.Helper()
	helm, err := cluster.Helm(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	version, err := c.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	return helm, version.GitVersion
}

// chartFiles reads the chart's appVersion and its values.yaml.
func chartFiles(t *testing.T) (string, map[string]any) {
	t.Helper()
	var chart struct{ AppVersion string }
	var values map[string]any
	for file, into := range map[string]any{"Chart.yaml": &chart, "values.yaml": &values} {
		text, err := os.ReadFile(filepath.Join(chartDir, file))
		if err != nil {
			t.Fatal(err)
		}
		if err := sigsyaml.Unmarshal(text, into); err != nil {
			t.Fatal(err)
		}
	}
	return chart.AppVersion, values
}

// TestChartValuesWorkSetAndSwitchedOff renders the chart with each value of values.yaml
// set, null and (where its default is not) empty, checks each render, and applies what
// the renders make to the local API server, each object under a name of its own in one
// batch: every value documented in docs/install.md, none that switched off breaks the
// template, selects every namespace or crashes at install.
func TestChartValuesWorkSetAndSwitchedOff(t *testing.T) {
	c := sharedCluster(t)
	ctx := t.Context()
	helm, kubeVersion := chartTools(t, c)
	appVersion, values := chartFiles(t)
	if err := c.InstallCertManagerCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	installMonitorCRDs(t, c)
	ns, other := namespace(t, c, nil), namespace(t, c, nil)
	rows := chartValues(appVersion, other)

	// Render every row's ways, two at a time per CPU.
	renders := []*render{{row: -1, way: "defaults"}}
	for i, v := range rows {
		renders = append(renders, &render{row: i, way: "on", set: slices.Concat(v.with, v.on)},
			&render{row: i, way: "null", set: slices.Concat(v.with, []string{"--set-json", v.name + "=null"})})
		def, _ := valuesDefault(values, v.name)
		if empty := emptyOf(def); empty != "" {
			renders = append(renders, &render{row: i, way: "empty", set: slices.Concat(v.with, []string{"--set-json", v.name + "=" + empty})})
		}
	}
	// Rows that differ only in how they set a value share their null and empty renders.
	results := map[string]*chartRender{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	work := make(chan []string)
	for range 2 * runtime.NumCPU() {
		wg.Go(func() {
			for set := range work {
				args := slices.Clone(set)
				for i := range args {
					args[i] = strings.ReplaceAll(args[i], "RELEASE", ns)
				}
				result, err := renderChart(helm, kubeVersion, ns, args)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				results[strings.Join(set, "\x00")] = result
				mu.Unlock()
			}
		})
	}
	queued := map[string]bool{}
	for _, r := range renders {
		if key := strings.Join(r.set, "\x00"); !queued[key] {
			queued[key] = true
			work <- r.set
		}
	}
	close(work)
	wg.Wait()
	for _, r := range renders {
		r.result = results[strings.Join(r.set, "\x00")]
	}
	if t.Failed() {
		return
	}

	for _, r := range renders {
		what := "the defaults"
		var want check = rendered(func(*chartRender) error { return nil })
		if r.row >= 0 {
			v := rows[r.row]
			what = strings.Join(strings.Fields(v.name+" "+v.form+" "+r.way), " ")
			if want = v.whenOff; r.way == "on" {
				want = v.whenOn
			}
		}
		if err := errors.Join(everyRender(r.result, ns), want(withRelease(r.result, ns))); err != nil {
			t.Errorf("%s (%s): %v", what, strings.Join(r.set, " "), err)
		}
	}
	if t.Failed() {
		return
	}

	// What the renders make, each distinct object once, under a name of its own: pods
	// are kept from starting, by a quota, as the objects are what is checked.
	if _, err := c.Client.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "no-pods"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var batch, outside bytes.Buffer
	seen := map[string]bool{}
	for i, r := range renders {
		for _, u := range r.result.objs {
			key := u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName() + "\n" + jsonOf(u.Object)
			if seen[key] {
				continue
			}
			seen[key] = true
			u = u.DeepCopy()
			u.SetName(fmt.Sprintf("%s-r%d", u.GetName(), i))
			doc, err := json.Marshal(u.Object)
			if err != nil {
				t.Fatal(err)
			}
			batch.Write(append(doc, '\n'))
			if u.GetNamespace() != ns {
				outside.Write(append(doc, '\n'))
			}
		}
	}
	t.Cleanup(func() {
		_, _ = c.Kubectl(context.Background(), outside.Bytes(), "delete", "--ignore-not-found", "--wait=false", "-f", "-")
	})
	started := time.Now()
	if out, err := c.Kubectl(ctx, batch.Bytes(), "apply", "--server-side", "--force-conflicts", "--field-manager=chart-values-test", "-f", "-"); err != nil {
		t.Fatalf("the API server refused what the renders make: %v\n%s", err, out)
	}
	t.Logf("%d renders, %d distinct objects applied in %v", len(queued), len(seen), time.Since(started).Round(time.Millisecond))
}

// withRelease writes the release namespace where a check says RELEASE.
func withRelease(r *chartRender, ns string) *chartRender {
	if r.err != "" {
		return r
	}
	out := &chartRender{}
	for _, u := range r.objs {
		text := strings.ReplaceAll(jsonOf(u.Object), ns, "RELEASE")
		var obj map[string]any
		_ = json.Unmarshal([]byte(text), &obj)
		out.objs = append(out.objs, &unstructured.Unstructured{Object: obj})
	}
	return out
}

// documentedDefault is how docs/install.md writes a default that is a scalar or empty:
// `true`, `30s`, `""`, `[]`; "" for another.
func documentedDefault(def any) string {
	switch d := def.(type) {
	case nil:
		return "`null`"
	case string:
		if d == "" {
			return "`\"\"`"
		}
		return "`" + d + "`"
	case []any:
		if len(d) > 0 {
			return ""
		}
	case map[string]any:
		if len(d) > 0 {
			return ""
		}
	}
	return "`" + jsonOf(def) + "`"
}

// emptyOf is a default's empty form, as JSON, where it is a scalar or a list that is
// not empty; "" otherwise (an empty map merges into the default, changing nothing).
func emptyOf(def any) string {
	switch d := def.(type) {
	case bool:
		if d {
			return "false"
		}
	case string:
		if d != "" {
			return `""`
		}
	case float64:
		if d != 0 {
			return "0"
		}
	case []any:
		if len(d) > 0 {
			return "[]"
		}
	}
	return ""
}

// installMonitorCRDs installs the Prometheus Operator's ServiceMonitor and PodMonitor CRDs.
func installMonitorCRDs(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	installServiceMonitorCRD(t, c) // which downloads the module into the module cache
	cache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	installCRDs(t, c, filepath.Join(strings.TrimSpace(string(cache)), prometheusOperatorModule, "example", "prometheus-operator-crd", "monitoring.coreos.com_podmonitors.yaml"),
		"crd/podmonitors.monitoring.coreos.com")
}

// TestChartDisruptionBudgetsNeverBlockADrain installs the components' Deployments and
// PodDisruptionBudgets with one replica each, then with two: once their pods run, each
// budget lets one of them be evicted, as a node drain evicts it.
func TestChartDisruptionBudgetsNeverBlockADrain(t *testing.T) {
	c := sharedCluster(t)
	ctx := t.Context()
	helm, kubeVersion := chartTools(t, c)
	for _, replicas := range []int{1, 2} {
		ns := namespace(t, c, nil)
		r, err := renderChart(helm, kubeVersion, ns, []string{"--set", "certManager.enabled=false",
			"--set", fmt.Sprintf("webhook.replicas=%d", replicas), "--set", fmt.Sprintf("watcher.replicas=%d", replicas)})
		if err != nil || r.err != "" {
			t.Fatalf("render: %v %s", err, r.err)
		}
		var docs bytes.Buffer
		for _, u := range r.objs {
			if slices.Contains([]string{"ServiceAccount", "Deployment", "PodDisruptionBudget"}, u.GetKind()) {
				docs.WriteString(jsonOf(u.Object) + "\n")
			}
		}
		if _, err := c.Kubectl(ctx, docs.Bytes(), "apply", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		for _, component := range []string{"webhook", "watcher"} {
			name := "confighash-" + component
			waitFor(t, 30*time.Second, fmt.Sprintf("the %s's %d pods to run and its budget to let one go", component, replicas), func() bool {
				pdb, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
				return err == nil && pdb.Status.ObservedGeneration == pdb.Generation &&
					pdb.Status.CurrentHealthy == int32(replicas) && pdb.Status.DisruptionsAllowed >= 1
			})
			pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
			if err != nil || len(pods.Items) == 0 {
				t.Fatalf("the %s's pods: %v", component, err)
			}
			if err := c.Client.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{
				ObjectMeta:    metav1.ObjectMeta{Name: pods.Items[0].Name, Namespace: ns},
				DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}},
			}); err != nil {
				t.Errorf("with %d replicas, a drain cannot evict the %s's pod: %v", replicas, component, err)
			}
		}
	}
}
