package watcher

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
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
