package watcher

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/alert"
)

// Alerter hears of the workloads the watcher rolled, healed, or failed to heal. It
// must not block.
type Alerter interface {
	Notify(alert.Event)
}

// reporter tells what the watcher did where the team that owns a workload looks: an
// Event on the object, which is also a line of the watcher's log (at info, warn for a
// warning); the workload's status (confighash.AnnotationStatus), which anyone who may
// read the workload reads; and an alert. Every capability reports through it.
type reporter struct {
	events    record.EventRecorder
	log       zerolog.Logger
	alerts    Alerter // nil: no one
	workloads *workloads
	// said is what was told of each subject: its news, unsaid and forget are the
	// reporter's.
	*said
}

func newReporter(events record.EventRecorder, alerts Alerter, workloads *workloads, log zerolog.Logger) *reporter {
	return &reporter{events: events, log: log, alerts: alerts, workloads: workloads, said: newSaid()}
}

// Event sends the Event and logs it.
func (r *reporter) Event(on runtime.Object, eventType, reason, message string) {
	r.events.Event(on, eventType, reason, message)
	e := r.log.Info()
	if eventType == corev1.EventTypeWarning {
		e = r.log.Warn()
	}
	if ref, ok := on.(*corev1.ObjectReference); ok {
		e = e.Str("kind", ref.Kind).Str("namespace", ref.Namespace).Str("name", ref.Name)
	}
	e.Str("reason", reason).Msg(message)
}

// EventOn sends the Event on the workload, and logs it.
func (r *reporter) EventOn(v *view, eventType, reason, message string) {
	r.Event(objectRef(v), eventType, reason, message)
}

func (r *reporter) Eventf(on runtime.Object, eventType, reason, format string, args ...any) {
	r.Event(on, eventType, reason, fmt.Sprintf(format, args...))
}

// status writes the status on the workload unless it already tells the same. The
// write is admitted as any: only a gated workload, or one the webhook leaves as it
// is, may be told it is held, or the admission would roll it.
func (r *reporter) status(ctx context.Context, v *view, s confighash.Status) error {
	if said, err := confighash.ParseStatus(v.Said); err == nil && said.Same(s) {
		return nil
	}
	s.At = time.Now()
	_, err := r.workloads.patch(ctx, v, annotationPatch(confighash.AnnotationStatus, s.Text()))
	return err
}

// unsay removes a status that no longer holds from a workload that carries its
// decision: a hold that ended without a rollout, a bound it is no longer over, a bake
// that ended.
func (r *reporter) unsay(ctx context.Context, v *view) error {
	s, err := confighash.ParseStatus(v.Said)
	if err != nil || s.Act != confighash.ActHeld && s.Act != confighash.ActNotHashed && (s.Act != confighash.ActBaking || time.Now().Before(s.Until)) {
		return nil
	}
	_, err = r.workloads.patch(ctx, v, annotationPatch(confighash.AnnotationStatus, nil))
	return err
}

// alert tells the Alerter, if any, what happened to the workload and which source
// changes caused it.
func (r *reporter) alert(what alert.What, v *view, trig []confighash.Trigger, reason string) {
	if r.alerts == nil {
		return
	}
	sources := make([]alert.Object, len(trig))
	for i, t := range trig {
		sources[i] = alert.Object{Kind: string(t.Kind), Name: t.Name, ResourceVersion: t.ResourceVersion}
	}
	r.alerts.Notify(alert.Event{What: what, Namespace: v.Namespace, Workload: alert.Object{Kind: v.Kind.Kind, Name: v.Name}, Sources: sources, Reason: reason})
}

// badSetting tells the owner of a Namespace or a source that some of its confighash
// settings are bad and ignored, the rest standing: a Warning Event on that object,
// once for each new set of problems; "" forgets it. Workloads are told through their
// own problems (BadAnnotation).
func (r *reporter) badSetting(ref corev1.ObjectReference, problems string) {
	if problems == "" {
		r.unsaid(ref, "BadSetting")
		return
	}
	if r.news(ref, "BadSetting", problems) {
		r.Event(&ref, corev1.EventTypeWarning, "BadSetting", "ignored, the rest stands: "+problems)
	}
}

// said is what the reporter last told of each subject, by topic, so that each news is
// told once: an object's bad settings, a workload's hold and its warnings, a pod
// group's restarts in place. A subject is a comparable key (workloadKey, podGroup, an
// object reference); what owns it forgets it when it goes (rule 13).
type said struct {
	mu sync.Mutex
	of map[any]map[string]string
	// subjects is the size of of, read without the lock on the path every decision
	// takes.
	subjects atomic.Int64
}

func newSaid() *said { return &said{of: map[any]map[string]string{}} }

// news notes what is told of the subject on the topic, and reports whether it differs
// from what was: an Event is due.
func (s *said) news(subject any, topic, what string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	topics := s.of[subject]
	if topics == nil {
		topics = map[string]string{}
		s.of[subject] = topics
		s.subjects.Store(int64(len(s.of)))
	}
	last, had := topics[topic]
	topics[topic] = what
	return !had || last != what
}

// unsaid forgets what was told of the subject on the topic: its next news is told.
func (s *said) unsaid(subject any, topic string) {
	if s.subjects.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if topics := s.of[subject]; topics != nil {
		delete(topics, topic)
		if len(topics) == 0 {
			delete(s.of, subject)
			s.subjects.Store(int64(len(s.of)))
		}
	}
}

// forget forgets all that was told of the subject, gone.
func (s *said) forget(subject any) {
	if s.subjects.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.of, subject)
	s.subjects.Store(int64(len(s.of)))
}

// namespaceRef names a Namespace for an Event kept in that namespace, where its
// owner, who may not list events across the cluster, reads it.
func namespaceRef(ns string) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "Namespace", APIVersion: "v1", Name: ns, Namespace: ns}
}

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

// withStatus adds the status to the annotations to write with a touch: one write, one
// admission.
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
	if end := now.Add(pause); end.Before(s.Until) {
		return end
	}
	return s.Until
}
