package watcher

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/alert"
)

// The worker loop and the sync: a workload taken from the queue is decided as the
// webhook decides it, from the cache, and converged.

func (w *Watcher) processNext(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	w.cfg.Metrics.QueueDepth(w.queue.Len())
	if wait := w.tracking.untilQuiet(key, time.Now()); wait > 0 {
		w.queue.AddAfter(key, wait) // changed again since it was queued
		return true
	}
	if err := w.sync(ctx, key); err != nil {
		if ctx.Err() != nil {
			return true
		}
		w.cfg.Log.Warn().Err(err).Str("workload", key.String()).Int("attempt", w.queue.NumRequeues(key)+1).Msg("workload not converged; retrying")
		w.queue.AddRateLimited(key)
		return true
	}
	w.queue.Forget(key)
	return true
}

// errNotConverged means the touch was admitted without the webhook's hash: the
// webhook failed open.
var errNotConverged = errors.New("the webhook did not write the hash")

// sync converges one workload: nothing when it already is; when sources started to
// count, a record of them from what its running pods hold; otherwise a touch, and
// past HealAfter failed touches, the watcher's own write.
func (w *Watcher) sync(ctx context.Context, key workloadKey) error {
	if w.jobs.pending(key) {
		if step, err := w.jobs.resume(ctx, key); step != jobAgain {
			return err
		}
	}
	v := w.workloads.lookup(key)
	// A namespace whose sources cannot be listed is left alone: the record computed
	// from a cache without them would be wrong, and healing would write it.
	if v == nil {
		w.forget(key)
		return nil
	}
	if !w.sources.Covers(key.Namespace) || !w.workloads.acts(v) {
		w.leave(key)
		if !v.Deleting && w.workloads.mode(v.Namespace) != confighash.ModeOff {
			// A typo may be what keeps it from opting in: told once per version, all
			// that is kept of it.
			w.warnAboutAnnotations(key, v, nil, "")
		}
		return nil
	}
	v, wait, err := w.pacer.resumeDeployment(ctx, v, time.Now())
	switch {
	case err != nil || v == nil:
		return err
	case wait > 0:
		w.queue.AddAfter(key, wait) // to resume it
	}
	d, err := w.decider.decide(v, confighash.Pods{})
	rollsInstead := d.RollsInstead
	if d.Pacing.Pinned() {
		rollsInstead = "" // its own pinning says why: explain reads its Event as the install's
	}
	w.warnAboutAnnotations(key, v, err, rollsInstead)
	w.decider.tellSources(v.Namespace, d.Observations)
	switch {
	case overBound(err):
		w.tracking.unreached(key) // the warning stays sent for this version
		// Not retried: annotations too large for the API server may refuse it too.
		if err := w.report.status(ctx, v, confighash.Status{Act: confighash.ActNotHashed, Why: "its hash is left as it is: " + err.Error()}); err != nil {
			w.cfg.Log.Warn().Err(err).Str("workload", key.String()).Msg("could not write the workload's status")
		}
		return nil
	case err != nil:
		return err
	}
	w.cfg.Log.Debug().Str("workload", key.String()).Bool("converged", d.Converged).Str("record", v.Record.Text(v.Form)).Str("want", d.Record.Text(d.Form)).
		Str("hash", v.Hash).Str("want_hash", d.Hash).Stringer("pins", v.Pins).Stringer("want_pins", d.Pins).Msg("checked")
	if d.InPlace {
		w.leave(key) // its pods are restarted in place (restarts)
		return nil
	}
	if v.Kind.Recreated() {
		return w.syncJob(ctx, key, v, d)
	}
	switch {
	case len(d.Held) > 0 && len(d.Unproven) == 0:
		return w.paced(ctx, key, v, d)
	case d.Converged:
		return w.converged(ctx, key, v)
	case len(d.Unproven) > 0:
		return w.record(ctx, key, v, d)
	}
	if held, err := w.pacer.heldByFlapping(ctx, key, v, triggers(v, d.Record, w.sources)); held || err != nil {
		return err
	}
	if w.queue.NumRequeues(key) >= w.cfg.HealAfter && len(d.Pins) == 0 && len(v.Pins) == 0 {
		// A pinned workload is left to the webhook, which makes its snapshots.
		return w.heal(ctx, key, v, d)
	}
	return w.converge(ctx, key, v, d)
}

