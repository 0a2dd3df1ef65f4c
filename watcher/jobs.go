package watcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/alert"
	"github.com/confighash/confighash/bounded"
	"github.com/confighash/confighash/sourcecache"
	"github.com/rs/zerolog"
)

// jobs recreates the Jobs whose used data changed, and starts the Job of a CronJob
// that runs on change. A Job's pod template cannot change, so a due change recreates
// it. The recreation is written down before the Job is deleted, in a sealed Secret
// next to it, and that record is deleted only once the new Job exists: a watcher
// stopped in between, or a failover, finishes it from the record.
type jobs struct {
	client    kubernetes.Interface
	reads     *bounded.Reader
	key       confighash.Key
	sources   *sourcecache.Cache
	workloads *workloads
	queue     workqueue.TypedInterface[workloadKey]
	report    *reporter
	metrics   Recorder
	log       zerolog.Logger
	// recreateFinished recreates a finished Job too; runOnChange starts every
	// CronJob's Job when its data changes.
	recreateFinished, runOnChange bool
	recreations                   *recreations
}

// jobStep is what became of a recreation.
type jobStep int

const (
	jobLeft      jobStep = iota // nothing more to do now
	jobRecreated                // recreated now, for the change
	jobAgain                    // no recreation was under way: the Job is synced as any other
)

// recreatesFinished reports whether the Job is recreated once it has finished too.
func (j *jobs) recreatesFinished(v *view) bool { return v.RecreateFinished || j.recreateFinished }

// pending reports whether the Job's recreation may be under way.
func (j *jobs) pending(key workloadKey) bool { return j.recreations.has(key) }

// givenUp reports whether the recreation of the Job with this UID to the data of hash
// was given up.
func (j *jobs) givenUp(key workloadKey, uid types.UID, hash string) bool {
	return j.recreations.givenUp(key, uid, hash)
}

// recreate writes down the recreation of the Job, then carries it out.
func (j *jobs) recreate(ctx context.Context, key workloadKey, v *view, d confighash.Decision) (jobStep, error) {
	job, err := j.client.BatchV1().Jobs(v.Namespace).Get(ctx, v.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && job.UID != v.UID {
		return jobLeft, nil // deleted meanwhile, or another Job: its own events sync it
	}
	if err != nil {
		return jobLeft, err
	}
	trig := triggers(v, d.Record, j.sources)
	body, err := json.Marshal(remade(job, d, trig))
	if err != nil {
		return jobLeft, err
	}
	recordSeal := confighash.RecreationSeal(j.key, job.Namespace, job.Name, string(job.UID), body)
	annotations := confighash.SealedAt(j.key, recordSeal, time.Now())
	annotations[confighash.AnnotationReplaces] = string(job.UID)
	annotations[confighash.AnnotationSeal] = recordSeal
	rec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: confighash.RecreationName(job.Name), Namespace: job.Namespace,
			Labels:      map[string]string{confighash.LabelRecreationOf: job.Name},
			Annotations: annotations,
		},
		Type:      confighash.RecreationType,
		Immutable: ptr.To(true),
		Data:      map[string][]byte{confighash.RecreationJobKey: body},
	}
	j.recreations.add(key)
	created, err := j.client.CoreV1().Secrets(job.Namespace).Create(ctx, rec, metav1.CreateOptions{FieldManager: FieldManager})
	switch {
	case apierrors.IsAlreadyExists(err):
		return j.resume(ctx, key) // an earlier one, not finished: that one first
	case err != nil:
		j.metrics.Touch(TouchError)
		err = fmt.Errorf("record the recreation of Job %s/%s: %w", job.Namespace, job.Name, err)
		return jobLeft, j.refused(ctx, key, job.UID, d.Hash, nil, err)
	}
	if err := j.carryOut(ctx, key, created); err != nil {
		return jobLeft, err
	}
	j.report.EventOn(v, corev1.EventTypeNormal, "Recreated", "recreated: "+confighash.ChangedData(v.Record, d.Record))
	j.report.alert(alert.Rolled, v, trig, "")
	return jobRecreated, nil
}

