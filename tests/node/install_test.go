package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	confighash "github.com/confighash/confighash"
)

// installNamespace is where docs/install.md installs confighash.
const installNamespace = "confighash"

// TestInstalledAsTheDocsSay installs confighash on the real node exactly as
// docs/install.md says, from the project's image, with TLS from a real cert-manager,
// and runs the demo: each step needs the one before, so they run in order.
func TestInstalledAsTheDocsSay(t *testing.T) {
	env := requireNode(t)
	if err := env.StartCertManager(t.Context()); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		run  func(t *testing.T, env *Env)
	}{
		{"kubectl apply -k: Ready, certificate issued, caBundle injected, admission through the Service", applyWithKustomize},
		{"the demo page changes from v1 to v2 with one rollout", demoServesTheNewValue},
		{"the renewed serving certificate is served with no failed admission", servingCertificateRenewed},
		{"the leading watcher's pod deleted: the other leads, a change rolls once", leaderDeleted},
		{"a webhook pod terminated while admissions stream: none fails", webhookTerminated},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, env) }) {
			return
		}
	}
}

func applyWithKustomize(t *testing.T, env *Env) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	// A kustomization of the user's own, as docs/install.md shows, sets the image.
	overlay := t.TempDir()
	manifests, err := filepath.Rel(overlay, filepath.Join(repoRoot(), "manifests")) // kustomize takes no absolute path
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf("resources: [%s]\nimages:\n- name: ghcr.io/confighash/confighash\n  newTag: %s\n", manifests, imageTag)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := env.Cluster.Kubectl(ctx, nil, "apply", "-k", overlay); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Cluster.Kubectl(ctx, nil, "-n", installNamespace, "rollout", "status", "--timeout=3m",
		"deployment/confighash-webhook", "deployment/confighash-watcher"); err != nil {
		t.Fatalf("%v\n%s", err, env.describe(ctx, installNamespace))
	}
	ready := time.Since(start)
	if _, err := env.Cluster.Kubectl(ctx, nil, "-n", installNamespace, "wait", "--for=condition=Ready", "--timeout=60s",
		"certificate/confighash-ca", "certificate/confighash-webhook"); err != nil {
		t.Fatal(err)
	}
	ca := waitCABundle(ctx, t, env)
	tls, err := env.Cluster.Client.CoreV1().Secrets(installNamespace).Get(ctx, "confighash-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ca, tls.Data["ca.crt"]) {
		t.Fatalf("caBundle is not the CA of the serving certificate's Secret")
	}

	// The first write the webhook mutates, through the API server, the Service and
	// kube-proxy's rules to a pod on the node.
	ns := demoNamespace(ctx, t, env)
	deploy := demoDeployment()
	var first time.Duration
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		got, err := env.Cluster.Client.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		first = time.Since(start)
		return got.Spec.Template.Annotations[confighash.AnnotationHash] != "", nil
	})
	if err != nil {
		t.Fatalf("no admission through the Service was mutated: %v\n%s", err, env.describe(ctx, installNamespace))
	}
	t.Logf("figures: apply to Ready %s; first admission through the Service %s after apply (%s after Ready)",
		ready.Round(100*time.Millisecond), first.Round(100*time.Millisecond), (first - ready).Round(100*time.Millisecond))
}

// waitCABundle waits until cert-manager's CA injector has filled every caBundle of
// confighash's webhook configuration, and returns it.
func waitCABundle(ctx context.Context, t *testing.T, env *Env) []byte {
	t.Helper()
	var bundle []byte
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		cfg, err := env.Cluster.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "confighash", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, w := range cfg.Webhooks {
			if len(w.ClientConfig.CABundle) == 0 {
				return false, nil
			}
			bundle = w.ClientConfig.CABundle
		}
		return len(cfg.Webhooks) > 0, nil
	})
	if err != nil {
		t.Fatalf("the CA injector did not fill the caBundle: %v", err)
	}
	return bundle
}

const demoNS = "demo"

// demoNamespace creates the demo's namespace, enabled for injection, with the
// ConfigMap the app shows, once.
func demoNamespace(ctx context.Context, t *testing.T, env *Env) string {
	t.Helper()
	c := env.Cluster.Client.CoreV1()
	if _, err := c.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: demoNS, Labels: map[string]string{confighash.InjectionLabel: confighash.InjectionEnabled},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ConfigMaps(demoNS).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-settings"}, Data: map[string]string{"message": "v1"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Services(demoNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "demo"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "demo"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return demoNS
}

// demoDeployment is the demo app, opted in, showing the ConfigMap's message from an
// environment variable: only a new pod shows a new value.
func demoDeployment() *appsv1.Deployment {
	labels := map[string]string{"app": "demo"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Annotations: map[string]string{confighash.AnnotationInject: "true"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: DemoImage, ImagePullPolicy: corev1.PullNever,
					Env: []corev1.EnvVar{{Name: "MESSAGE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "demo-settings"}, Key: "message",
					}}}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
				}}},
			},
		},
	}
}

func demoServesTheNewValue(t *testing.T, env *Env) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	apps := env.Cluster.Client.AppsV1().Deployments(demoNS)
	if _, err := apps.Create(ctx, demoDeployment(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Cluster.WaitRolledOut(ctx, demoNS, "demo"); err != nil {
		t.Fatal(err)
	}
	svc, err := env.Cluster.Client.CoreV1().Services(demoNS).Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	page := "http://" + svc.Spec.ClusterIP + "/"
	if got := fetch(ctx, t, page); got != "v1" {
		t.Fatalf("page through the Service = %q, want v1", got)
	}

	start := time.Now()
	if _, err := env.Cluster.Client.CoreV1().ConfigMaps(demoNS).Patch(ctx, "demo-settings", types.MergePatchType,
		[]byte(`{"data":{"message":"v2"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var rolled time.Duration
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if rolled == 0 && replicaSets(ctx, t, env, demoNS, "app=demo") > 1 {
			rolled = time.Since(start)
		}
		return fetch(ctx, t, page) == "v2", nil
	})
	if err != nil {
		t.Fatalf("the page never showed v2: %v", err)
	}
	t.Logf("figures: ConfigMap edit to a new ReplicaSet %s, to v2 served through the Service %s",
		rolled.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
	if err := env.Cluster.WaitRolledOut(ctx, demoNS, "demo"); err != nil {
		t.Fatal(err)
	}
	// Exactly once: the first ReplicaSet and one more, and no other after a while.
	time.Sleep(5 * time.Second)
	if n := replicaSets(ctx, t, env, demoNS, "app=demo"); n != 2 {
		t.Fatalf("%d ReplicaSets after one change, want 2 (one rollout)", n)
	}
}

func replicaSets(ctx context.Context, t *testing.T, env *Env, ns, selector string) int {
	t.Helper()
	list, err := env.Cluster.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// describe is kubectl's view of a namespace's pods and events, for failures.
func (e *Env) describe(ctx context.Context, ns string) string {
	pods, _ := e.Cluster.Kubectl(ctx, nil, "-n", ns, "get", "pods,certificates,events", "-o", "wide")
	return string(pods)
}
