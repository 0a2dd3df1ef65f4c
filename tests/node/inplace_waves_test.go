package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
)

// restartsInPlaceGoInWaves: in a namespace paced in waves of 1, two Deployments of one
// pod each, restarted in place, with MESSAGE from the same ConfigMap: a change
// restarts one controller's pods, then the other's, never both down at once; a bad
// change (the key removed) halts after the first, and the other keeps serving,
// untouched; the fix restarts both.
func restartsInPlaceGoInWaves(t *testing.T, env *Env) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	c := env.Cluster.Client
	ns, err := env.Cluster.CreateNamespace(ctx, "waves", map[string]string{confighash.InjectionLabel: confighash.InjectionEnabled})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"1"}}}`, confighash.AnnotationWaveSize), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Data: map[string]string{"message": "w1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if _, err := c.AppsV1().Deployments(ns).Create(ctx, inPlaceWeb(name, "shared", 1), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before := waitAppServes(ctx, t, env, ns, "w1")
	for name, pod := range before {
		if pod.Labels[confighash.LabelRestart] != "in-place" {
			t.Fatalf("%s was admitted without its restarter (labels %v); what the webhook logged of %s:\n%s", name, pod.Labels, ns, env.logsMentioning(InstallNamespace, ns))
		}
	}
	patch := func(typ types.PatchType, p string) {
		t.Helper()
		if _, err := c.CoreV1().ConfigMaps(ns).Patch(ctx, "shared", typ, []byte(p), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	patch(types.MergePatchType, `{"data":{"message":"w2"}}`)
	mostDown := 0
	after := waitAppServesWatching(ctx, t, env, ns, "w2", func(pods []corev1.Pod) {
		down := 0
		for i := range pods {
			if !podReady(&pods[i]) {
				down++
			}
		}
		mostDown = max(mostDown, down)
	})
	if mostDown > 1 {
		t.Errorf("%d pods were down at once, want 1: a wave of 1 restarts one controller's pods at a time", mostDown)
	}
	for name, pod := range after {
		if was, ok := before[name]; !ok || pod.UID != was.UID || AppRestarts(pod) != 1 {
			t.Errorf("%s: restarted %d times (want 1), or replaced", name, AppRestarts(pod))
		}
	}
	if events, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=RestartWaits"}); err != nil || len(events.Items) == 0 {
		t.Errorf("no RestartWaits Event for the controller that waited for its wave (%v)", err)
	}

	// The bad change: the pod of the first controller restarted for it cannot start.
	patch(types.JSONPatchType, `[{"op":"remove","path":"/data/message"}]`)
	halted := waitHalted(ctx, t, env, ns)
	time.Sleep(6 * time.Second) // the other controller's pod would have been restarted by now
	list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.Name == halted {
			continue
		}
		if got, _ := Get(ctx, "http://"+pod.Status.PodIP+":8080/"); got != "w2" || AppRestarts(pod) != AppRestarts(after[pod.Name]) {
			t.Errorf("%s, of the controller after the halted %s: serves %q after %d restarts, want w2 untouched after %d", pod.Name, halted, got, AppRestarts(pod), AppRestarts(after[pod.Name]))
		}
	}
	patch(types.MergePatchType, `{"data":{"message":"w3"}}`)
	for name, pod := range waitAppServes(ctx, t, env, ns, "w3") {
		if pod.UID != before[name].UID {
			t.Errorf("%s was replaced, not restarted in place", name)
		}
	}
}

// aTemplateChangeWithTheDataRollsOnce: a ConfigMap change and a pod template change
// applied together, as a helm upgrade does, to a Deployment of 2 restarted in place:
// its rollout replaces the pods, which start on the new data; none is restarted in
// place too.
func aTemplateChangeWithTheDataRollsOnce(t *testing.T, env *Env) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c := env.Cluster.Client
	ns, err := env.Cluster.CreateNamespace(ctx, "upgrade", map[string]string{confighash.InjectionLabel: confighash.InjectionEnabled})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Data: map[string]string{"message": "u1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, inPlaceWeb("web", "web", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := waitAppServes(ctx, t, env, ns, "u1")

	if _, err := c.CoreV1().ConfigMaps(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"data":{"message":"u2"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	template := `{"spec":{"template":{"metadata":{"labels":{"release":"2"}}}}}`
	if _, err := c.AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType, []byte(template), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	restartedOld := 0
	after := waitAppServesWatching(ctx, t, env, ns, "u2", func(pods []corev1.Pod) {
		for i := range pods {
			if _, old := before[pods[i].Name]; old {
				restartedOld = max(restartedOld, int(AppRestarts(&pods[i])))
			}
		}
	})
	if restartedOld > 0 {
		t.Errorf("a pod the rollout replaced was also restarted in place (%d restarts)", restartedOld)
	}
	for name, pod := range after {
		if _, old := before[name]; old || AppRestarts(pod) != 0 {
			t.Errorf("%s: restarted %d times, or not replaced by the rollout", name, AppRestarts(pod))
		}
	}
	time.Sleep(6 * time.Second) // a restart in place of the new pods would show by now
	if events, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=RestartedInPlace"}); err != nil || len(events.Items) != 0 {
		t.Errorf("%d RestartedInPlace Events (%v), want none: the rollout alone brought the new data", len(events.Items), err)
	}
}

// inPlaceWeb is a Deployment of the demo app labelled app=web, with MESSAGE from the
// ConfigMap's key message, restarted in place.
func inPlaceWeb(name, configMap string, replicas int32) *appsv1.Deployment {
	d := DemoDeployment()
	labels := map[string]string{"app": "web", "name": name}
	d.Name, d.Annotations = name, nil
	d.Spec.Replicas = ptr.To(replicas)
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
	d.Spec.Template.Labels = labels
	d.Spec.Template.Annotations = map[string]string{confighash.AnnotationRestart: "in-place"}
	d.Spec.Template.Spec.Containers[0].Env[0].ValueFrom.ConfigMapKeyRef.Name = configMap
	return d
}
