package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
	"github.com/confighash/confighash/webhook"
)

// prometheusOperatorModule holds the ServiceMonitor CRD. The project does not depend
// on it: the Go module proxy serves its source, CRDs included.
const prometheusOperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

// installServiceMonitorCRD installs the Prometheus Operator's ServiceMonitor CRD.
func installServiceMonitorCRD(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", prometheusOperatorModule).Output()
	if err != nil {
		t.Fatalf("download %s: %v", prometheusOperatorModule, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	installCRDs(t, c, filepath.Join(mod.Dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_servicemonitors.yaml"),
		"crd/servicemonitors.monitoring.coreos.com")
}

// installCRDs applies CRDs from a file or directory and waits until they are served.
func installCRDs(t *testing.T, c *cluster.Cluster, path string, names ...string) {
	t.Helper()
	// Server-side: the CRDs are too large for client-side apply's annotation.
	if _, err := c.Kubectl(t.Context(), nil, "apply", "--server-side", "-f", path); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(t.Context(), nil, append([]string{"wait", "--for=condition=Established", "--timeout=60s"}, names...)...); err != nil {
		t.Fatal(err)
	}
}

// kustomize renders a kustomization with kubectl's built-in kustomize.
func kustomize(t *testing.T, c *cluster.Cluster, dir string) []byte {
	t.Helper()
	out, err := c.Kubectl(t.Context(), nil, "kustomize", filepath.Join("..", "..", dir))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestInstallManifestsAreAcceptedByTheAPIServer(t *testing.T) {
	c := sharedCluster(t)
	if err := c.InstallCertManagerCRDs(t.Context()); err != nil {
		t.Fatal(err)
	}
	ensureNamespaces(t, c, append([]string{"confighash", "demo"}, exampleNamespaces...)...)
	for variant := range installVariants {
		if _, err := c.Kubectl(t.Context(), kustomize(t, c, variant), "apply", "--dry-run=server", "-f", "-"); err != nil {
			t.Fatalf("the API server refused the install %s: %v", variant, err)
		}
	}
	demo, err := exec.Command("cat", filepath.Join("..", "..", "manifests", "examples", "demo.yaml")).Output()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(t.Context(), demo, "apply", "--dry-run=server", "-f", "-"); err != nil {
		t.Fatalf("the API server refused the demo: %v", err)
	}
}

// exampleNamespaces are the namespaces the namespaced variant names, for users to edit.
var exampleNamespaces = []string{"team-a", "team-b"}

// installVariants are the kustomizations users apply, with the namespaces each limits
// confighash to, and the chart values that install the same.
var installVariants = map[string]struct {
	namespaces []string
	chart      []string
}{
	"manifests":                      {},
	"manifests/variants/self-signed": {chart: []string{"--set", "certManager.enabled=false"}},
	"manifests/variants/namespaced": {
		namespaces: exampleNamespaces,
		chart:      []string{"--set", "namespaces={" + strings.Join(exampleNamespaces, ",") + "}"},
	},
}

// chartOptional turns on the chart's objects and values that the kustomizations do not
// have: among them the CSI integration, the client certificate check, and extra kinds,
// one at a template path of its own.
var chartOptional = []string{"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.dashboard.enabled=true", "--set", "enableCSIIntegration=true",
	"--set", "webhook.clientCA.configMap=confighash-client-ca", "--set", "webhook.clientCA.allowedNames={kube-apiserver-webhook-client}",
	"--set-json", `extraKinds=[{"apiVersion":"serving.knative.dev/v1","kind":"Service","resource":"services","template":"spec.template"},` +
		`{"apiVersion":"apps.example.com/v1","kind":"Web","resource":"webs","template":"spec.workload.template"}]`}

// chartExtraKinds are chartOptional's extra kinds, as the components read them.
var chartExtraKinds = []string{"serving.knative.dev/v1:Service:services:spec.template", "apps.example.com/v1:Web:webs:spec.workload.template"}

// helmTemplate lints the chart and renders it for release namespace confighash.
func helmTemplate(t *testing.T, c *cluster.Cluster, set []string) []byte {
	t.Helper()
	chart := filepath.Join("..", "..", "manifests", "helm", "confighash")
	helm, err := cluster.Helm(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(helm, append([]string{"lint", "--strict", chart}, set...)...).CombinedOutput(); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
	version, err := c.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(helm, append([]string{"template", "confighash", chart, "--namespace", "confighash", "--kube-version", version.GitVersion}, set...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	return out
}

func TestChartIsAcceptedByTheAPIServerAndRegistersTheTestedWebhook(t *testing.T) {
	c := sharedCluster(t)
	if err := c.InstallCertManagerCRDs(t.Context()); err != nil {
		t.Fatal(err)
	}
	installServiceMonitorCRD(t, c)
	ensureNamespaces(t, c, append([]string{"confighash"}, exampleNamespaces...)...)
	for variant, v := range installVariants {
		t.Run(variant, func(t *testing.T) {
			rendered := helmTemplate(t, c, append(v.chart, chartOptional...))
			if _, err := c.Kubectl(t.Context(), rendered, "apply", "--dry-run=server", "-f", "-"); err != nil {
				t.Fatalf("the API server refused the chart: %v", err)
			}
			checkWebhookConfiguration(t, rendered, confighash.Vocabulary{Reloader: true, CSI: true}, chartExtraKinds, v.namespaces...)
			for _, extra := range chartExtraKinds {
				if !bytes.Contains(rendered, []byte(`"--extra-kind=`+extra+`"`)) {
					t.Errorf("the chart does not give the components --extra-kind=%s", extra)
				}
			}
		})
	}
}

func TestInstalledWebhookConfigurationIsTheTestedOne(t *testing.T) {
	c := sharedCluster(t)
	for variant, v := range installVariants {
		t.Run(variant, func(t *testing.T) {
			checkWebhookConfiguration(t, kustomize(t, c, variant), confighash.Vocabulary{Reloader: true}, nil, v.namespaces...)
		})
	}
}

func TestChartInstallsWhatKustomizeInstalls(t *testing.T) {
	c := sharedCluster(t)
	for variant, v := range installVariants {
		t.Run(variant, func(t *testing.T) {
			fromKustomize, fromChart := installedObjects(t, kustomize(t, c, variant)), installedObjects(t, helmTemplate(t, c, v.chart))
			// helm install --create-namespace makes the namespace.
			delete(fromKustomize, "Namespace//confighash")
			for id, obj := range fromKustomize {
				if !equality.Semantic.DeepEqual(obj, fromChart[id]) {
					k, _ := json.MarshalIndent(obj, "", "  ")
					h, _ := json.MarshalIndent(fromChart[id], "", "  ")
					t.Errorf("%s differs:\nkustomize: %s\nchart: %s", id, k, h)
				}
			}
			for id := range fromChart {
				if _, ok := fromKustomize[id]; !ok {
					t.Errorf("%s is in the chart only", id)
				}
			}
		})
	}
}

// installedObjects decodes rendered manifests by kind, namespace and name, without
// the labels only Helm adds.
func installedObjects(t *testing.T, rendered []byte) map[string]map[string]any {
	t.Helper()
	objs := map[string]map[string]any{}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatal(err)
		}
		if obj == nil {
			continue
		}
		dropHelmLabels(obj)
		u := unstructured.Unstructured{Object: obj}
		if slices.Contains(clusterScopedUnknownToKustomize, u.GetKind()) {
			u.SetNamespace("") // the API server ignores it on a cluster-scoped object
		}
		objs[u.GetKind()+"/"+u.GetNamespace()+"/"+u.GetName()] = obj
	}
}

// clusterScopedUnknownToKustomize are cluster-scoped kinds the kustomize built into
// kubectl does not know as such: it gives them the kustomization's namespace.
var clusterScopedUnknownToKustomize = []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

func dropHelmLabels(v any) {
	switch v := v.(type) {
	case map[string]any:
		if labels, ok := v["labels"].(map[string]any); ok {
			delete(labels, "helm.sh/chart")
			delete(labels, "app.kubernetes.io/managed-by")
		}
		for _, e := range v {
			dropHelmLabels(e)
		}
	case []any:
		for _, e := range v {
			dropHelmLabels(e)
		}
	}
}

func checkWebhookConfiguration(t *testing.T, rendered []byte, vocabulary confighash.Vocabulary, extraKinds []string, namespaces ...string) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	var installed *admissionregistrationv1.MutatingWebhookConfiguration
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			break
		}
		if !bytes.Contains(raw, []byte(`"MutatingWebhookConfiguration"`)) {
			continue
		}
		installed = &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := json.Unmarshal(raw, installed); err != nil {
			t.Fatal(err)
		}
	}
	if installed == nil || len(installed.Webhooks) != 4 {
		t.Fatalf("the install has no MutatingWebhookConfiguration with four webhooks: %+v", installed)
	}
	client := installed.Webhooks[0].ClientConfig.DeepCopy()
	client.Service.Path = nil
	kinds, err := confighash.ParseKinds("", extraKinds)
	if err != nil {
		t.Fatal(err)
	}
	want := webhook.Configuration("confighash", *client, webhook.Scope{InstallNamespace: "confighash", Namespaces: namespaces, Vocabulary: vocabulary, Kinds: kinds})
	if !equality.Semantic.DeepEqual(installed.Webhooks, want.Webhooks) {
		got, _ := json.MarshalIndent(installed.Webhooks, "", "  ")
		exp, _ := json.MarshalIndent(want.Webhooks, "", "  ")
		t.Fatalf("manifests/webhook-configuration.yaml differs from webhook.Configuration, which the e2e tests use:\ninstalled: %s\nwant: %s", got, exp)
	}
}

// rbacOnly keeps the ServiceAccounts and RBAC objects of rendered manifests.
func rbacOnly(t *testing.T, rendered []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
			if strings.Contains(doc, "\nkind: "+kind+"\n") {
				out.WriteString(doc + "\n---\n")
				break
			}
		}
	}
	return out.Bytes()
}

