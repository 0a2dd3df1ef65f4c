package node

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	confighash "github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/rollouts"
)

// InstallNamespace is where docs/install.md installs confighash.
const InstallNamespace = "confighash"

// DemoNamespace holds the demo app.
const DemoNamespace = "demo"

// ApplyKustomize installs confighash as docs/install.md says, with kubectl apply -k
// of a kustomization of the user's own that sets the image, and waits until both
// components are rolled out.
func (e *Env) ApplyKustomize(ctx context.Context) error {
	overlay := filepath.Join(e.dir, "install")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		return err
	}
	manifests, err := filepath.Rel(overlay, filepath.Join(repoRoot(), "manifests")) // kustomize takes no absolute path
	if err != nil {
		return err
	}
	kustomization := fmt.Sprintf("resources: [%s]\nimages:\n- name: ghcr.io/confighash/confighash\n  newTag: %s\n", manifests, imageTag)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		return err
	}
	if _, err := e.Cluster.Kubectl(ctx, nil, "apply", "-k", overlay); err != nil {
		return err
	}
	if _, err := e.Cluster.Kubectl(ctx, nil, "-n", InstallNamespace, "rollout", "status", "--timeout=3m",
		"deployment/confighash-webhook", "deployment/confighash-watcher"); err != nil {
		return fmt.Errorf("%w\n%s", err, e.describe(ctx, InstallNamespace))
	}
	return nil
}

// CreateDemoNamespace creates the demo's namespace, enabled for injection, with the
// ConfigMap whose message the app shows (v1) and a Service in front of the app.
func (e *Env) CreateDemoNamespace(ctx context.Context) error {
	c := e.Cluster.Client.CoreV1()
	if _, err := c.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: DemoNamespace, Labels: map[string]string{confighash.InjectionLabel: confighash.InjectionEnabled},
	}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := c.ConfigMaps(DemoNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-settings"}, Data: map[string]string{"message": "v1"},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := c.Services(DemoNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "demo"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "demo"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	return err
}

// DemoDeployment is the demo app, opted in, showing the ConfigMap's message from an
// environment variable: only a new pod shows a new value.
func DemoDeployment() *appsv1.Deployment {
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

// SwitchDemoToInPlace asks, on the demo's pod template, for restart in place: the
// switch rolls it once, its new pods getting the restarter.
func (e *Env) SwitchDemoToInPlace(ctx context.Context) error {
	patch := fmt.Appendf(nil, `{"spec":{"template":{"metadata":{"annotations":{%q:"in-place"}}}}}`, confighash.AnnotationRestart)
	_, err := e.Cluster.Client.AppsV1().Deployments(DemoNamespace).Patch(ctx, "demo", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	return err
}

// DemoPod returns the demo's one pod not being deleted, once there is one alone.
func (e *Env) DemoPod(ctx context.Context) (*corev1.Pod, error) {
	var found *corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := e.Cluster.Client.CoreV1().Pods(DemoNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=demo"})
		if err != nil {
			return false, nil
		}
		found = nil
		for i := range pods.Items {
			if pods.Items[i].DeletionTimestamp == nil {
				if found != nil {
					return false, nil
				}
				found = &pods.Items[i]
			}
		}
		return found != nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no single demo pod: %w", err)
	}
	return found, nil
}

// AppRestarts is the restart count of a pod's app container, -1 when it has none.
func AppRestarts(pod *corev1.Pod) int32 {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == "app" {
			return s.RestartCount
		}
	}
	return -1
}

// DemoPage is the demo's page through its Service.
func (e *Env) DemoPage(ctx context.Context) (string, error) {
	svc, err := e.Cluster.Client.CoreV1().Services(DemoNamespace).Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return "http://" + svc.Spec.ClusterIP + "/", nil
}

// SetDemoMessage edits the demo's ConfigMap.
func (e *Env) SetDemoMessage(ctx context.Context, message string) error {
	_, err := e.Cluster.Client.CoreV1().ConfigMaps(DemoNamespace).Patch(ctx, "demo-settings", types.MergePatchType,
		fmt.Appendf(nil, `{"data":{"message":%q}}`, message), metav1.PatchOptions{})
	return err
}

// newVisitor opens a connection per request, as a new visitor of a page would: a
// kept-alive one stays with the pod it first reached.
var newVisitor = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}

// Get fetches a page and returns its body, trimmed.
func Get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := newVisitor.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return strings.TrimSpace(string(b)), err
}

// ReplicaSets counts the demo's ReplicaSets: one per rollout, and the first.
func (e *Env) ReplicaSets(ctx context.Context) (int, error) {
	return rollouts.ReplicaSets(ctx, e.Cluster.Client, DemoNamespace, "demo")
}

// describe is kubectl's view of a namespace's pods, certificates and events, for
// failures.
func (e *Env) describe(_ context.Context, ns string) string {
	// Its own time: it is called when the caller's has run out.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := e.Cluster.Kubectl(ctx, nil, "-n", ns, "get", "pods,certificates,events", "-o", "wide")
	return string(out) + e.podLogs(ns, 20)
}

// podLogs is the last lines of the logs of the namespace's containers, read from the
// node's disk: the API server cannot reach kubelet by the node's name here.
func (e *Env) podLogs(ns string, lines int) string {
	files, _ := filepath.Glob(filepath.Join(e.Node.path("pod-logs"), ns+"_*", "*", "*.log"))
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		all := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "==> %s\n%s\n", f, strings.Join(all[max(0, len(all)-lines):], "\n"))
	}
	return b.String()
}

// logsMentioning is the lines of the logs of the namespace's containers that mention
// what, as podLogs reads them.
func (e *Env) logsMentioning(ns, what string) string {
	var b strings.Builder
	for _, line := range strings.Split(e.podLogs(ns, 5000), "\n") {
		if strings.HasPrefix(line, "==> ") || strings.Contains(line, what) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// HelmInstall installs confighash with the chart as docs/install.md says, with the
// image built here, and waits until both components are rolled out.
func (e *Env) HelmInstall(ctx context.Context) error {
	helm, err := cluster.Helm(ctx)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, helm, "install", "confighash", filepath.Join(repoRoot(), "manifests", "helm", "confighash"),
		"--kubeconfig", e.Cluster.Kubeconfig, "--namespace", InstallNamespace, "--create-namespace", "--set", "image.tag="+imageTag)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("helm install: %w: %s", err, out)
	}
	if _, err := e.Cluster.Kubectl(ctx, nil, "-n", InstallNamespace, "rollout", "status", "--timeout=3m",
		"deployment/confighash-webhook", "deployment/confighash-watcher"); err != nil {
		return fmt.Errorf("%w\n%s", err, e.describe(ctx, InstallNamespace))
	}
	return nil
}

// UninstallKustomize deletes what ApplyKustomize installed and waits until it is gone.
func (e *Env) UninstallKustomize(ctx context.Context) error {
	_, err := e.Cluster.Kubectl(ctx, nil, "delete", "-k", filepath.Join(e.dir, "install"), "--wait", "--timeout=2m")
	return err
}

// Mutated creates an opted-in Deployment in the demo namespace, server-side dry run,
// and reports whether the webhook wrote its hash: the API server calls the webhook
// through its Service, and with failurePolicy Ignore a failed call shows only as a
// missing hash.
func (e *Env) Mutated(ctx context.Context) (bool, error) {
	probe := DemoDeployment()
	probe.Name = "admission-probe"
	got, err := e.Cluster.Client.AppsV1().Deployments(DemoNamespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return false, err
	}
	return got.Spec.Template.Annotations[confighash.AnnotationHash] != "", nil
}
