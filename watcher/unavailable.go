package watcher

import (
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
)

// unknownUnavailable is the MaxUnavailable of a workload whose rollout does not say:
// its pods restarted in place go one at a time.
const unknownUnavailable = -1

// maxUnavailableOf is how many of a workload's pods its own rollout takes down at
// once, as its controller resolves it: the most of its pods a restart in place may
// take down together. A maxUnavailable of 0 holds them all; a share that comes to none
// of a few pods, as the default 25% of 3, lets one at a time.
func maxUnavailableOf(o runtime.Object) int {
	switch o := o.(type) {
	case *appsv1.Deployment:
		replicas := int(ptr.Deref(o.Spec.Replicas, 1))
		if o.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
			return replicas
		}
		ru := o.Spec.Strategy.RollingUpdate
		if ru == nil {
			ru = &appsv1.RollingUpdateDeployment{}
		}
		unavailable := scaled(ru.MaxUnavailable, intstr.FromString("25%"), replicas, false)
		switch {
		case unavailable == 0 && scaled(ru.MaxSurge, intstr.FromString("25%"), replicas, true) == 0:
			return 1 // as the Deployment controller has it: both 0 would never progress
		case unavailable == 0 && !zero(ru.MaxUnavailable):
			// A share of a few pods, as the default 25% of 3 (which the API server
			// writes in): no one asked that none be down, and in place cannot surge.
			return 1
		}
		return unavailable
	case *appsv1.StatefulSet:
		if ru := o.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
			return max(1, scaled(ru.MaxUnavailable, intstr.FromInt32(1), int(ptr.Deref(o.Spec.Replicas, 1)), true))
		}
		return 1
	case *appsv1.DaemonSet:
		ru := o.Spec.UpdateStrategy.RollingUpdate
		if ru == nil {
			return 1
		}
		return scaled(ru.MaxUnavailable, intstr.FromInt32(1), int(o.Status.DesiredNumberScheduled), true)
	}
	return unknownUnavailable
}

// zero reports whether a maxUnavailable says none: 0, or 0%.
func zero(v *intstr.IntOrString) bool {
	return v != nil && (v.Type == intstr.Int && v.IntVal == 0 || v.Type == intstr.String && v.StrVal == "0%")
}

// scaled resolves a count or a percentage of total, or its default when unset.
func scaled(v *intstr.IntOrString, def intstr.IntOrString, total int, roundUp bool) int {
	if v == nil {
		v = &def
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, roundUp)
	if err != nil || n < 0 {
		return 1
	}
	return n
}

// replacingPods reports whether the workload's rollout replaces pods of an earlier
// pod template: they get the new data from it, and are not restarted in place too.
// A paused or failed rollout replaces none.
func replacingPods(o runtime.Object) bool {
	switch o := o.(type) {
	case *appsv1.Deployment:
		return !o.Spec.Paused && deploymentRollout(o) != confighash.RolloutFailed &&
			(o.Status.ObservedGeneration < o.Generation || o.Status.Replicas > o.Status.UpdatedReplicas)
	case *appsv1.StatefulSet:
		if o.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
			return false
		}
		want := ptr.Deref(o.Spec.Replicas, 1)
		if ru := o.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
			want -= *ru.Partition
		}
		return o.Status.ObservedGeneration < o.Generation || o.Status.UpdatedReplicas < want
	case *appsv1.DaemonSet:
		return o.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType &&
			(o.Status.ObservedGeneration < o.Generation || o.Status.UpdatedNumberScheduled < o.Status.CurrentNumberScheduled)
	}
	return false
}

// unknownPods is the Pods of a workload whose status does not count the pods of one
// controller, or whose pods a change of its pod template does not replace.
const unknownPods = -1

// podsOf is how many pods the controller of the workload's pod template runs, as its
// status counts them (neither being deleted nor run to their end), once every pod of
// the workload runs that template; unknownPods while some do not, and where a change
// of the template replaces none of them (paused, OnDelete, a partition): no rollout
// would reach the pods its restarts in place do not (catchup.go).
func podsOf(o runtime.Object) int {
	switch o := o.(type) {
	case *appsv1.Deployment:
		if !o.Spec.Paused && o.Status.ObservedGeneration >= o.Generation && o.Status.UpdatedReplicas == o.Status.Replicas {
			return int(o.Status.Replicas)
		}
	case *appsv1.StatefulSet:
		// Its Replicas counts pods being deleted, its UpdatedReplicas not: equal, none is.
		ru := o.Spec.UpdateStrategy.RollingUpdate
		if o.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType && (ru == nil || ptr.Deref(ru.Partition, 0) == 0) &&
			o.Status.ObservedGeneration >= o.Generation && o.Status.UpdatedReplicas == o.Status.Replicas {
			return int(o.Status.UpdatedReplicas)
		}
	case *appsv1.DaemonSet:
		// Counted by node, a pod being deleted included until it is gone (unreached waits).
		if o.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType && o.Status.ObservedGeneration >= o.Generation &&
			o.Status.UpdatedNumberScheduled == o.Status.CurrentNumberScheduled && o.Status.NumberMisscheduled == 0 {
			return int(o.Status.CurrentNumberScheduled)
		}
	}
	return unknownPods
}
