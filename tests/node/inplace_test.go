package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/confighash/confighash"
)

// TestARestarterRestartsItsPodInPlace: a pod carrying confighash's restarter, as
// confighash.Restarter makes it, has every container restarted where it runs when its
// restart token changes: the same pod (UID, IP), its app's restart count one higher,
// and an env var from a ConfigMap read anew. The same token written again, or the
// restarted sidecar starting, restarts nothing more.
func TestARestarterRestartsItsPodInPlace(t *testing.T) {
	env := requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, err := env.Cluster.CreateNamespace(ctx, "inplace", nil)
	if err != nil {
		t.Fatal(err)
	}
	client := env.Cluster.Client
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"message": "v1"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	restarter, volume := confighash.Restarter(ConfighashImage)
	restarter.ImagePullPolicy = corev1.PullNever
	pods := client.CoreV1().Pods(ns)
	created, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Annotations: map[string]string{confighash.AnnotationRestartToken: "t1"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{restarter},
			Containers: []corev1.Container{{
				Name: "app", Image: DemoImage, ImagePullPolicy: corev1.PullNever,
				Env: []corev1.EnvVar{{Name: "MESSAGE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "message",
				}}}},
			}},
			Volumes: []corev1.Volume{volume},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a pod with the restarter is refused: %v", err)
	}
	pod := waitPod(ctx, t, env, ns, "the pod to run", func(p *corev1.Pod) bool { return p.Status.PodIP != "" && ready(p) })
	page := "http://" + pod.Status.PodIP + ":8080/"
	if got := waitPage(ctx, t, page, "v1"); got != "v1" {
		t.Fatalf("page %q, want v1", got)
	}

	if _, err := client.CoreV1().ConfigMaps(ns).Patch(ctx, "settings", types.MergePatchType, []byte(`{"data":{"message":"v2"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The kubelet reads env from its watch of the ConfigMap: let it see v2 before the
	// restart, as the watcher's token follows the data it has seen written.
	time.Sleep(2 * time.Second)
	start := time.Now()
	setToken(ctx, t, env, ns, "t2")
	if got := waitPage(ctx, t, page, "v2"); got != "v2" {
		t.Fatalf("page %q after the token changed, want v2", got)
	}
	t.Logf("the page served v2 %v after the token changed", time.Since(start).Round(100*time.Millisecond))
	after := waitPod(ctx, t, env, ns, "the pod to be ready again", ready)
	if after.UID != created.UID || after.Status.PodIP != pod.Status.PodIP {
		t.Fatalf("pod %s at %s, was %s at %s: replaced, not restarted in place", after.UID, after.Status.PodIP, created.UID, pod.Status.PodIP)
	}
	if n := restarts(after, "app"); n != 1 {
		t.Fatalf("app restarted %d times, want 1", n)
	}

	// The same token again, and time for a restarted restarter to have looped: nothing.
	setToken(ctx, t, env, ns, "t2")
	time.Sleep(5 * time.Second)
	if final := waitPod(ctx, t, env, ns, "the pod to stay ready", ready); restarts(final, "app") != 1 || final.UID != created.UID {
		t.Fatalf("app restarted %d times, want still 1", restarts(final, "app"))
	}
}

func setToken(ctx context.Context, t *testing.T, env *Env, ns, token string) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, confighash.AnnotationRestartToken, token)
	if _, err := env.Cluster.Client.CoreV1().Pods(ns).Patch(ctx, "app", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitPod returns the pod app of the namespace once cond holds.
func waitPod(ctx context.Context, t *testing.T, env *Env, ns, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := env.Cluster.Client.CoreV1().Pods(ns).Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (status %+v)", what, err, pod.Status)
	}
	return pod
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func restarts(p *corev1.Pod, container string) int32 {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container {
			return s.RestartCount
		}
	}
	return -1
}

// demoRestartsInPlace switches the installed demo to restart in place, which rolls it
// once (its pods need the restarter), then changes its message: the page shows it from
// the same pod (UID), with no new ReplicaSet and its app restarted once, and nothing
// restarts it again.
func demoRestartsInPlace(t *testing.T, env *Env) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	before, err := env.ReplicaSets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.SwitchDemoToInPlace(ctx); err != nil {
		t.Fatal(err)
	}
	expectRollouts(ctx, t, env, before) // the switch: one more ReplicaSet than before
	pod, err := env.DemoPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Labels[confighash.LabelRestart] != "in-place" || pod.Annotations[confighash.AnnotationRestartToken] == "" || len(pod.Spec.InitContainers) == 0 ||
		pod.Spec.InitContainers[0].Name != confighash.RestarterName {
		t.Fatalf("the demo's pod was not made restartable in place: labels %v, annotations %v, init containers %d", pod.Labels, pod.Annotations, len(pod.Spec.InitContainers))
	}
	for _, m := range pod.Spec.InitContainers[0].VolumeMounts {
		if strings.HasPrefix(m.Name, "kube-api-access-") {
			t.Errorf("the restarter was given the pod's ServiceAccount token: %+v", m)
		}
	}
	page, err := env.DemoPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	message := "in place " + time.Now().Format("150405")
	start := time.Now()
	if err := env.SetDemoMessage(ctx, message); err != nil {
		t.Fatal(err)
	}
	if got := waitPage(ctx, t, page, message); got != message {
		t.Fatalf("page = %q, want %q\n%s", got, message, env.describe(ctx, DemoNamespace))
	}
	t.Logf("figures: ConfigMap edit to %q served in place %s", message, time.Since(start).Round(100*time.Millisecond))
	time.Sleep(5 * time.Second) // a second restart would show by now
	after, err := env.DemoPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != pod.UID || after.Status.PodIP != pod.Status.PodIP {
		t.Errorf("pod %s (%s) became %s (%s): replaced, not restarted in place", pod.UID, pod.Status.PodIP, after.UID, after.Status.PodIP)
	}
	if n, want := AppRestarts(after), AppRestarts(pod)+1; n != want {
		t.Errorf("the app restarted %d times, want %d", n, want)
	}
	if n, _ := env.ReplicaSets(ctx); n != before+1 {
		t.Errorf("%d ReplicaSets, want %d: the change rolled the Deployment", n, before+1)
	}
}
