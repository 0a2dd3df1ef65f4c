package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
)

// operatorPodsRestartInPlace: pods made by a controller that has no pod template
// confighash could roll (made here as an operator makes them: each pod its own
// object, with its owner as controller and the annotations of the owner's pod
// template), and a bare pod, are restarted in place when their ConfigMap changes:
// the same pods, each app restarted once, the owner's two pods never both down.
func operatorPodsRestartInPlace(t *testing.T, env *Env) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	ns, err := env.Cluster.CreateNamespace(ctx, "operator", map[string]string{confighash.InjectionLabel: confighash.InjectionEnabled})
	if err != nil {
		t.Fatal(err)
	}
	c := env.Cluster.Client.CoreV1()
	settings, err := c.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "broker"}, Data: map[string]string{"message": "b1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The custom resource an operator reconciles; any object can own pods.
	owner, err := c.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cluster-spec"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"broker-0", "broker-1", "bare"}
	for _, name := range names {
		pod := demoPodOf(name, settings.Name)
		if name != "bare" {
			pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}
		}
		if _, err := c.Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before := waitPodsServe(ctx, t, env, ns, names, "b1", nil)
	for _, name := range names {
		if before[name].Annotations[confighash.AnnotationRestartToken] == "" {
			t.Fatalf("%s was not made restartable in place: %v", name, before[name].Annotations)
		}
	}
	if _, err := c.ConfigMaps(ns).Patch(ctx, "broker", types.MergePatchType, []byte(`{"data":{"message":"b2"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	ownersDown := 0
	after := waitPodsServe(ctx, t, env, ns, names, "b2", func(pods map[string]*corev1.Pod) {
		down := 0
		for _, name := range names[:2] {
			if !podReady(pods[name]) {
				down++
			}
		}
		ownersDown = max(ownersDown, down)
	})
	for _, name := range names {
		if after[name].UID != before[name].UID || AppRestarts(after[name]) != AppRestarts(before[name])+1 {
			t.Errorf("%s: UID %s then %s, app restarted %d then %d times; want the same pod, restarted once",
				name, before[name].UID, after[name].UID, AppRestarts(before[name]), AppRestarts(after[name]))
		}
	}
	if ownersDown > 1 {
		t.Errorf("both of the owner's pods were down at once")
	}
}

// demoPodOf is a demo app pod whose MESSAGE comes from the ConfigMap, asking to be
// restarted in place.
func demoPodOf(name, configMap string) *corev1.Pod {
	spec := DemoDeployment().Spec.Template.Spec
	spec.Containers[0].Env[0].ValueFrom.ConfigMapKeyRef.Name = configMap
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}, Annotations: map[string]string{confighash.AnnotationRestart: "in-place"}},
		Spec:       spec,
	}
}

// waitPodsServe waits until each named pod is Ready and serves want, calling each
// poll's pods to watch when given, and returns them.
func waitPodsServe(ctx context.Context, t *testing.T, env *Env, ns string, names []string, want string, watch func(map[string]*corev1.Pod)) map[string]*corev1.Pod {
	t.Helper()
	pods := map[string]*corev1.Pod{}
	var last string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			pod, err := env.Cluster.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			pods[name] = pod
		}
		if watch != nil {
			watch(pods)
		}
		for _, name := range names {
			if got, _ := Get(ctx, "http://"+pods[name].Status.PodIP+":8080/"); !podReady(pods[name]) || got != want {
				last = fmt.Sprintf("%s: Ready %v, serves %q", name, podReady(pods[name]), got)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the pods did not all serve %q: %s\n%s", want, last, env.describe(ctx, ns))
	}
	return pods
}
