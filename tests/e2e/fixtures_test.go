package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// labeledNamespace creates a namespace where confighash acts.
func labeledNamespace(t testing.TB, c *cluster.Cluster) string {
	t.Helper()
	return namespace(t, c, map[string]string{confighash.InjectionLabel: confighash.InjectionEnabled})
}

func namespace(t testing.TB, c *cluster.Cluster, labels map[string]string) string {
	t.Helper()
	ns, err := c.CreateNamespace(t.Context(), "e2e", labels)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteNamespace(context.Background(), ns) })
	return ns
}

func createConfigMap(t testing.TB, c *cluster.Cluster, ns, name string, data map[string]string) *corev1.ConfigMap {
	t.Helper()
	cm, err := c.Client.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func createSecret(t testing.TB, c *cluster.Cluster, ns, name string, data map[string]string) *corev1.Secret {
	t.Helper()
	s, err := c.Client.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: data}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// createEverySource creates every source fixtures.EveryUseTemplate uses, with a used
// and an unused key each.
func createEverySource(t testing.TB, c *cluster.Cluster, ns string) {
	t.Helper()
	for name, key := range map[string]string{"init-config": "x", "app-config": "greeting", "env-config": "E", "files-config": "a.conf", "projected-config": "p"} {
		createConfigMap(t, c, ns, name, map[string]string{key: "v1-" + name, "unused": "u"})
	}
	for name, key := range map[string]string{"app-secret": "password", "env-secret": "S", "tls-secret": "tls.crt", "projected-secret": "token"} {
		createSecret(t, c, ns, name, map[string]string{key: "s1-" + name, "unused": "u"})
	}
}

var rolloutGVR = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "rollouts"}