// applyForTest applies manifests, and deletes them at the end of the test.
func applyForTest(t *testing.T, c *cluster.Cluster, manifests []byte) {
	t.Helper()
	if _, err := c.Kubectl(t.Context(), manifests, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Kubectl(context.Background(), manifests, "delete", "--ignore-not-found", "-f", "-") })
}

// tokenKubeconfig writes a kubeconfig that authenticates as a ServiceAccount, with a
// token from the API server.
func tokenKubeconfig(t *testing.T, c *cluster.Cluster, ns, sa string) (string, kubernetes.Interface) {
	t.Helper()
	tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	cfg.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts[sa] = &clientcmdapi.Context{Cluster: "local", AuthInfo: sa}
	cfg.CurrentContext = sa
	path := filepath.Join(t.TempDir(), sa+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return path, client
}

func TestComponentsWorkWithOnlyTheirOwnRBAC(t *testing.T) {
	c := sharedCluster(t)
	ctx := t.Context()
	ensureNamespaces(t, c, "confighash")
	rbac := rbacOnly(t, kustomize(t, c, "manifests"))
	applyForTest(t, c, rbac)
	// Before the components start, so that its cleanup, which deletes the base's RBAC
	// too, comes after they stop.
	applyForTest(t, c, rbacOnly(t, kustomize(t, c, "manifests/variants/self-signed")))
	webhookConfig, webhookClient := tokenKubeconfig(t, c, "confighash", "confighash-webhook")
	watcherConfig, watcherClient := tokenKubeconfig(t, c, "confighash", "confighash-watcher")

	// The webhook's pod, as the downward API names it: the restarter runs its image.
	own := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "confighash-webhook-own"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "webhook", Image: "registry.example.com/confighash:e2e"}}}}
	if _, err := c.Client.CoreV1().Pods("confighash").Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Pods("confighash").Delete(context.Background(), own.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	setComponentEnv(t, "POD_NAME="+own.Name, "POD_NAMESPACE=confighash")
	startWebhook(t, c, "--kubeconfig="+webhookConfig, "--namespace=confighash")
	startWatcher(t, c, "--kubeconfig="+watcherConfig, "--namespace=confighash")
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	createSecret(t, c, ns, "db", map[string]string{"password": "0"})
	tmpl := fixtures.SecretVolumeTemplate("db")
	tmpl.Spec.Containers[0].EnvFrom = fixtures.EnvFromTemplate("cfg").Spec.Containers[0].EnvFrom
	pinned := fixtures.Deployment("web", 1, tmpl)
	pinned.Annotations[confighash.AnnotationPin] = "true"
	createDeployment(t, c, ns, pinned)
	if templateHash(t, c, ns, "web") == "" {
		t.Fatal("no hash: the webhook could not do its job with its own RBAC")
	}
	expectReplicaSets(t, c, ns, "web", 1)
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.Secret, Name: "db"}, "password", "1")
	expectReplicaSets(t, c, ns, "web", 2)
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	expectReplicaSets(t, c, ns, "web", 3)
	// The webhook read the watcher's Lease, which its Role names, and so wrote the
	// form the watcher says it reads.
	if record := recordOf(t, c, ns, "web"); !strings.HasPrefix(record, "v2 ") {
		t.Errorf("record %q after a change: want v2, which the webhook writes only once it reads the watcher's Lease", record)
	}
	// Pinned: the webhook made the snapshots, the watcher gave them their owners.
	d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	snapshot := d.Spec.Template.Spec.Volumes[0].Secret.SecretName
	waitFor(t, 30*time.Second, "the watcher to make the ReplicaSet an owner of "+snapshot, func() bool {
		s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, snapshot, metav1.GetOptions{})
		return err == nil && slices.ContainsFunc(s.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "ReplicaSet" })
	})

	// The self-signed variant's webhook may also set its own configuration's caBundle,
	// and no other's.
	for name, want := range map[string]bool{"confighash": true, "someone-else": false} {
		review, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:confighash:confighash-webhook",
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations", Name: name, Verb: "patch",
			},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != want {
			t.Errorf("the webhook may patch the webhook configuration %q: %v, want %v", name, review.Status.Allowed, want)
		}
	}

	// A pod restarted in place gets the restarter, of the image of the webhook's own
	// pod, read with the webhook's RBAC.
	restartable := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "restartable",
		Annotations: map[string]string{confighash.AnnotationInject: "true", confighash.AnnotationRestart: confighash.RestartInPlace.String()}},
		Spec: fixtures.EnvFromTemplate("cfg").Spec}
	if restartable, err = c.Client.CoreV1().Pods(ns).Create(ctx, restartable, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(restartable.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == confighash.RestarterName }); i < 0 ||
		restartable.Spec.InitContainers[i].Image != own.Spec.Containers[0].Image {
		t.Errorf("a pod restarted in place has init containers %+v, want the restarter of image %s", restartable.Spec.InitContainers, own.Spec.Containers[0].Image)
	}

	// A wave's failure is read from the pods of the workloads it rolled; pods restarted
	// in place are watched.
	if _, err := watcherClient.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the watcher lists pods: %v", err)
	}
	if w, err := watcherClient.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: confighash.LabelRestart + "=" + confighash.RestartInPlace.String()}); err != nil {
		t.Errorf("the watcher watches pods restarted in place: %v", err)
	} else {
		w.Stop()
	}

	// Whether pods can be restarted in place: both list the nodes, once at start.
	for who, client := range map[string]kubernetes.Interface{"watcher": watcherClient, "webhook": webhookClient} {
		if _, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			t.Errorf("the %s lists the nodes: %v", who, err)
		}
	}

	// And no more than that.
	outside := map[string]error{
		"the watcher gets a node": func() error {
			_, err := watcherClient.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
			return err
		}(),
		"the watcher patches a node": func() error {
			_, err := watcherClient.CoreV1().Nodes().Patch(ctx, cluster.NodeName, types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
			return err
		}(),
		"the watcher deletes a Deployment": watcherClient.AppsV1().Deployments(ns).Delete(ctx, "web", metav1.DeleteOptions{}),
		"the watcher updates a Secret": func() error {
			_, err := watcherClient.CoreV1().Secrets(ns).Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}}, metav1.UpdateOptions{})
			return err
		}(),
		"the watcher gets a pod": func() error {
			_, err := watcherClient.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
			return err
		}(),
		"the watcher deletes a pod": watcherClient.CoreV1().Pods(ns).Delete(ctx, "restartable", metav1.DeleteOptions{}),
		"the webhook reads a pod": func() error {
			_, err := webhookClient.CoreV1().Pods("confighash").Get(ctx, own.Name, metav1.GetOptions{})
			return err
		}(),
		"the webhook patches a Deployment": func() error {
			_, err := webhookClient.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
			return err
		}(),
		"the webhook reads a Lease other than the watcher's": func() error {
			_, err := webhookClient.CoordinationV1().Leases("confighash").Get(ctx, "someone-else", metav1.GetOptions{})
			return err
		}(),
		"the webhook updates the watcher's Lease": func() error {
			lease, err := c.Client.CoordinationV1().Leases("confighash").Get(ctx, "confighash-watcher", metav1.GetOptions{})
			if err != nil {
				return err
			}
			_, err = webhookClient.CoordinationV1().Leases("confighash").Update(ctx, lease, metav1.UpdateOptions{})
			return err
		}(),
		"the webhook creates a Secret outside its namespace": func() error {
			_, err := webhookClient.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			return err
		}(),
		"the webhook creates a mutable Secret labelled as a snapshot": func() error {
			_, err := webhookClient.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "y", Labels: map[string]string{confighash.LabelSnapshotOf: "db"}}}, metav1.CreateOptions{})
			return err
		}(),
	}
	for what, err := range outside {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: got %v, want Forbidden", what, err)
		}
	}
}