// resume finishes the recreation of the Job written down in its record, if there is
// one; jobAgain when there is none.
func (j *jobs) resume(ctx context.Context, key workloadKey) (jobStep, error) {
	rec, job, err := j.readRecord(ctx, key)
	switch {
	case apierrors.IsNotFound(err):
		// None, or no longer: the Job is synced as any other (a record the API server
		// refused is tried again, and its attempts counted).
		j.recreations.done(key)
		return jobAgain, nil
	case errors.Is(err, errBadRecord):
		return jobLeft, nil
	case errors.Is(err, confighash.ErrRecordStale):
		return jobLeft, j.dropStale(ctx, key, rec, err)
	case err != nil:
		return jobLeft, err
	}
	if err := j.replace(ctx, key, rec, job); err != nil {
		return jobLeft, err
	}
	j.report.Event(jobRef(key, ""), corev1.EventTypeNormal, "Recreated", "recreated: finished a recreation that was under way")
	return jobLeft, nil
}

// readRecord reads the record of the Job's recreation, capped, and returns it without
// its data, and the Job it holds. Records are read one at a time: a namespace user may
// make many, of up to the cap each, and the watcher finds them all at its start.
func (j *jobs) readRecord(ctx context.Context, key workloadKey) (*corev1.Secret, *batchv1.Job, error) {
	select {
	case j.recreations.reading <- struct{}{}:
		defer func() { <-j.recreations.reading }()
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	name := confighash.RecreationName(key.Name)
	rec, err := bounded.Get[corev1.Secret](ctx, j.reads, secretsIn(key.Namespace), name, recordBytes)
	switch {
	case errors.Is(err, bounded.ErrExceeded):
		// Larger than any record a watcher writes: a namespace user made it, and it is
		// not read.
		j.recreations.finished(key)
		j.log.Warn().Err(err).Str("record", key.Namespace+"/"+name).Msg("not a record of a recreation; left as it is")
		return nil, nil, errBadRecord
	case err != nil:
		return nil, nil, err
	}
	job, err := j.recordedJob(key, rec)
	rec.Data = nil
	return rec, job, err
}

// errRecordForged is a record the hash key did not seal: the watcher makes no Job
// from it. errBadRecord ends a recreation at such a record. errStillDeleting is an old
// Job that something (a finalizer) keeps after its delete.
var (
	errRecordForged  = errors.New("not sealed with the hash key")
	errBadRecord     = errors.New("not a record of a recreation")
	errStillDeleting = errors.New("the old one is still being deleted")
)

// recordBytes caps the read of a recreation's record: a Secret holds at most 1 MiB of
// data, 1.33 MiB in base64, and a watcher writes little metadata. One larger was made
// or grown by a namespace user, and is not read.
const recordBytes = 3 << 19 // 1.5 MiB

// recreationAttempts is how many times a recreation the API server refuses is tried,
// with the queue's backoff, before it is given up.
const recreationAttempts = 5

// refused counts a failed attempt at the recreation of the Job with UID replaces, to
// the data of hash, and returns err, to be retried with backoff. An error the API
// server answered with a refusal (the request invalid, forbidden, in conflict, or the
// old Job kept by a finalizer: a foreign finalizer, a manual selector, a quota) is
// retried recreationAttempts times; then the recreation is given up, with a Warning
// Event on the Job, its record rec (if any) is deleted, and this Job is not recreated
// again for the same data. An error of the connection or of an API server that did
// not answer is retried as long as it lasts.
func (j *jobs) refused(ctx context.Context, key workloadKey, replaces types.UID, hash string, rec *corev1.Secret, err error) error {
	if !refusal(err) || j.recreations.failed(key) < recreationAttempts {
		return err
	}
	if rec != nil {
		if del := j.deleteRecord(ctx, rec); del != nil && !apierrors.IsNotFound(del) && !apierrors.IsConflict(del) {
			return fmt.Errorf("delete the record of Job %s/%s's recreation, given up: %w", key.Namespace, key.Name, del)
		}
	}
	j.recreations.giveUp(key, replaces, hash)
	j.metrics.Touch(TouchGivenUp)
	j.log.Warn().Err(err).Str("workload", key.String()).Int("attempts", recreationAttempts).Msg("recreation of a Job given up")
	j.report.Event(jobRef(key, replaces), corev1.EventTypeWarning, "RecreationFailed", fmt.Sprintf("the recreation was refused %d times and is given up: %v", recreationAttempts, err))
	return nil
}

// refusal reports whether the API server answered the request and refused it.
func refusal(err error) bool {
	return errors.Is(err, errStillDeleting) || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsMethodNotSupported(err) ||
		apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsUnauthorized(err)
}

// carryOut carries out the recreation the record holds.
func (j *jobs) carryOut(ctx context.Context, key workloadKey, rec *corev1.Secret) error {
	job, err := j.recordedJob(key, rec)
	if err != nil {
		return err
	}
	return j.replace(ctx, key, rec, job)
}

// dropStale deletes a record sealed too long ago to be of a recreation under way: a
// copy of one, made again; no Job is made from it.
func (j *jobs) dropStale(ctx context.Context, key workloadKey, rec *corev1.Secret, stale error) error {
	if err := j.deleteRecord(ctx, rec); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete the stale record of Job %s/%s's recreation: %w", key.Namespace, key.Name, err)
	}
	j.recreations.finished(key)
	j.report.Event(jobRef(key, ""), corev1.EventTypeWarning, "StaleRecord",
		fmt.Sprintf("a record of a recreation of this Job was %v; no Job was made from it, and it was deleted", stale))
	return nil
}

