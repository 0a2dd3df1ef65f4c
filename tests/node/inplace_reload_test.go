package node

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
)

// appsReloadWithoutARestart: a Deployment of 2 whose app reloads its file on SIGHUP,
// and one whose app reloads on a POST, both with the file from a ConfigMap volume,
// serve a change of the ConfigMap from the same pods with no container restarted;
// each pod is told once (a Reloaded Event).
func appsReloadWithoutARestart(t *testing.T, env *Env) {
	for _, mode := range []string{"signal:SIGHUP", "http:8080/-/reload"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			ns, err := env.Cluster.CreateNamespace(ctx, "reload", map[string]string{confighash.InjectionLabel: confighash.InjectionEnabled})
			if err != nil {
				t.Fatal(err)
			}
			c := env.Cluster.Client
			if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Data: map[string]string{"message": "r1"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.AppsV1().Deployments(ns).Create(ctx, reloadingDeployment(mode), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			before := waitAppServes(ctx, t, env, ns, "r1")
			for _, pod := range before {
				if pod.Labels[confighash.LabelRestart] != "reload" {
					t.Fatalf("%s is labelled %q, want reload", pod.Name, pod.Labels[confighash.LabelRestart])
				}
			}
			start := time.Now()
			if _, err := c.CoreV1().ConfigMaps(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"data":{"message":"r2"}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			after := waitAppServes(ctx, t, env, ns, "r2")
			t.Logf("figures: %s: ConfigMap edit to both pods serving it, reloaded: %s", mode, time.Since(start).Round(100*time.Millisecond))
			for name, pod := range after {
				if was, ok := before[name]; !ok || pod.UID != was.UID || AppRestarts(pod) != 0 {
					t.Errorf("%s: app restarted %d times (want 0), or replaced", name, AppRestarts(pod))
				}
			}
			events, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Reloaded"})
			if err != nil || len(events.Items) != len(after) {
				t.Errorf("%d Reloaded Events (%v), want one per pod", len(events.Items), err)
			}
		})
	}
}

// reloadingDeployment is the demo app, 2 replicas, serving its message from a file
// of a ConfigMap volume, which it reloads as mode says.
func reloadingDeployment(mode string) *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{confighash.AnnotationRestart: mode}},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "app", Image: DemoImage, ImagePullPolicy: corev1.PullNever,
						Env:            []corev1.EnvVar{{Name: "MESSAGE_FILE", Value: "/etc/web/message"}},
						VolumeMounts:   []corev1.VolumeMount{{Name: "conf", MountPath: "/etc/web"}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
					}},
					Volumes: []corev1.Volume{{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web"}}}}},
				},
			},
		},
	}
}

// waitAppServes waits until the namespace's app pods are 2, Ready, and serve want.
func waitAppServes(ctx context.Context, t *testing.T, env *Env, ns, want string) map[string]*corev1.Pod {
	t.Helper()
	return waitAppServesWatching(ctx, t, env, ns, want, nil)
}

// waitAppServesWatching is waitAppServes, calling watch, when given, with each poll's
// pods.
func waitAppServesWatching(ctx context.Context, t *testing.T, env *Env, ns, want string, watch func([]corev1.Pod)) map[string]*corev1.Pod {
	t.Helper()
	var pods map[string]*corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := env.Cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, nil
		}
		if watch != nil {
			watch(list.Items)
		}
		pods = map[string]*corev1.Pod{}
		for i := range list.Items {
			p := &list.Items[i]
			if p.DeletionTimestamp != nil {
				continue
			}
			if got, _ := Get(ctx, "http://"+p.Status.PodIP+":8080/"); !podReady(p) || got != want {
				return false, nil
			}
			pods[p.Name] = p
		}
		return len(pods) == 2, nil
	})
	if err != nil {
		t.Fatalf("the app's pods did not both serve %q: %v\n%s", want, err, env.describe(ctx, ns))
	}
	return pods
}