func TestNamespacedInstallWorksWithRoleBindingsAloneAndOnlyInItsNamespaces(t *testing.T) {
	c := sharedCluster(t)
	ctx := t.Context()
	ensureNamespaces(t, c, "confighash")
	nsA, nsB, outside := labeledNamespace(t, c), labeledNamespace(t, c), labeledNamespace(t, c)
	// The variant's RBAC as users get it, bound in this test's namespaces instead of
	// the examples'.
	rbac := string(rbacOnly(t, kustomize(t, c, "manifests/variants/namespaced")))
	rbac = strings.NewReplacer("namespace: "+exampleNamespaces[0]+"\n", "namespace: "+nsA+"\n",
		"namespace: "+exampleNamespaces[1]+"\n", "namespace: "+nsB+"\n").Replace(rbac)
	if strings.Contains(rbac, "kind: ClusterRoleBinding") {
		t.Fatal("the namespaced variant binds a ClusterRole cluster-wide")
	}
	applyForTest(t, c, []byte(rbac))
	webhookConfig, webhookClient := tokenKubeconfig(t, c, "confighash", "confighash-webhook")
	watcherConfig, watcherClient := tokenKubeconfig(t, c, "confighash", "confighash-watcher")

	// A listed namespace without RoleBindings, as when one is deleted or not yet
	// bound, must not keep the components from serving the others.
	unbound := labeledNamespace(t, c)
	watched := "--namespaces=" + nsA + "," + nsB + "," + unbound
	startWebhook(t, c, "--kubeconfig="+webhookConfig, "--namespace=confighash", watched)
	watcher := startWatcher(t, c, "--kubeconfig="+watcherConfig, "--namespace=confighash", watched)
	for _, ns := range []string{nsA, nsB, outside} {
		createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
		createSecret(t, c, ns, "db", map[string]string{"password": "0"})
		tmpl := fixtures.SecretVolumeTemplate("db")
		tmpl.Spec.Containers[0].EnvFrom = fixtures.EnvFromTemplate("cfg").Spec.Containers[0].EnvFrom
		createDeployment(t, c, ns, fixtures.Deployment("web", 1, tmpl))
	}
	for _, ns := range []string{nsA, nsB} {
		if templateHash(t, c, ns, "web") == "" {
			t.Fatalf("no hash in %s: the webhook could not do its job with RoleBindings alone", ns)
		}
		expectReplicaSets(t, c, ns, "web", 1)
	}
	setKey(t, c, nsA, confighash.SourceRef{Kind: confighash.Secret, Name: "db"}, "password", "1")
	setKey(t, c, nsB, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	expectReplicaSets(t, c, nsA, "web", 2)
	expectReplicaSets(t, c, nsB, "web", 2)

	// A labelled namespace that is not listed: the webhook, registered here for every
	// labelled namespace, cannot read its sources and lets the write through unchanged;
	// the watcher does not act there.
	if h := templateHash(t, c, outside, "web"); h != "" {
		t.Fatalf("a namespace outside --namespaces got hash %q", h)
	}
	touches := watcher.metric(t, "confighash_watcher_touches_total")
	setKey(t, c, outside, confighash.SourceRef{Kind: confighash.Secret, Name: "db"}, "password", "1")
	expectReplicaSets(t, c, outside, "web", 1)
	if got := watcher.metric(t, "confighash_watcher_touches_total"); got != touches {
		t.Errorf("the watcher touched %v workloads outside its namespaces", got-touches)
	}

	outsideGrant := map[string]error{
		"the webhook reads a Secret outside its namespaces": func() error {
			_, err := webhookClient.CoreV1().Secrets(outside).Get(ctx, "db", metav1.GetOptions{})
			return err
		}(),
		"the webhook lists Secrets cluster-wide": func() error {
			_, err := webhookClient.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			return err
		}(),
		"the watcher patches a Deployment outside its namespaces": func() error {
			_, err := watcherClient.AppsV1().Deployments(outside).Patch(ctx, "web", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
			return err
		}(),
		"the watcher lists namespaces": func() error {
			_, err := watcherClient.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			return err
		}(),
		"the watcher reads a namespace it does not watch": func() error {
			_, err := watcherClient.CoreV1().Namespaces().Get(ctx, outside, metav1.GetOptions{})
			return err
		}(),
	}
	for what, err := range outsideGrant {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: got %v, want Forbidden", what, err)
		}
	}
}

func TestDashboardAndDocsNameOnlyServedMetrics(t *testing.T) {
	c := sharedCluster(t)
	served := map[string]bool{}
	// With alerts on, so that their metrics are served too.
	for _, p := range []*component{startWebhook(t, c).component, startWatcher(t, c, alertArgs("http://127.0.0.1:9")...)} {
		resp, err := http.Get(p.ops + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^# TYPE (confighash_\w+) (\w+)$`).FindAllStringSubmatch(string(body), -1) {
			served[m[1]] = true
			if m[2] == "histogram" {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					served[m[1]+suffix] = true
				}
			}
		}
	}
	if len(served) == 0 {
		t.Fatal("no confighash_ metric served")
	}
	metricName := regexp.MustCompile(`confighash_\w+`)
	for _, file := range []string{"manifests/helm/confighash/dashboards/confighash.json", "docs/metrics.md"} {
		text, err := os.ReadFile(filepath.Join("..", "..", file))
		if err != nil {
			t.Fatal(err)
		}
		named := map[string]bool{}
		for _, name := range metricName.FindAllString(string(text), -1) {
			named[name] = true
			if !served[name] {
				t.Errorf("%s names %s, which neither component serves", file, name)
			}
		}
		if file == "docs/metrics.md" {
			for name := range served {
				if !named[name] && !named[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")] {
					t.Errorf("docs/metrics.md does not document %s", name)
				}
			}
		}
	}
}

