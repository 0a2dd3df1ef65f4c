package watcher

import (
	"context"
	"fmt"
	"maps"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
)

// runMark is the mark the touch that rolls a CronJob that runs on change writes, so
// that its Job is started once the touch is admitted, and also after a restart: the
// hash the run is for.
func (j *jobs) runMark(v *view, d confighash.Decision) map[string]any {
	if v.Kind.Kind != confighash.CronJob.Kind || d.Hash == v.Hash || !v.RunOnChange && !j.runOnChange {
		return nil
	}
	return map[string]any{confighash.AnnotationRunDue: d.Hash}
}

// runDue reports whether the mark on a CronJob starts its Job: anyone who may annotate
// it can write one, so it does only where the CronJob runs on change, and for the data
// its template now carries (the hash the watcher's touch wrote; "true" from a release
// that wrote no hash).
func (j *jobs) runDue(cj *batchv1.CronJob, hash string) bool {
	mark := cj.Annotations[confighash.AnnotationRunDue]
	runs := cj.Annotations[confighash.AnnotationRunOnChange] == "true" || j.runOnChange
	return runs && (mark == hash || mark == "true")
}

// startRun starts the Job a CronJob marked AnnotationRunDue is due, as `kubectl
// create job --from=cronjob/...` does, named after its hash so that it is started
// once, then removes the mark.
func (j *jobs) startRun(ctx context.Context, v *view) error {
	cj, err := j.client.BatchV1().CronJobs(v.Namespace).Get(ctx, v.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	hash := cj.Spec.JobTemplate.Spec.Template.Annotations[confighash.AnnotationHash]
	if cj.UID != v.UID || hash == "" || cj.Annotations[confighash.AnnotationRunDue] == "" {
		return nil // changed meanwhile: its own event syncs it
	}
	if !j.runDue(cj, hash) {
		// Not a mark the watcher wrote for this data: removed, and no Job started.
		_, err := j.workloads.patch(ctx, v, annotationPatch(confighash.AnnotationRunDue, nil))
		return err
	}
	annotations := maps.Clone(cj.Spec.JobTemplate.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations["cronjob.kubernetes.io/instantiate"] = "manual"
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: confighash.RunName(cj.Name, hash), Namespace: cj.Namespace,
			Labels: maps.Clone(cj.Spec.JobTemplate.Labels), Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, batchv1.SchemeGroupVersion.WithKind("CronJob"))},
		},
		Spec: *cj.Spec.JobTemplate.Spec.DeepCopy(),
	}
	_, err = j.client.BatchV1().Jobs(cj.Namespace).Create(ctx, job, metav1.CreateOptions{FieldManager: FieldManager})
	started := err == nil
	if err != nil && !apierrors.IsAlreadyExists(err) {
		j.metrics.Touch(TouchError)
		return fmt.Errorf("start Job %s/%s of the CronJob: %w", cj.Namespace, job.Name, err)
	}
	if _, err := j.workloads.patch(ctx, v, annotationPatch(confighash.AnnotationRunDue, nil)); err != nil {
		return err
	}
	if started {
		j.metrics.Touch(TouchStarted)
		j.report.EventOn(v, corev1.EventTypeNormal, "Started", "started Job "+job.Name+" with the new data")
	}
	return nil
}
