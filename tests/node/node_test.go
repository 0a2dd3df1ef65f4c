package node

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestPodServesFromTheProjectImage runs the demo app's image on the node and fetches
// its page from the host through the pod network.
func TestPodServesFromTheProjectImage(t *testing.T) {
	env := requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns, err := env.Cluster.CreateNamespace(ctx, "pod", nil)
	if err != nil {
		t.Fatal(err)
	}
	pods := env.Cluster.Client.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "demo"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "demo", Image: DemoImage, ImagePullPolicy: corev1.PullNever,
			Env: []corev1.EnvVar{{Name: "MESSAGE", Value: "hello from the node"}},
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pod, err = pods.Get(ctx, "demo", metav1.GetOptions{})
		return err == nil && pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "", nil
	})
	if err != nil {
		t.Fatalf("the pod did not run: %v (status %+v)", err, pod.Status)
	}
	if got := waitPage(ctx, t, "http://"+pod.Status.PodIP+":8080/", "hello from the node"); got != "hello from the node" {
		t.Fatalf("page = %q, want %q", got, "hello from the node")
	}
}