// customCRD is enough of a CRD to admit objects of any shape, with a status
// subresource, so that the generation counts changes of the spec alone; confighash
// reads such kinds, as Argo Rollouts, without their types.
func customCRD(gvr schema.GroupVersionResource, kind string) string {
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %[1]s.%[2]s
spec:
  group: %[2]s
  names: {kind: %[3]s, listKind: %[3]sList, plural: %[1]s, singular: %[4]s}
  scope: Namespaced
  versions:
  - name: %[5]s
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`, gvr.Resource, gvr.Group, kind, strings.ToLower(kind), gvr.Version)
}

// installCRD installs the CRD of a custom kind, if it is not yet.
func installCRD(t testing.TB, c *cluster.Cluster, gvr schema.GroupVersionResource, kind string) {
	t.Helper()
	if _, err := c.Kubectl(t.Context(), []byte(customCRD(gvr, kind)), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(t.Context(), nil, "wait", "--for=condition=Established", "crd/"+gvr.GroupResource().String(), "--timeout=30s"); err != nil {
		t.Fatal(err)
	}
}

// installRolloutCRD installs the Rollout CRD, if it is not yet.
func installRolloutCRD(t testing.TB, c *cluster.Cluster) {
	t.Helper()
	installCRD(t, c, rolloutGVR, "Rollout")
}

// uninstallRolloutCRD deletes the Rollout CRD, with every Rollout, and waits until
// discovery no longer serves it.
func uninstallRolloutCRD(t testing.TB, c *cluster.Cluster) {
	t.Helper()
	if _, err := c.Kubectl(t.Context(), nil, "delete", "--ignore-not-found", "--wait", "crd/rollouts.argoproj.io"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "Rollouts no longer served", func() bool {
		_, err := c.Client.Discovery().ServerResourcesForGroupVersion(rolloutGVR.GroupVersion().String())
		return apierrors.IsNotFound(err)
	})
}

// createRollout creates an opted-in Rollout, installing the CRD first if needed. A
// watcher started before the CRD exits when it appears: install it (installRolloutCRD)
// before starting one.
func createRollout(t testing.TB, c *cluster.Cluster, ns, name string, tmpl corev1.PodTemplateSpec) *unstructured.Unstructured {
	t.Helper()
	installRolloutCRD(t, c)
	rawTmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&tmpl)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": map[string]any{"name": name, "annotations": map[string]any{confighash.AnnotationInject: "true"}},
		"spec": map[string]any{
			"replicas": int64(1),
			"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
			"strategy": map[string]any{"canary": map[string]any{}},
			"template": rawTmpl,
		},
	}}
	return createCustom(t, c, rolloutGVR, ns, u)
}

// createCustom creates an object of a custom kind, waiting for a fresh CRD to be served.
func createCustom(t testing.TB, c *cluster.Cluster, gvr schema.GroupVersionResource, ns string, u *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	var out *unstructured.Unstructured
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err = dyn.Resource(gvr).Namespace(ns).Create(t.Context(), u, metav1.CreateOptions{})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// hashKey reads the HMAC key the webhook created.
func hashKey(t testing.TB, c *cluster.Cluster) confighash.Key {
	t.Helper()
	s, err := c.Client.CoreV1().Secrets(installNamespace).Get(t.Context(), "confighash-hash-key", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k, err := confighash.NewKey(s.Data["key"])
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// expectedHash computes, apart from the webhook, the hash a new workload with this pod
// template and metadata annotations must get from the sources as they are now.
func expectedHash(t testing.TB, c *cluster.Cluster, key confighash.Key, ns string, annotations map[string]string, tmpl *corev1.PodTemplateSpec) string {
	t.Helper()
	state := confighash.Vocabulary{Reloader: true}.Read(&confighash.Workload{Annotations: annotations, Template: tmpl})
	if len(state.Problems) > 0 {
		t.Fatalf("fixture has bad annotations: %v", state.Problems)
	}
	d, err := confighash.Decide(confighash.Input{Key: key, Namespace: ns, State: state, Mode: confighash.ModeOptedIn, Pods: confighash.Pods{Fresh: true}}, readSources{t, c, ns})
	if err != nil {
		t.Fatal(err)
	}
	return d.Hash
}

// readSources reads a namespace's sources from the API server, for the domain.
type readSources struct {
	t  testing.TB
	c  *cluster.Cluster
	ns string
}

func (r readSources) Names(confighash.SourceKind) ([]string, error) { return nil, nil }

func (r readSources) Read(refs []confighash.SourceRef) (map[confighash.SourceRef]confighash.Source, error) {
	sources := map[confighash.SourceRef]confighash.Source{}
	for _, ref := range refs {
		switch ref.Kind {
		case confighash.ConfigMap:
			if cm, err := r.c.Client.CoreV1().ConfigMaps(r.ns).Get(r.t.Context(), ref.Name, metav1.GetOptions{}); err == nil {
				sources[ref] = confighash.SourceOfConfigMap(cm)
			}
		case confighash.Secret:
			if s, err := r.c.Client.CoreV1().Secrets(r.ns).Get(r.t.Context(), ref.Name, metav1.GetOptions{}); err == nil {
				sources[ref] = confighash.SourceOfSecret(s)
			}
		}
	}
	return sources, nil
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func templateHash(t testing.TB, c *cluster.Cluster, ns, name string) string {
	t.Helper()
	d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d.Spec.Template.Annotations[confighash.AnnotationHash]
}

func updateConfigMap(t testing.TB, c *cluster.Cluster, ns, name string, change func(*corev1.ConfigMap)) {
	t.Helper()
	cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	change(cm)
	if _, err := c.Client.CoreV1().ConfigMaps(ns).Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func updateSecret(t testing.TB, c *cluster.Cluster, ns, name string, change func(*corev1.Secret)) {
	t.Helper()
	s, err := c.Client.CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	change(s)
	if _, err := c.Client.CoreV1().Secrets(ns).Update(t.Context(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// setKey changes one key of a ConfigMap or Secret.
func setKey(t testing.TB, c *cluster.Cluster, ns string, ref confighash.SourceRef, key, value string) {
	t.Helper()
	if ref.Kind == confighash.ConfigMap {
		updateConfigMap(t, c, ns, ref.Name, func(cm *corev1.ConfigMap) { cm.Data[key] = value })
		return
	}
	updateSecret(t, c, ns, ref.Name, func(s *corev1.Secret) { s.Data[key] = []byte(value) })
}

func createDeployment(t testing.TB, c *cluster.Cluster, ns string, d *appsv1.Deployment) {
	t.Helper()
	if _, err := c.Client.AppsV1().Deployments(ns).Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// enableNamespace labels a namespace for injection.
func enableNamespace(t testing.TB, c *cluster.Cluster, ns string) {
	t.Helper()
	labelNamespace(t, c, ns, confighash.InjectionEnabled)
}

// labelNamespace sets the namespace's injection label to value.
func labelNamespace(t testing.TB, c *cluster.Cluster, ns, value string) {
	t.Helper()
	n, err := c.Client.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[confighash.InjectionLabel] = value
	if _, err := c.Client.CoreV1().Namespaces().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// afterTheSecond waits until the clock is in a later second than now: the API server
// records creation and write times to the second.
func afterTheSecond() {
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond)))
}

// recorded reports whether the Deployment carries a sources record: adopted or hashed.
func recorded(t testing.TB, c *cluster.Cluster, ns, name string) bool {
	d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, ok := d.Annotations[confighash.AnnotationSources]
	return ok
}

// mergeAnnotations patches annotations of a ConfigMap, a Deployment or a Job: a nil value
// removes one.
func mergeAnnotations(t testing.TB, c *cluster.Cluster, ns, kind, name string, annotations map[string]*string) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		t.Fatal(err)
	}
	switch kind {
	case "ConfigMap":
		_, err = c.Client.CoreV1().ConfigMaps(ns).Patch(t.Context(), name, types.MergePatchType, body, metav1.PatchOptions{})
	case "Deployment":
		_, err = c.Client.AppsV1().Deployments(ns).Patch(t.Context(), name, types.MergePatchType, body, metav1.PatchOptions{})
	case "Job":
		_, err = c.Client.BatchV1().Jobs(ns).Patch(t.Context(), name, types.MergePatchType, body, metav1.PatchOptions{})
	default:
		t.Fatalf("mergeAnnotations: kind %s", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// relabel makes an admission that changes nothing confighash reads: a new label.
func relabel(t testing.TB, c *cluster.Cluster, ns, name, value string) {
	t.Helper()
	body := fmt.Sprintf(`{"metadata":{"labels":{"team":%q}}}`, value)
	if _, err := c.Client.AppsV1().Deployments(ns).Patch(t.Context(), name, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitQuiet waits until the watcher has written nothing for a while: what it had to
// do about the last changes is done.
func waitQuiet(t testing.TB, w *component) {
	t.Helper()
	const metric = "confighash_watcher_touches_total"
	last, since := w.metric(t, metric), time.Now()
	waitFor(t, 60*time.Second, "the watcher to be quiet", func() bool {
		if now := w.metric(t, metric); now != last {
			last, since = now, time.Now()
		}
		return time.Since(since) > 1500*time.Millisecond
	})
}

func ptrTo(s string) *string { return &s }

// appsManifest renders apps, each a ConfigMap and a Deployment of one pod that uses
// it, as one file for kubectl apply -f, the ConfigMap first as Helm and kustomize
// order them.
func appsManifest(t testing.TB, ns string, n int, annotations map[string]string) []byte {
	t.Helper()
	var docs []string
	for i := range n {
		name := fmt.Sprintf("app-%d", i)
		cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"k": "0"}}
		d := fixtures.AnnotatedDeployment(name, annotations, fixtures.EnvFromTemplate(name))
		d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
		d.Namespace = ns
		one := int32(1)
		d.Spec.Replicas = &one
		for _, obj := range []any{cm, d} {
			b, err := yaml.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, string(b))
		}
	}
	return []byte(strings.Join(docs, "---\n"))
}

// recordedAs reports whether the record has an entry with the prefix and suffix.
func recordedAs(record, prefix, suffix string) bool {
	for _, f := range strings.Fields(record) {
		if strings.HasPrefix(f, prefix) && strings.HasSuffix(f, suffix) {
			return true
		}
	}
	return false
}

// usedConfigMap makes a labelled namespace with the ConfigMap cfg and the Deployment
// web that uses it, rolled out once, and returns the namespace: the user whose
// rollouts a test counts while others make trouble.
func usedConfigMap(t testing.TB, c *cluster.Cluster) string {
	t.Helper()
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	createDeployment(t, c, ns, fixtures.Deployment("web", 1, fixtures.EnvFromTemplate("cfg")))
	expectReplicaSets(t, c, ns, "web", 1)
	return ns
}
