package watcher

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/confighash/confighash"
)

// rolloutOf reads the rollout from the workload's status, as kubectl rollout status
// does for the built-in kinds.
func rolloutOf(o runtime.Object) confighash.RolloutStatus {
	switch o := o.(type) {
	case *appsv1.Deployment:
		return deploymentRollout(o)
	case *appsv1.StatefulSet:
		return statefulSetRollout(o)
	case *appsv1.DaemonSet:
		return daemonSetRollout(o)
	case *batchv1.CronJob:
		return confighash.RolledOut // its next Job reads the new data
	case *batchv1.Job:
		return confighash.RolledOut // recreated: its new pods read the new data
	case *unstructured.Unstructured:
		if o.GroupVersionKind() == confighash.Rollout.GroupVersionKind {
			return argoRollout(o)
		}
		return customRollout(o)
	}
	return confighash.RolledOut
}

// finished reports whether the object is a Job that completed or failed.
func finished(o runtime.Object) bool {
	job, ok := o.(*batchv1.Job)
	return ok && slices.ContainsFunc(job.Status.Conditions, func(c batchv1.JobCondition) bool {
		return (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue
	})
}

// selectorOf returns the label selector of the workload's pods, "" for a CronJob, whose
// rollout waits for no pod, or an unreadable one.
func selectorOf(o runtime.Object) string {
	var sel *metav1.LabelSelector
	switch o := o.(type) {
	case *appsv1.Deployment:
		sel = o.Spec.Selector
	case *appsv1.StatefulSet:
		sel = o.Spec.Selector
	case *appsv1.DaemonSet:
		sel = o.Spec.Selector
	case *unstructured.Unstructured:
		raw, ok, _ := unstructured.NestedMap(o.Object, "spec", "selector")
		if !ok {
			return ""
		}
		sel = &metav1.LabelSelector{}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(raw, sel) != nil {
			return ""
		}
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if sel == nil || err != nil || s.Empty() {
		return ""
	}
	return s.String()
}

// cannotStart are the reasons a container waits that mean its pod will not become
// ready by waiting: it crash-loops, its image cannot be pulled, or its configuration
// (a missing key of a ConfigMap or Secret) cannot be met.
var cannotStart = []string{"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
	"CreateContainerConfigError", "CreateContainerError"}

// failingPod returns why one of the pods that run the template of the given hash cannot
// start, "" when none is known to fail.
func failingPod(pods []corev1.Pod, hash string) string {
	for _, p := range pods {
		if p.Annotations[confighash.AnnotationHash] != hash || p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			if w := c.State.Waiting; w != nil && slices.Contains(cannotStart, w.Reason) {
				return fmt.Sprintf("pod %s: container %s: %s", p.Name, c.Name, w.Reason)
			}
		}
	}
	return ""
}

// unhealthyPod returns why one of the pods that run the template of the given hash is
// no longer healthy since a time: a container of it restarted, or it was ready and lost
// its readiness; "" when all are healthy. A pod that started since is still starting.
func unhealthyPod(pods []corev1.Pod, hash string, since time.Time) string {
	for _, p := range pods {
		if p.Annotations[confighash.AnnotationHash] != hash || p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			if t := c.LastTerminationState.Terminated; t != nil && !t.FinishedAt.Time.Before(since) {
				return fmt.Sprintf("pod %s: container %s restarted at %s (exit code %d%s)", p.Name, c.Name,
					t.FinishedAt.UTC().Format(time.RFC3339), t.ExitCode, strings.TrimSuffix(", "+t.Reason, ", "))
			}
		}
		if p.Status.StartTime == nil || !p.Status.StartTime.Time.Before(since) {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue && !c.LastTransitionTime.Time.Before(since) {
				return fmt.Sprintf("pod %s lost its readiness at %s", p.Name, c.LastTransitionTime.UTC().Format(time.RFC3339))
			}
		}
	}
	return ""
}

