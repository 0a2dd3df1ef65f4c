package watcher

import (
	"testing"

	"github.com/confighash/confighash"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestRolloutIsReadAsKubectlRolloutStatusReadsIt(t *testing.T) {
	three := int32(3)
	deployment := func(generation, observed int64, updated, replicas, available int32, conds ...appsv1.DeploymentCondition) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: generation}, Spec: appsv1.DeploymentSpec{Replicas: &three},
			Status: appsv1.DeploymentStatus{ObservedGeneration: observed, UpdatedReplicas: updated, Replicas: replicas, AvailableReplicas: available, Conditions: conds}}
	}
	deadline := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}
	onDelete := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Spec: appsv1.StatefulSetSpec{Replicas: &three,
		UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}}}
	argo := func(phase, observed string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"phase": phase, "observedGeneration": observed}}}
		u.SetGroupVersionKind(confighash.Rollout.GroupVersionKind)
		u.SetGeneration(4)
		return u
	}
	custom := func(status string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON([]byte(`{"apiVersion":"example.com/v1","kind":"Web","metadata":{"generation":4},"spec":{"replicas":3},"status":` + status + `}`)); err != nil {
			t.Fatal(err)
		}
		return u
	}
	tests := []struct {
		name string
		obj  runtime.Object
		want confighash.RolloutStatus
	}{
		{"a Deployment whose controller has not seen the new template", deployment(5, 4, 3, 3, 3), confighash.RollingOut},
		{"a Deployment with old replicas left", deployment(5, 5, 3, 4, 3), confighash.RollingOut},
		{"a Deployment whose new replicas are not available", deployment(5, 5, 3, 3, 2), confighash.RollingOut},
		{"a Deployment all updated and available", deployment(5, 5, 3, 3, 3), confighash.RolledOut},
		{"a Deployment past its progress deadline", deployment(5, 5, 1, 4, 3, deadline), confighash.RolloutFailed},
		{"a StatefulSet with the OnDelete strategy", onDelete, confighash.RolledOut},
		{"a StatefulSet not all ready", &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: &three},
			Status: appsv1.StatefulSetStatus{UpdatedReplicas: 3, ReadyReplicas: 2}}, confighash.RollingOut},
		{"a DaemonSet updated and available everywhere", &appsv1.DaemonSet{
			Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, UpdatedNumberScheduled: 2, NumberAvailable: 2}}, confighash.RolledOut},
		{"a DaemonSet with a node still to update", &appsv1.DaemonSet{
			Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, UpdatedNumberScheduled: 1, NumberAvailable: 2}}, confighash.RollingOut},
		{"a CronJob: its next Job reads the new data", &batchv1.CronJob{}, confighash.RolledOut},
		{"an Argo Rollout Healthy at its generation", argo("Healthy", "4"), confighash.RolledOut},
		{"an Argo Rollout Healthy at an older generation", argo("Healthy", "3"), confighash.RollingOut},
		{"an Argo Rollout Degraded", argo("Degraded", "4"), confighash.RolloutFailed},
		{"another kind whose controller has not seen the new spec", custom(`{"observedGeneration":3,"conditions":[{"type":"Ready","status":"True"}]}`), confighash.RollingOut},
		{"another kind Ready at its generation", custom(`{"observedGeneration":4,"conditions":[{"type":"Ready","status":"True"}]}`), confighash.RolledOut},
		{"another kind not Ready yet (a Knative Service)", custom(`{"observedGeneration":4,"conditions":[{"type":"Ready","status":"Unknown"}]}`), confighash.RollingOut},
		{"another kind Stalled", custom(`{"observedGeneration":4,"conditions":[{"type":"Stalled","status":"True"}]}`), confighash.RolloutFailed},
		{"another kind with old replicas left (a CloneSet)", custom(`{"observedGeneration":4,"replicas":4,"updatedReplicas":3,"readyReplicas":3}`), confighash.RollingOut},
		{"another kind with every replica updated and ready", custom(`{"observedGeneration":4,"replicas":3,"updatedReplicas":3,"readyReplicas":3}`), confighash.RolledOut},
		{"another kind with no status to wait for", custom(`{}`), confighash.RolledOut},
	}
	for _, tt := range tests {
		if got := rolloutOf(tt.obj); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

// A pod of the new template that crash-loops, cannot pull its image or cannot read its
// configuration fails the rollout; one of the old template, or one merely starting,
// does not.
func TestFailingPodOfTheNewTemplateFailsTheRollout(t *testing.T) {
	pod := func(name, hash string, waiting string, init bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{confighash.AnnotationHash: hash}}}
		s := corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting}}}
		if init {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{s}
		} else {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{s}
		}
		return p
	}
	tests := []struct {
		name string
		pods []corev1.Pod
		want string
	}{
		{"crash-looping", []corev1.Pod{pod("a", "new", "CrashLoopBackOff", false)}, "pod a: container app: CrashLoopBackOff"},
		{"a missing key of its ConfigMap", []corev1.Pod{pod("a", "new", "CreateContainerConfigError", false)}, "pod a: container app: CreateContainerConfigError"},
		{"an init container that cannot pull", []corev1.Pod{pod("a", "new", "ImagePullBackOff", true)}, "pod a: container app: ImagePullBackOff"},
		{"starting", []corev1.Pod{pod("a", "new", "ContainerCreating", false)}, ""},
		{"an old pod crash-looping", []corev1.Pod{pod("a", "old", "CrashLoopBackOff", false)}, ""},
	}
	for _, tt := range tests {
		if got := failingPod(tt.pods, "new"); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestSelectorOfAWorkloadSelectsItsPods(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	argo := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}}}}}
	for _, tt := range []struct {
		obj  runtime.Object
		want string
	}{
		{&appsv1.Deployment{Spec: appsv1.DeploymentSpec{Selector: sel}}, "app=web"},
		{&appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Selector: sel}}, "app=web"},
		{argo, "app=web"},
		{&batchv1.CronJob{}, ""},
		{&appsv1.StatefulSet{}, ""},
	} {
		if got := selectorOf(tt.obj); got != tt.want {
			t.Errorf("selector of %T: %q, want %q", tt.obj, got, tt.want)
		}
	}
}
