package watcher

import (
	"testing"

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
		u.SetGeneration(4)
		return u
	}
	tests := []struct {
		name string
		obj  runtime.Object
		want rollout
	}{
		{"a Deployment whose controller has not seen the new template", deployment(5, 4, 3, 3, 3), rollingOut},
		{"a Deployment with old replicas left", deployment(5, 5, 3, 4, 3), rollingOut},
		{"a Deployment whose new replicas are not available", deployment(5, 5, 3, 3, 2), rollingOut},
		{"a Deployment all updated and available", deployment(5, 5, 3, 3, 3), rolledOut},
		{"a Deployment past its progress deadline", deployment(5, 5, 1, 4, 3, deadline), rolloutFailed},
		{"a StatefulSet with the OnDelete strategy", onDelete, rolledOut},
		{"a StatefulSet not all ready", &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: &three},
			Status: appsv1.StatefulSetStatus{UpdatedReplicas: 3, ReadyReplicas: 2}}, rollingOut},
		{"a DaemonSet updated and available everywhere", &appsv1.DaemonSet{
			Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, UpdatedNumberScheduled: 2, NumberAvailable: 2}}, rolledOut},
		{"a DaemonSet with a node still to update", &appsv1.DaemonSet{
			Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, UpdatedNumberScheduled: 1, NumberAvailable: 2}}, rollingOut},
		{"a CronJob: its next Job reads the new data", &batchv1.CronJob{}, rolledOut},
		{"an Argo Rollout Healthy at its generation", argo("Healthy", "4"), rolledOut},
		{"an Argo Rollout Healthy at an older generation", argo("Healthy", "3"), rollingOut},
		{"an Argo Rollout Degraded", argo("Degraded", "4"), rolloutFailed},
	}
	for _, tt := range tests {
		if got := rolloutOf(tt.obj); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}
