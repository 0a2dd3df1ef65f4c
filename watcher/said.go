package watcher

import (
	"context"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"github.com/confighash/confighash"
)

// The watcher tells what it decides where the team that owns a workload looks: on the
// workload itself (confighash.AnnotationStatus), which anyone who may read it can
// read, and in its log, where each Event it sends is a line.

// rolled is the status of a workload touched for a due change: the triggers, and when
// its pause period ends, if it has one.
func rolled(trig []confighash.Trigger, pause time.Duration) confighash.Status {
	now := time.Now()
	s := confighash.Status{Act: confighash.ActRolled, At: now, Why: confighash.FormatTriggers(trig) + " changed"}
	if pause > 0 {
		s.Until = now.Add(pause)
		s.Why += "; further changes wait for its pause period"
	}
	return s
}

// tell writes the status on the workload unless it already tells the same. The write
// is admitted as any: only a gated workload, or one the webhook leaves as it is, may
// be told it is held, or the admission would roll it.
func (w *Watcher) tell(ctx context.Context, v *view, s confighash.Status) error {
	if said, err := confighash.ParseStatus(v.Said); err == nil && said.Same(s) {
		return nil
	}
	s.At = time.Now()
	_, err := w.workloads.patch(ctx, v, annotationPatch(confighash.AnnotationStatus, s.Text()))
	return err
}

// loggedEvents logs each Event the watcher sends, at info, or warn for a warning:
// every act on a workload (rolled, adopted, held, healed, recreated) is one.
type loggedEvents struct {
	record.EventRecorder
	log zerolog.Logger
}

func (l loggedEvents) Event(obj runtime.Object, eventType, reason, message string) {
	l.EventRecorder.Event(obj, eventType, reason, message)
	e := l.log.Info()
	if eventType == corev1.EventTypeWarning {
		e = l.log.Warn()
	}
	if ref, ok := obj.(*corev1.ObjectReference); ok {
		e = e.Str("kind", ref.Kind).Str("namespace", ref.Namespace).Str("name", ref.Name)
	}
	e.Str("reason", reason).Msg(message)
}

// withStatus adds the status to the annotations to write with a touch.
func withStatus(others map[string]any, s confighash.Status) map[string]any {
	if others == nil {
		others = map[string]any{}
	}
	others[confighash.AnnotationStatus] = s.Text()
	return others
}

// saidPauseEnd is when the pause period its status tells ends, zero when none is
// under way: what a watcher that did not make the rollout knows of its pause. It ends
// no later than a pause period from now, whoever wrote the status.
func saidPauseEnd(v *view, now time.Time) time.Time {
	pause := v.Policy.PausePeriod
	if pause <= 0 || v.Said == "" {
		return time.Time{}
	}
	s, err := confighash.ParseStatus(v.Said)
	if err != nil || s.Act != confighash.ActRolled || !s.Until.After(now) {
		return time.Time{}
	}
	return minTime(s.Until, now.Add(pause))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// unsay removes a status that no longer holds from a workload that carries its
// decision: a hold that ended without a rollout, a bound it is no longer over.
func (w *Watcher) unsay(ctx context.Context, v *view) error {
	if s, err := confighash.ParseStatus(v.Said); err != nil || s.Act != confighash.ActHeld && s.Act != confighash.ActNotHashed {
		return nil
	}
	_, err := w.workloads.patch(ctx, v, annotationPatch(confighash.AnnotationStatus, nil))
	return err
}