// converged follows a workload that carries its decision: the snapshots its revisions
// own, and the rollout a wave let it make.
func (w *Watcher) converged(ctx context.Context, key workloadKey, v *view) error {
	w.pacer.unhold(key)
	w.recordLatency(key)
	if err := w.report.unsay(ctx, v); err != nil {
		return err
	}
	// One no longer pinned lets go of the snapshots it owned.
	if len(v.Pins) > 0 || w.snapshots.known(key) {
		if err := w.snapshots.own(ctx, key, v); err != nil {
			return err
		}
	}
	if v.RunDue {
		if err := w.jobs.startRun(ctx, v); err != nil {
			return err
		}
	}
	return w.pacer.followRollout(ctx, v)
}

// converge touches the workload, so that the webhook writes its decision.
func (w *Watcher) converge(ctx context.Context, key workloadKey, v *view, d confighash.Decision) error {
	now := time.Now()
	restart, restartMark := rolloutRestart(v, d, now)
	rolls, pausesIt := d.Hash != v.Hash || restart != nil, w.pacer.pausesDeployment(v)
	touchFirst := restart != nil && restartWaits(v, d)
	if touchFirst {
		restart, restartMark = nil, nil
	}
	// Queued before its pause was known: one a new leader learnt from its status.
	if end := w.tracking.pauseEnd(key); rolls && !pausesIt && time.Until(end) > 0 {
		w.queue.AddAfter(key, time.Until(end))
		return nil
	}
	// The pause starts before the touch: the touch's own update event, and changes
	// that follow it at once, must already find the workload held.
	if rolls && !pausesIt {
		w.tracking.pause(key, d.Policy.PausePeriod)
	}
	trig := triggers(v, d.Record, w.sources)
	others := w.jobs.runMark(v, d)
	spec := restart
	switch {
	case rolls && pausesIt:
		said, pausing, mark := w.pacer.pauseDeployment(v, trig, now)
		others, spec = withStatus(others, said), pausing
		maps.Copy(others, mark)
	case rolls:
		others = withStatus(others, rolled(trig, d.Policy.PausePeriod))
		maps.Copy(others, restartMark)
	}
	patch := touchPatch(trig, others)
	if spec != nil {
		patch["spec"] = spec
	}
	admitted, err := w.workloads.patch(ctx, v, patch)
	if touchFirst && err == nil && admitted != nil && !restartWaits(admitted, d) {
		if restart, restartMark = rolloutRestart(admitted, d, now); restart != nil {
			patch = annotationsPatch(restartMark)
			patch["spec"] = restart
			admitted, err = w.workloads.patch(ctx, admitted, patch)
		}
	}
	return w.verify(key, v, d, trig, nil, admitted, err)
}

