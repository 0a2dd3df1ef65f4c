package watcher

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// TestARestartInPlaceTakesDownNoMoreThanTheRolloutWould: how many pods a workload's
// rollout takes down at once, as its controller resolves it, bounds its restarts in
// place.
func TestARestartInPlaceTakesDownNoMoreThanTheRolloutWould(t *testing.T) {
	deployment := func(replicas int32, unavailable, surge *intstr.IntOrString) *appsv1.Deployment {
		d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas)}}
		d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxUnavailable: unavailable, MaxSurge: surge}
		return d
	}
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	n := func(i int32) *intstr.IntOrString { v := intstr.FromInt32(i); return &v }
	for _, tt := range []struct {
		name string
		obj  runtime.Object
		want int
	}{
		{"a Deployment of 8 by default: 25% rounded down", deployment(8, nil, nil), 2},
		{"a Deployment of 3 by default: 25% is 0, one at a time", deployment(3, nil, nil), 1},
		{"a Deployment of 3 at 25%, as the API server writes the default: one at a time", deployment(3, pct("25%"), pct("25%")), 1},
		{"a Deployment at 0%: none", deployment(3, pct("0%"), nil), 0},
		{"a Deployment that surges only", deployment(4, n(0), n(1)), 0},
		{"a Deployment of neither: 1, as its controller has it", deployment(4, n(0), n(0)), 1},
		{"a Deployment of 10 at 50%", deployment(10, pct("50%"), nil), 5},
		{"a Deployment that recreates", &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3), Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}}}, 3},
		{"a StatefulSet by default", &appsv1.StatefulSet{}, 1},
		{"a StatefulSet of 10 at 25%: rounded up", &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](10), UpdateStrategy: appsv1.StatefulSetUpdateStrategy{RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{MaxUnavailable: pct("25%")}}}}, 3},
		{"a DaemonSet by default", &appsv1.DaemonSet{}, 1},
		{"a DaemonSet that surges", &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: n(0), MaxSurge: n(1)}}}}, 0},
		{"a kind whose rollout says nothing", &appsv1.ReplicaSet{}, unknownUnavailable},
	} {
		if got := maxUnavailableOf(tt.obj); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestARolloutThatReplacesPodsHoldsTheirRestartsInPlace: while a workload's rollout
// replaces pods of an earlier template (a template change in the same write as the
// data), its pods are not restarted in place too; a paused rollout, a failed one, a
// StatefulSet held at its partition or one updated on delete replaces none.
func TestARolloutThatReplacesPodsHoldsTheirRestartsInPlace(t *testing.T) {
	deployment := func(generation, observed int64, replicas, updated int32) *appsv1.Deployment {
		d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas)}}
		d.Generation, d.Status.ObservedGeneration, d.Status.Replicas, d.Status.UpdatedReplicas = generation, observed, replicas+updated, updated
		if updated == replicas {
			d.Status.Replicas = replicas
		}
		return d
	}
	paused := deployment(2, 2, 3, 1)
	paused.Spec.Paused = true
	failed := deployment(2, 2, 3, 1)
	failed.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}
	statefulSet := func(replicas, updated int32, partition *int32) *appsv1.StatefulSet {
		s := &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(replicas)}}
		s.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: partition}
		s.Status.UpdatedReplicas = updated
		return s
	}
	onDelete := statefulSet(3, 0, nil)
	onDelete.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	for _, tt := range []struct {
		name string
		obj  runtime.Object
		want bool
	}{
		{"a Deployment its controller has not seen yet", deployment(2, 1, 3, 3), true},
		{"a Deployment with pods of an earlier ReplicaSet", deployment(2, 2, 3, 1), true},
		{"a Deployment whose pods all run its template", deployment(2, 2, 3, 3), false},
		{"a paused Deployment", paused, false},
		{"a Deployment past its progress deadline", failed, false},
		{"a StatefulSet updating", statefulSet(3, 1, nil), true},
		{"a StatefulSet at its partition", statefulSet(3, 1, ptr.To[int32](2)), false},
		{"a StatefulSet updated on delete", onDelete, false},
		{"a ReplicaSet", &appsv1.ReplicaSet{}, false},
	} {
		if got := replacingPods(tt.obj); got != tt.want {
			t.Errorf("%s: replacing %v, want %v", tt.name, got, tt.want)
		}
	}
}
