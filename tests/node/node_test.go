package node

import (
	"context"
	"io"
	"net/http"
	"strings"
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
	pod, err := env.Cluster.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "demo"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "demo", Image: DemoImage, ImagePullPolicy: corev1.PullNever,
			Env: []corev1.EnvVar{{Name: "MESSAGE", Value: "hello from the node"}},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip := waitPodIP(ctx, t, env, ns, pod.Name)
	if got := fetch(ctx, t, "http://"+ip+":8080/"); got != "hello from the node" {
		t.Fatalf("page = %q, want %q", got, "hello from the node")
	}
}

// waitPodIP waits until the pod runs and returns its address.
func waitPodIP(ctx context.Context, t *testing.T, env *Env, ns, name string) string {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := env.Cluster.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s did not run: %v (status %+v)", ns, name, err, last.Status)
	}
	return last.Status.PodIP
}

// newVisitor opens a connection per request, as a new visitor of a page would: a
// kept-alive one stays with the pod it first reached.
var newVisitor = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// fetch GETs url, retrying while the server is not listening yet, and returns the body.
func fetch(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	var body string
	var lastErr error
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := newVisitor.Do(req)
		if err != nil {
			lastErr = err
			return false, nil
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = strings.TrimSpace(string(b))
		return err == nil && resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("GET %s: %v (last error %v)", url, err, lastErr)
	}
	return body
}