// verify checks the workload as admitted after the watcher's write: it carries the
// decision, or the webhook failed open and the write is retried. It tells what
// happened: a rollout, the sources that started to count (counted) recorded without
// one, or a record rewritten.
func (w *Watcher) verify(key workloadKey, v *view, d confighash.Decision, trig []confighash.Trigger, counted []confighash.SourceRef, admitted *view, err error) error {
	if err != nil {
		w.tracking.unpause(key)
		w.cfg.Metrics.Touch(TouchError)
		return err
	}
	if admitted == nil {
		w.tracking.deleted(key) // deleted meanwhile
		w.report.unsaid(key, "warning")
		return nil
	}
	if !w.decider.carried(d, admitted) {
		w.tracking.unpause(key)
		w.cfg.Metrics.Touch(TouchNotConverged)
		return errNotConverged
	}
	ref := objectRef(v)
	switch {
	case admitted.Runs() != v.Runs():
		how := "rolling: "
		if admitted.Hash == v.Hash {
			how = "restarting its pods (spec.restartAt): "
		}
		w.cfg.Metrics.Touch(TouchConverged)
		w.report.Event(ref, corev1.EventTypeNormal, "ConfigChanged", how+confighash.ChangedData(v.Record, d.Record)+" (touched for "+confighash.FormatTriggers(trig)+")")
		w.report.alert(alert.Rolled, v, trig, "")
	case v.Record == nil && v.Hash == "" && v.Adopted == "":
		w.cfg.Metrics.Touch(TouchAdopted)
		w.report.Event(ref, corev1.EventTypeNormal, "Adopted",
			fmt.Sprintf("its pods already have the current data of its %d sources: recorded without a rollout", len(d.Record)))
	case len(counted) > 0:
		w.cfg.Metrics.Touch(TouchAdopted)
		w.report.Event(ref, corev1.EventTypeNormal, "Counted",
			fmt.Sprintf("%s started to count, and its pods already have the data: recorded without a rollout", confighash.ListRefs(counted)))
	default:
		w.cfg.Metrics.Touch(TouchConverged)
	}
	w.recordLatency(key)
	if len(admitted.Pins) > 0 {
		// Its new revision owns the snapshots it names, once its controller made it.
		w.queue.AddAfter(key, snapshotOwnerRetry)
	}
	return nil
}

// overBound reports whether the decision leaves the workload as it is for a bound: too
// many sources, or annotations the API server would refuse.
func overBound(err error) bool {
	return errors.Is(err, confighash.ErrTooManySources) || errors.Is(err, confighash.ErrSourceTooLarge) || errors.Is(err, confighash.ErrAnnotationsTooLarge)
}

// notDecided returns the error of a decision, none for a bound the workload is over,
// which no retry changes: that is an Event.
func (w *Watcher) notDecided(key workloadKey, v *view, err error) error {
	if !overBound(err) {
		return err
	}
	w.warnAboutAnnotations(key, v, err, "")
	w.tracking.unreached(key)
	return nil
}

// ReasonRollsInstead is the reason of the Event on a workload that asks to be
// restarted in place and rolls instead, which explain reads.
const ReasonRollsInstead = "RollsInstead"

// warnAboutAnnotations sends, once per version of the workload, an Event for its bad
// annotations and for a bound it is over, one for a pinned workload the webhook
// admitted unpinned (it writes no Event inside admission), and one for a workload
// that asks to be restarted in place and rolls instead.
func (w *Watcher) warnAboutAnnotations(key workloadKey, v *view, err error, rollsInstead string) {
	tooMany := overBound(err)
	if len(v.Problems) == 0 && !tooMany && v.NotPinned == "" && rollsInstead == "" || !w.report.news(key, "warning", v.ResourceVersion) {
		return
	}
	if rollsInstead != "" {
		w.report.EventOn(v, corev1.EventTypeWarning, ReasonRollsInstead, confighash.AnnotationRestart+": "+rollsInstead)
	}
	if v.NotPinned != "" {
		w.report.EventOn(v, corev1.EventTypeWarning, "NotPinned", "admitted unpinned: "+v.NotPinned)
	}
	if len(v.Problems) == 0 && !tooMany {
		return
	}
	msgs := make([]string, len(v.Problems))
	for i, p := range v.Problems {
		msgs[i] = "ignored: " + p.Error()
	}
	if tooMany {
		msgs = append(msgs, "not hashed: "+err.Error())
	}
	w.report.EventOn(v, corev1.EventTypeWarning, "BadAnnotation", strings.Join(msgs, "; "))
}

// recordLatency records the convergence latency of a workload a change reached.
func (w *Watcher) recordLatency(key workloadKey) {
	if d, ok := w.tracking.converged(key); ok {
		w.cfg.Metrics.Converged(d)
	}
}

