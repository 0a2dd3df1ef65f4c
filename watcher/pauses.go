package watcher

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/confighash/confighash"
)

// deploymentPauses keeps a Deployment's pause period Reloader's way
// (--pause-deployments): the touch that rolls it pauses it too (spec.paused, and the
// time in ReloaderPausedAt), so that the rollout waits out the period, and the
// changes made meanwhile are written into its pod template, to roll with it once;
// when the period ends it is resumed. All it knows is on the Deployment, so a new
// leader resumes it on time. A Deployment paused by someone else (no mark) is left
// paused, and one resumed meanwhile is not paused again until the next change.
type deploymentPauses struct {
	on        bool
	workloads *workloads
	report    *reporter
}

var deploymentKind = appsv1.SchemeGroupVersion.WithKind("Deployment")

// maxPausedAtBytes bounds the mark kept of a pause: an RFC 3339 time is 20 bytes in
// UTC, 25 with an offset.
const maxPausedAtBytes = 64

// pausedForPeriod reports whether v is a Deployment paused for a pause period: paused,
// with the mark of when, which says it is to be resumed.
func (v *view) pausedForPeriod() bool {
	return v.Kind.GroupVersionKind == deploymentKind && v.Paused && v.PausedAt != ""
}

// keeps reports whether the watcher pauses v for its pause period, rather than holding
// its changes in the meantime (tracking.pause).
func (p *deploymentPauses) keeps(v *view) bool {
	return p.on && v.Kind.GroupVersionKind == deploymentKind && v.Policy.PausePeriod > 0
}

// pause returns the status of a write that rolls v at now, and what pauses it with the
// same write, its spec and the mark among its annotations: nil when it is paused
// already, by a pause period under way, or by someone else, whose pause is theirs to
// end.
func (p *deploymentPauses) pause(v *view, trig []confighash.Trigger, now time.Time) (s confighash.Status, spec, mark map[string]any) {
	s = rolled(trig, 0)
	switch {
	case v.pausedForPeriod():
		s.Why += "; its rollout waits for the pause period under way (" + confighash.ReloaderPausedAt + ")"
	case v.Paused:
		s.Why += "; the Deployment is paused (spec.paused): it rolls when it is resumed"
	default:
		spec, mark = map[string]any{"paused": true}, map[string]any{confighash.ReloaderPausedAt: now.UTC().Format(time.RFC3339)}
		s.Why += fmt.Sprintf("; the Deployment is paused for its pause period, and rolls at %s with every change made until then", now.Add(v.Policy.PausePeriod).UTC().Format(time.RFC3339))
	}
	return s, spec, mark
}

// resume resumes v once the pause period its mark began has ended, and returns it as
// it is then (nil when deleted); otherwise it says how long until the period ends, 0
// when no pause period pauses it. A pause by Reloader itself is resumed alike, even
// with --pause-deployments off: its mark says it is to end. A mark that cannot be
// read, or a pause period no longer asked for, ends at once.
func (p *deploymentPauses) resume(ctx context.Context, v *view, now time.Time) (*view, time.Duration, error) {
	if !v.pausedForPeriod() {
		return v, 0, nil
	}
	at, err := time.Parse(time.RFC3339, v.PausedAt)
	if left := at.Add(v.Policy.PausePeriod).Sub(now); err == nil && left > 0 {
		return v, left, nil
	}
	admitted, err := p.workloads.patch(ctx, v, map[string]any{
		"spec":     map[string]any{"paused": false},
		"metadata": map[string]any{"annotations": map[string]any{confighash.ReloaderPausedAt: nil}},
	})
	if err != nil || admitted == nil {
		return nil, 0, err
	}
	p.report.Event(objectRef(v), corev1.EventTypeNormal, "Resumed", fmt.Sprintf("its pause period (paused at %s) ended: the Deployment rolls out its pod template", v.PausedAt))
	return admitted, 0, nil
}

// The pacer keeps pause periods Reloader's way through its deploymentPauses; these
// are what the core asks of them.

func (pc *pacer) pausesDeployment(v *view) bool { return pc.pauses.keeps(v) }

func (pc *pacer) pauseDeployment(v *view, trig []confighash.Trigger, now time.Time) (confighash.Status, map[string]any, map[string]any) {
	return pc.pauses.pause(v, trig, now)
}

func (pc *pacer) resumeDeployment(ctx context.Context, v *view, now time.Time) (*view, time.Duration, error) {
	return pc.pauses.resume(ctx, v, now)
}

// paused reports whether o is a Deployment whose spec pauses it.
func paused(o runtime.Object) bool {
	d, ok := o.(*appsv1.Deployment)
	return ok && d.Spec.Paused
}