func replicas(n *int32) int32 {
	if n == nil {
		return 1
	}
	return *n
}

func deploymentRollout(d *appsv1.Deployment) confighash.RolloutStatus {
	if d.Status.ObservedGeneration < d.Generation {
		return confighash.RollingOut
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
			return confighash.RolloutFailed
		}
	}
	want := replicas(d.Spec.Replicas)
	if d.Status.UpdatedReplicas < want || d.Status.Replicas > d.Status.UpdatedReplicas || d.Status.AvailableReplicas < d.Status.UpdatedReplicas {
		return confighash.RollingOut
	}
	return confighash.RolledOut
}

func statefulSetRollout(s *appsv1.StatefulSet) confighash.RolloutStatus {
	if s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		return confighash.RolledOut
	}
	if s.Status.ObservedGeneration < s.Generation {
		return confighash.RollingOut
	}
	want := replicas(s.Spec.Replicas)
	if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		want -= *ru.Partition
	}
	if s.Status.UpdatedReplicas < want || s.Status.ReadyReplicas < replicas(s.Spec.Replicas) {
		return confighash.RollingOut
	}
	return confighash.RolledOut
}

func daemonSetRollout(d *appsv1.DaemonSet) confighash.RolloutStatus {
	if d.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType {
		return confighash.RolledOut
	}
	if d.Status.ObservedGeneration < d.Generation {
		return confighash.RollingOut
	}
	if d.Status.UpdatedNumberScheduled < d.Status.DesiredNumberScheduled || d.Status.NumberAvailable < d.Status.DesiredNumberScheduled {
		return confighash.RollingOut
	}
	return confighash.RolledOut
}

// argoRollout reads an Argo Rollout's phase: Healthy once its controller has seen the
// latest spec, Degraded when it aborted or passed its progress deadline.
func argoRollout(u *unstructured.Unstructured) confighash.RolloutStatus {
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	observed, _, _ := unstructured.NestedString(u.Object, "status", "observedGeneration")
	switch {
	case phase == "Degraded":
		return confighash.RolloutFailed
	case phase == "Healthy" && observed == fmt.Sprint(u.GetGeneration()):
		return confighash.RolledOut
	}
	return confighash.RollingOut
}

// customRollout reads the status of a kind configured by its template path, by the
// conventions most controllers follow (those kstatus reads): its controller has seen
// the latest spec (status.observedGeneration); a Stalled condition, or a Progressing
// one past its deadline, is a failure; a Ready condition says whether it rolled out;
// without one, replica counts as a Deployment's do. With none of these, nothing is
// known to wait for.
func customRollout(u *unstructured.Unstructured) confighash.RolloutStatus {
	status := func(f ...string) (int64, bool) {
		n, ok, _ := unstructured.NestedInt64(u.Object, append([]string{"status"}, f...)...)
		return n, ok
	}
	if observed, ok := status("observedGeneration"); ok && observed < u.GetGeneration() {
		return confighash.RollingOut
	}
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	ready := ""
	for _, c := range conditions {
		m, _ := c.(map[string]any)
		typ, _ := m["type"].(string)
		st, _ := m["status"].(string)
		reason, _ := m["reason"].(string)
		switch {
		case typ == "Stalled" && st == "True", typ == "Progressing" && st == "False" && reason == "ProgressDeadlineExceeded":
			return confighash.RolloutFailed
		case typ == "Ready":
			ready = st
		}
	}
	if ready != "" {
		if ready == "True" {
			return confighash.RolledOut
		}
		return confighash.RollingOut
	}
	want, ok, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
	if !ok {
		return confighash.RolledOut
	}
	total, _ := status("replicas")
	for _, f := range []string{"updatedReplicas", "availableReplicas", "readyReplicas"} {
		if n, ok := status(f); ok && (n < want || total > n) {
			return confighash.RollingOut
		}
	}
	return confighash.RolledOut
}
