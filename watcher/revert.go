package watcher

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/alert"
)

// Reverting a failed change: a workload whose rollout of a change halted its wave is
// rolled back, as kubectl rollout undo does, to the revision it ran before, when it asks
// to (confighash.dev/on-failure: revert) and is pinned. That revision's pod template
// names the snapshots of the data before the change, so its pods run that data again,
// and its admission declines the change (a pinned return, Record.returnedTo): the
// change is not rolled again, and the source's next change rolls as any does.

// reverter rolls back the workloads of a wave that halted on a failure.
type reverter struct {
	workloads *workloads
	revisions *revisionReader
	decider   *decider
	report    *reporter
	metrics   Recorder
}

// reverts reports whether a failed rollout of a change of the source reverts the
// workload, and, when it asks to and cannot, why it halts instead.
func (r *reverter) reverts(v *view, source confighash.SourceRef) (bool, string) {
	p := r.decider.failurePacing(v, source)
	switch {
	case !p.Reverts():
		return false, p.NotReverted()
	case v.Kind.Kind == confighash.StatefulSet.Kind:
		// Its controller waits on the pod that failed, which a rollback does not replace
		// (kubernetes/kubernetes#67250): a person deletes it.
		return false, "a StatefulSet is not reverted: its controller waits for the pod that failed, which a rollback alone does not replace; it halts"
	case v.Kind.Kind != confighash.Deployment.Kind && v.Kind.Kind != confighash.DaemonSet.Kind:
		return false, fmt.Sprintf("a %s is not reverted, only a Deployment or a DaemonSet: it halts", v.Kind.Kind)
	}
	return true, ""
}

// revert rolls the Deployment or DaemonSet back to the revision before the one whose
// rollout of the change failed, its pod template that revision's, in one write that marks it reverted
// from that change (and failed), so that it is done once: a workload already marked is
// not written again. It returns why it halts instead, "" once reverted.
func (r *reverter) revert(ctx context.Context, v *view, change confighash.Trigger, why string) (string, error) {
	failed := confighash.Marker{Change: change, Hash: v.Hash}
	if v.Reverted == failed {
		return "", nil
	}
	revs, err := r.revisions.of(ctx, v)
	if err != nil {
		return "", fmt.Errorf("read the revisions of %s %s/%s: %w", v.Kind.Kind, v.Namespace, v.Name, err)
	}
	var before *corev1.PodTemplateSpec
	var revision int64
	for _, o := range revs.all {
		n, template, ok := revisionTemplate(o)
		if ok && template.Annotations[confighash.AnnotationHash] != v.Hash && (before == nil || n > revision) {
			before, revision = template, n
		}
	}
	switch {
	case before == nil:
		return "it has no revision before the change to go back to", nil
	case before.Annotations[confighash.AnnotationPinned] == "":
		return fmt.Sprintf("its revision %d, before the change, was not pinned: the data it ran is not kept", revision), nil
	}
	template := before.DeepCopy()
	delete(template.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	said := confighash.Status{Act: confighash.ActReverted, At: time.Now(), Why: fmt.Sprintf(
		"the rollout of %s failed (%s): rolled back to revision %d, which runs the data from before it; the change is not rolled again, the next change of %s rolls as usual",
		change, why, revision, change.SourceRef)}
	// The resourceVersion is a precondition: a workload written since it was read is
	// refused (a conflict), and looked at again.
	admitted, err := r.workloads.patch(ctx, v, map[string]any{
		"metadata": map[string]any{"resourceVersion": v.ResourceVersion, "annotations": map[string]string{
			confighash.AnnotationReverted: failed.String(), confighash.AnnotationFailed: failed.String(), confighash.AnnotationStatus: said.Text(),
		}},
		"spec": map[string]any{"template": template},
	})
	switch {
	case err == nil && admitted == nil:
		return "", nil // deleted meanwhile
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
		// The install's policy lets the watcher change a template's data alone: a
		// revision before that differs in more is a person's to go back to.
		return "the API server refused the rollback: " + err.Error(), nil
	case err != nil:
		return "", fmt.Errorf("revert %s %s/%s: %w", v.Kind.Kind, v.Namespace, v.Name, err)
	}
	r.metrics.Reverted()
	r.report.EventOn(v, corev1.EventTypeWarning, "Reverted", said.Why)
	// One alert for the change: its reason says nothing of the workload's own pods or
	// revisions, which the Event on it says.
	r.report.alert(alert.Reverted, v, []confighash.Trigger{change}, fmt.Sprintf(
		"the rollout of %s failed: rolled back to the revision before it, which runs the data from before it; the change is not rolled again", change))
	return "", nil
}