func TestChartSelfSignedWebhookWorksInChosenNamespacesWithItsRBAC(t *testing.T) {
	c := sharedCluster(t)
	ctx := t.Context()
	ensureNamespaces(t, c, "confighash")
	ns := labeledNamespace(t, c)
	rbac := rbacOnly(t, helmTemplate(t, c, []string{"--set", "namespaces={" + ns + "}", "--set", "certManager.enabled=false"}))
	applyForTest(t, c, rbac)
	kubeconfig, _ := tokenKubeconfig(t, c, "confighash", "confighash-webhook")

	// The chart's names: its RBAC grants exactly these. The certificate names
	// localhost, which the API server dials.
	ports, err := cluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("https://localhost:%d", ports[0])
	api := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := api.Create(ctx, webhook.Configuration("confighash", admissionregistrationv1.WebhookClientConfig{URL: &url}, webhook.Scope{InstallNamespace: "confighash", Namespaces: []string{ns}, Vocabulary: confighash.Vocabulary{Reloader: true}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = api.Delete(context.Background(), "confighash", metav1.DeleteOptions{})
		_ = c.Client.CoreV1().Secrets("confighash").Delete(context.Background(), "confighash-webhook-tls", metav1.DeleteOptions{})
	})
	startComponent(t, c, "webhook", "--kubeconfig="+kubeconfig, "--namespace=confighash", "--namespaces="+ns,
		fmt.Sprintf("--listen-address=127.0.0.1:%d", ports[0]), "--tls-self-signed-secret=confighash-webhook-tls",
		"--tls-dns-names=localhost", "--webhook-configuration=confighash")
	waitAdmitting(t, c, ns)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	createDeployment(t, c, ns, fixtures.Deployment("web", 1, fixtures.EnvFromTemplate("cfg")))
	if templateHash(t, c, ns, "web") == "" {
		t.Fatal("no hash: the self-signed webhook did not work with the chart's namespaced RBAC")
	}
}