// heal writes the hash and the record the webhook would have written, and says so.
func (w *Watcher) heal(ctx context.Context, key workloadKey, v *view, d confighash.Decision) error {
	want := d.Record
	healed := confighash.Status{Act: confighash.ActHealed, At: time.Now(), Why: fmt.Sprintf(
		"the webhook did not write the hash after %d touches; the watcher wrote it: %s", w.cfg.HealAfter, confighash.ChangedData(v.Record, want))}
	patch := hashPatch(v.Kind, want.Hash(w.cfg.Key), map[string]any{"annotations": map[string]any{
		confighash.AnnotationSources: want.Text(d.Form), confighash.AnnotationAdopted: nil, confighash.AnnotationStatus: healed.Text(),
	}})
	trig := triggers(v, want, w.sources)
	if _, err := w.workloads.patch(ctx, v, patch); err != nil {
		w.cfg.Metrics.Touch(TouchError)
		w.report.alert(alert.Failed, v, trig, "the webhook did not write the hash, and the watcher could not either: "+err.Error())
		return err
	}
	w.cfg.Metrics.Touch(TouchHealed)
	w.report.EventOn(v, corev1.EventTypeWarning, "Healed", healed.Why)
	w.report.alert(alert.Healed, v, trig, fmt.Sprintf("the webhook did not write the hash after %d touches", w.cfg.HealAfter))
	w.recordLatency(key)
	return nil
}

// record writes the record of a workload whose sources started to count, from what its
// running pods hold: without a rollout where they hold the current data, rolled once
// otherwise; a workload met for the first time is adopted or rolled. The webhook
// writes the hash from the record at the admission of this write.
func (w *Watcher) record(ctx context.Context, key workloadKey, v *view, d confighash.Decision) error {
	proven, err := w.proofs.proven(ctx, v, d.Observations)
	if err != nil {
		return fmt.Errorf("find out what the pods of %s %s/%s hold: %w", v.Kind.Kind, v.Namespace, v.Name, err)
	}
	counted := d.Unproven
	if d, err = w.decider.decide(v, confighash.Pods{Proven: proven}); err != nil {
		return w.notDecided(key, v, err)
	}
	if d.Record == nil {
		return fmt.Errorf("%s %s/%s: sources still unproven: %v", v.Kind.Kind, v.Namespace, v.Name, d.Unproven)
	}
	if d.Hash != v.Hash {
		w.tracking.pause(key, d.Policy.PausePeriod)
		counted = nil
	}
	var adopted any // removed unless adopted
	if d.Adopted != "" {
		adopted = d.Adopted
	}
	trig := triggers(v, d.Record, w.sources)
	said := confighash.Status{Act: confighash.ActAdopted, At: time.Now(),
		Why: fmt.Sprintf("its pods already hold the current data of its %d sources: recorded without a rollout", len(d.Record))}
	switch {
	case len(counted) > 0:
		said.Why = confighash.ListRefs(counted) + " started to count, and its pods already hold the data: recorded without a rollout"
	case d.Hash != v.Hash:
		said = rolled(trig, d.Policy.PausePeriod)
	}
	admitted, err := w.workloads.patch(ctx, v, annotationsPatch(map[string]any{
		confighash.AnnotationSources: d.Record.Text(d.Form), confighash.AnnotationAdopted: adopted,
		confighash.AnnotationTrigger: confighash.FormatTriggers(trig), confighash.AnnotationStatus: said.Text(),
	}))
	return w.verify(key, v, d, trig, counted, admitted, err)
}