// deleteRecord deletes the record of a recreation, that one and no other of its name.
func (j *jobs) deleteRecord(ctx context.Context, rec *corev1.Secret) error {
	return j.client.CoreV1().Secrets(rec.Namespace).Delete(ctx, rec.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &rec.UID}})
}

// jobRef is the reference to the Job of key for its Events, with its UID if known.
func jobRef(key workloadKey, uid types.UID) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: key.Kind, APIVersion: confighash.Job.GroupVersion().String(), Namespace: key.Namespace, Name: key.Name, UID: uid}
}

// recordedJob returns the Job the record holds; errBadRecord for one that is not a
// record of a recreation, or an error that is ErrRecordStale for one sealed too long
// ago (dropStale).
func (j *jobs) recordedJob(key workloadKey, rec *corev1.Secret) (*batchv1.Job, error) {
	replaces := rec.Annotations[confighash.AnnotationReplaces]
	body := rec.Data[confighash.RecreationJobKey]
	job := &batchv1.Job{}
	fresh := confighash.RecordFresh(j.key, rec.Annotations, time.Now())
	var bad error
	switch {
	case rec.Type != confighash.RecreationType || rec.Labels[confighash.LabelRecreationOf] != key.Name ||
		!confighash.RecreationSealed(j.key, rec.Namespace, key.Name, replaces, body, rec.Annotations):
		bad = errRecordForged
	case fresh != nil && !errors.Is(fresh, confighash.ErrRecordStale):
		bad = fmt.Errorf("%w: %w", errRecordForged, fresh)
	case json.Unmarshal(body, job) != nil || job.Name != key.Name || job.Namespace != key.Namespace:
		bad = fmt.Errorf("the Job in it is not Job %s/%s", key.Namespace, key.Name)
	}
	if bad != nil {
		// No retry makes it good: it is left as it is, and no Job is made from it.
		j.recreations.finished(key)
		j.log.Warn().Err(bad).Str("record", rec.Namespace+"/"+rec.Name).Msg("not a record of a recreation; left as it is")
		return nil, errBadRecord
	}
	if fresh != nil {
		return nil, fresh
	}
	return job, nil
}