// syncJob converges a Job: one hashed at its creation whose used data changed is
// recreated, unless a controller owns it or, by default, it has finished.
func (w *Watcher) syncJob(ctx context.Context, key workloadKey, v *view, d confighash.Decision) error {
	switch {
	case v.Hash == "" || d.Converged || d.Hash == v.Hash:
		// Not hashed at its creation, there is nothing to compare with.
		return w.converged(ctx, key, v)
	case len(d.Unproven) > 0:
		// Its pods read their data at their start: a source that only started to
		// count has nothing to say about them.
		w.leave(key)
		return nil
	case v.Finished && !w.jobs.recreatesFinished(v):
		if w.report.news(key, "warning", v.ResourceVersion) {
			w.report.EventOn(v, corev1.EventTypeNormal, "NotRecreated",
				confighash.ChangedData(v.Record, d.Record)+"; the Job has finished, so it is left as it is (annotate it "+confighash.AnnotationRecreateFinished+`: "true" to recreate it)`)
		}
		w.leave(key)
		return nil
	case len(d.Held) > 0:
		return w.paced(ctx, key, v, d)
	case w.jobs.givenUp(key, v.UID, d.Hash):
		// Tried recreationAttempts times and refused each time, as its Event says:
		// the next change of its data tries again.
		w.leave(key)
		return nil
	}
	return w.recreate(ctx, key, v, d)
}

// recreate recreates the Job; one whose recreation a record found was none is synced
// as any other Job.
func (w *Watcher) recreate(ctx context.Context, key workloadKey, v *view, d confighash.Decision) error {
	step, err := w.jobs.recreate(ctx, key, v, d)
	switch step {
	case jobRecreated:
		w.recordLatency(key)
	case jobAgain:
		return w.sync(ctx, key)
	}
	return err
}

// paced releases the workload's due change when its pacing lets it.
func (w *Watcher) paced(ctx context.Context, key workloadKey, v *view, d confighash.Decision) error {
	if release, err := w.pacer.paced(ctx, key, v, d); !release || err != nil {
		return err
	}
	return w.release(ctx, key, v, d)
}

// release touches the workload with AnnotationRelease set to the hash it is due, so
// the webhook rolls it, and clears the markers of a wave that halted or reverted it and
// of sources that kept changing; a Job it recreates.
func (w *Watcher) release(ctx context.Context, key workloadKey, v *view, d confighash.Decision) error {
	released := *v
	released.Release = d.Release
	due, err := w.decider.decide(&released, confighash.Pods{})
	if err != nil {
		return err
	}
	if v.Kind.Recreated() {
		if err = w.recreate(ctx, key, v, due); err == nil {
			w.pacer.unhold(key)
		}
		return err
	}
	if w.queue.NumRequeues(key) >= w.cfg.HealAfter {
		return w.heal(ctx, key, v, due) // the webhook failed open on every release
	}
	w.tracking.pause(key, due.Policy.PausePeriod)
	trig := triggers(v, due.Record, w.sources)
	others := map[string]any{confighash.AnnotationRelease: d.Release, confighash.AnnotationHeld: nil, confighash.AnnotationFailed: nil, confighash.AnnotationFlapping: nil,
		confighash.AnnotationReverted: nil, confighash.AnnotationBaking: w.pacer.canaryMark(key)}
	maps.Copy(others, w.jobs.runMark(v, due))
	if due.Hash != v.Hash {
		others = withStatus(others, rolled(trig, due.Policy.PausePeriod))
	}
	admitted, err := w.workloads.touch(ctx, v, trig, others)
	if err = w.verify(key, v, due, trig, nil, admitted, err); err == nil {
		w.pacer.unhold(key)
	}
	return err
}

// forget drops all the watcher keeps of a workload that is gone.
func (w *Watcher) forget(key workloadKey) {
	w.tracking.forget(key)
	w.report.forget(key)
	w.letGo(key)
}

// leave drops what the watcher keeps of a workload it leaves as it is, but the
// version it was last warned of, which the reporter keeps: it is warned once per
// version until it goes.
func (w *Watcher) leave(key workloadKey) {
	w.tracking.forget(key)
	w.letGo(key)
}

func (w *Watcher) letGo(key workloadKey) {
	w.decider.forget(key)
	w.snapshots.forget(key)
	w.pacer.forget(key)
}