// replace deletes the Job the record replaces, if it still exists, makes the new one,
// job, unless it exists already, then deletes the record. Each step may have been done
// before, by this watcher or one stopped in the middle.
func (j *jobs) replace(ctx context.Context, key workloadKey, rec *corev1.Secret, job *batchv1.Job) error {
	replaces := types.UID(rec.Annotations[confighash.AnnotationReplaces])
	jobs := j.client.BatchV1().Jobs(key.Namespace)
	err := jobs.Delete(ctx, key.Name, metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &replaces},
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground), // its pods go with it
	})
	// Not found, or a conflict (another UID holds the name): it is gone already.
	hash := job.Spec.Template.Annotations[confighash.AnnotationHash]
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		j.metrics.Touch(TouchError)
		return j.refused(ctx, key, replaces, hash, rec, fmt.Errorf("delete Job %s/%s to recreate it: %w", key.Namespace, key.Name, err))
	}
	_, err = jobs.Create(ctx, job, metav1.CreateOptions{FieldManager: FieldManager})
	if apierrors.IsAlreadyExists(err) {
		now, getErr := jobs.Get(ctx, key.Name, metav1.GetOptions{})
		switch {
		case getErr != nil:
			return getErr
		case now.UID == replaces:
			j.metrics.Touch(TouchError)
			return j.refused(ctx, key, replaces, hash, rec, fmt.Errorf("recreate Job %s/%s: %w", key.Namespace, key.Name, errStillDeleting))
		case now.Annotations[confighash.AnnotationRecreatedFrom] != string(replaces):
			// Someone else made a Job of that name: it is theirs.
			j.log.Warn().Str("workload", key.String()).Msg("a Job of the same name was made by another while it was being recreated; the recreation ends there")
		}
		err = nil
	}
	if err != nil {
		j.metrics.Touch(TouchError)
		return j.refused(ctx, key, replaces, hash, rec, fmt.Errorf("recreate Job %s/%s: %w", key.Namespace, key.Name, err))
	}
	if err := j.deleteRecord(ctx, rec); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the record of Job %s/%s's recreation: %w", key.Namespace, key.Name, err)
	}
	j.recreations.finished(key)
	j.metrics.Touch(TouchRecreated)
	return nil
}

// jobLabels are those the API server sets on a Job and its pod template from the
// Job's UID and name: the new Job gets its own.
var jobLabels = []string{"controller-uid", batchv1.ControllerUidLabel, "job-name", batchv1.JobNameLabel}

// remade returns the Job to make in place of job: its metadata and spec, without what
// the API server set from its identity, with the hash and record decided, so that it
// carries them even if the webhook fails open.
func remade(job *batchv1.Job, d confighash.Decision, trig []confighash.Trigger) *batchv1.Job {
	n := &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name: job.Name, Namespace: job.Namespace,
			Labels: maps.Clone(job.Labels), Annotations: maps.Clone(job.Annotations),
			OwnerReferences: job.OwnerReferences, Finalizers: job.Finalizers,
		},
		Spec: *job.Spec.DeepCopy(),
	}
	tmpl := &n.Spec.Template
	for _, l := range jobLabels {
		delete(n.Labels, l)
		delete(tmpl.Labels, l)
	}
	if !ptr.Deref(n.Spec.ManualSelector, false) {
		n.Spec.Selector = nil // generated again, from the new UID
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	for _, a := range []string{confighash.AnnotationRelease, confighash.AnnotationHeld, confighash.AnnotationFailed, confighash.AnnotationAdopted} {
		delete(n.Annotations, a)
	}
	n.Annotations[confighash.AnnotationRecreatedFrom] = string(job.UID)
	n.Annotations[confighash.AnnotationSources] = d.Record.Text(d.Form)
	n.Annotations[confighash.AnnotationTrigger] = confighash.FormatTriggers(trig)
	if tmpl.Annotations == nil {
		tmpl.Annotations = map[string]string{}
	}
	tmpl.Annotations[confighash.AnnotationHash] = d.Hash
	return n
}
