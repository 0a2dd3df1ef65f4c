// Package webhook is the mutating admission webhook: at every create and update of an
// opted-in workload it writes the keyed hash of the ConfigMaps and Secrets the pod
// template uses, so the workload rolls exactly when that data changes.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kwhmodel "github.com/slok/kubewebhook/v2/pkg/model"
	kwhwebhook "github.com/slok/kubewebhook/v2/pkg/webhook"

	"github.com/confighash/confighash"
)

// SourceReader reads the current state of the named sources of one namespace, as
// digest-only views. A source that does not exist is returned with Present unset.
type SourceReader interface {
	Read(ctx context.Context, namespace string, refs []confighash.SourceRef, triggers []confighash.Trigger) (map[confighash.SourceRef]confighash.Source, error)
	// Names lists the sources of a kind the namespace has now, for name patterns.
	Names(ctx context.Context, namespace string, kind confighash.SourceKind) ([]string, error)
}

// Result is the outcome of one admission, for metrics.
type Result string

// Admission results.
const (
	ResultPatched   Result = "patched"   // the hash or the sources record changed
	ResultUnchanged Result = "unchanged" // opted in, nothing to change
	ResultSkipped   Result = "skipped"   // not opted in, or not a workload
	ResultError     Result = "error"     // a lookup failed: allowed unchanged
	// ResultDeferred: sources that started to count, or a running workload met for
	// the first time, left for the watcher to record without a rollout when the pods
	// hold their data, or to roll once.
	ResultDeferred Result = "deferred"
	// ResultTooLarge: more sources than confighash.MaxSources: allowed unchanged.
	ResultTooLarge Result = "too_large"
)

// Budget is how long an admission may take before it answers "allowed, unchanged"
// with a warning, comfortably before the API server gives up at Timeout; the watcher
// then converges the workload.
const Budget = Timeout - time.Second

// Mutator writes the hash and the sources record into opted-in workloads. It is a
// kubewebhook Webhook that builds its JSON patch from the annotations it sets, rather
// than by serializing and diffing the whole object.
type Mutator struct {
	cfg Config
	// mode is how confighash acts in the namespaces whose requests reach it: the API
	// server sends those that opt every workload in to EveryPath.
	mode confighash.Mode
	// limits bounds the admissions in flight, shared by ForEveryWorkload's copy.
	limits *limiter
}

var _ kwhwebhook.Webhook = (*Mutator)(nil)

// Config configures a Mutator.
type Config struct {
	// Key hashes.
	Key confighash.Key
	// Vocabulary is which annotations workloads are read in.
	Vocabulary confighash.Vocabulary
	// Kinds are the workload kinds handled; empty: the built-in kinds.
	Kinds confighash.Kinds
	// Reader reads the sources.
	Reader SourceReader
	// Gate, when set, tells how confighash acts in each namespace: a review for a
	// namespace it does not act in, posted by anyone but the API server, reads
	// nothing.
	Gate Gate
	// Writes, when set, returns the newest form a record may be written in now
	// (WatcherLease.Writes); unset: FormNamespaced.
	Writes func() confighash.Form
	// Pacing is how changes roll where neither the workload nor its namespace says:
	// the same flags as the watcher's, so that both hold the same workloads.
	Pacing confighash.Pacing
	// Lifecycle is what a source's creation and deletion roll: the watcher's too.
	Lifecycle confighash.Lifecycle
	// Snapshots makes the snapshots of pinned workloads; nil: an admission that needs
	// one is let through unchanged, with a warning.
	Snapshots *Snapshots
	// Callers, when set, are the addresses whose reviews are read; another caller is
	// refused before its body is read.
	Callers *Callers
	Metrics Recorder
	// Log tells each admission let through unchanged for an error (failed open).
	Log zerolog.Logger
	// RestarterImage is the image of the restarter a pod restarted in place runs:
	// confighash's own. Empty: pods are not made restartable in place, and the
	// workloads that ask for it roll.
	RestarterImage string
	// MaxInFlight bounds the admissions handled at once, and MaxInFlightBytes the bytes
	// of their bodies; beyond either, an admission is answered at once, allowed
	// unchanged, before its body is read. Zero: DefaultMaxInFlight,
	// DefaultMaxInFlightBytes.
	MaxInFlight      int
	MaxInFlightBytes int64
}

func (c *Config) defaults() error {
	if c.Reader == nil {
		return errors.New("a source reader is required")
	}
	if c.Metrics == nil {
		c.Metrics = NoopRecorder{}
	}
	if len(c.Kinds) == 0 {
		c.Kinds = confighash.Builtin
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxInFlightBytes == 0 {
		c.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if c.MaxInFlight < 0 || c.MaxInFlightBytes < MaxBodyBytes {
		return fmt.Errorf("the bounds on admissions in flight must be positive, and at least %d bytes, the largest review; got %d and %d bytes", MaxBodyBytes, c.MaxInFlight, c.MaxInFlightBytes)
	}
	return nil
}

// Gate tells how confighash acts in a namespace (namespaces.Gate).
type Gate interface {
	Mode(namespace string) confighash.Mode
	Pacing(namespace string) (confighash.Pacing, error)
}

// New returns a mutator for namespaces that opt workloads in.
func New(cfg Config) (*Mutator, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Mutator{cfg: cfg, mode: confighash.ModeOptedIn, limits: newLimiter(cfg.MaxInFlight, cfg.MaxInFlightBytes)}, nil
}

// ForEveryWorkload returns the mutator for namespaces that opt every workload in.
func (m *Mutator) ForEveryWorkload() *Mutator {
	every := *m
	every.mode = confighash.ModeEvery
	return &every
}

// ID implements kwhwebhook.Webhook.
func (m *Mutator) ID() string { return "confighash" }

// Kind implements kwhwebhook.Webhook.
func (m *Mutator) Kind() kwhmodel.WebhookKind { return kwhmodel.WebhookKindMutating }

// Review implements kwhwebhook.Webhook. It always allows: a workload it cannot handle
// goes through unchanged, with a warning, so a write is never denied.
func (m *Mutator) Review(ctx context.Context, ar kwhmodel.AdmissionReview) (kwhmodel.AdmissionResponse, error) {
	ops, warnings := m.admit(ctx, &ar)
	patch := []byte("[]") // what the API server expects for no change; nil would encode as null
	if len(ops) > 0 {
		var err error
		if patch, err = json.Marshal(ops); err != nil {
			return nil, err // strings and maps of strings only: cannot happen
		}
	}
	return &kwhmodel.MutatingAdmissionResponse{ID: ar.ID, JSONPatchPatch: patch, Warnings: warnings}, nil
}

// warningPrefix marks our admission warnings among others in kubectl's output.
const warningPrefix = "confighash: "

// admit returns the patch that writes what confighash decides for the workload, and
// the warnings for the user.
func (m *Mutator) admit(ctx context.Context, ar *kwhmodel.AdmissionReview) (ops []patchOp, warnings []string) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, Budget)
	defer cancel()
	kind, result := "unknown", ResultSkipped
	defer func() {
		if p := recover(); p != nil {
			m.cfg.Metrics.Panic()
			ops, result = nil, ResultError
			warnings = append(warnings, warningPrefix+fmt.Sprintf("internal error, allowed unchanged: %v", p))
			m.cfg.Log.Error().Str("kind", kind).Str("namespace", ar.Namespace).Str("name", ar.Name).Str("operation", string(ar.Operation)).
				Msg(fmt.Sprintf("allowed unchanged (failed open): internal error: %v", p))
		}
		// kubewebhook spells operations in lower case; the API server and its metrics, in upper.
		m.cfg.Metrics.ObserveAdmission(kind, strings.ToUpper(string(ar.Operation)), result, time.Since(start))
	}()
	fail := func(msg string) ([]patchOp, []string) {
		result = ResultError
		m.cfg.Log.Warn().Str("kind", kind).Str("namespace", ar.Namespace).Str("name", ar.Name).Str("operation", string(ar.Operation)).
			Msg("allowed unchanged (failed open): " + msg)
		return nil, append(warnings, warningPrefix+msg)
	}

	if gvk := ar.RequestGVK; gvk != nil && isPod(gvk.Group, gvk.Version, gvk.Kind) {
		kind = confighash.PodKind.Kind
		ops, warnings, err := m.admitPod(ctx, ar.Namespace, ar.NewObjectRaw)
		switch {
		case err != nil:
			return fail(err.Error())
		case len(ops) > 0:
			result = ResultPatched
		}
		return ops, warnings
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(ar.NewObjectRaw); err != nil {
		return fail("the object could not be read: " + err.Error())
	}
	w, err := m.cfg.Kinds.WorkloadOf(u)
	switch {
	case errors.Is(err, confighash.ErrUnsupportedKind):
		return nil, nil // a kind this install does not handle
	case errors.Is(err, confighash.ErrNoPodTemplate):
		// Nothing to hash: writing into its template would break, e.g., a Rollout
		// with a workloadRef, whose template must stay empty.
		return nil, []string{warningPrefix + "not hashed: " + err.Error()}
	case err != nil:
		return fail(err.Error())
	}
	kind = w.Kind.Kind
	if w.Kind.Recreated() && ar.Operation != kwhmodel.OperationCreate {
		return nil, nil // its template cannot change: any write to it would be refused
	}
	if w.Namespace != ar.Namespace {
		// The guard checked the request's namespace; a forged review may name another in
		// its object. The API server never does: read nothing for others.
		return nil, nil
	}

	state := m.cfg.Vocabulary.Read(w)
	for _, p := range state.Problems {
		warnings = append(warnings, warningPrefix+p.Error())
	}
	prev := previousOf(ar.OldObjectRaw, w.Kind)
	sources := &admissionSources{ctx: ctx, reader: m.cfg.Reader, namespace: w.Namespace, triggers: touchTriggers(w.Annotations, prev)}
	in := confighash.Input{Key: m.cfg.Key, Namespace: w.Namespace, State: state, Mode: m.mode, Pods: confighash.Pods{Fresh: prev == nil}, Pacing: m.cfg.Pacing,
		RemakeSnapshots: w.Annotations[confighash.AnnotationRemakeSnapshots] != "", Previous: prev, Template: w.Template, InPlace: m.cfg.RestarterImage != "", Lifecycle: m.cfg.Lifecycle}
	if m.cfg.Writes != nil {
		in.Writes = m.cfg.Writes()
	}
	for _, t := range sources.triggers {
		in.Touched = append(in.Touched, t.SourceRef)
	}
	if m.cfg.Gate != nil {
		ns, err := m.cfg.Gate.Pacing(w.Namespace)
		if err != nil {
			warnings = append(warnings, warningPrefix+fmt.Sprintf("namespace %s: ignored, the rest stands: %v", w.Namespace, err))
		}
		in.Pacing = ns.Over(m.cfg.Pacing)
	}
	d, err := confighash.Decide(in, sources)
	if d.RollsInstead != "" {
		warnings = append(warnings, warningPrefix+confighash.AnnotationRestart+": "+d.RollsInstead)
	}
	if why := d.Pacing.NotReverted(); why != "" && d.Acts {
		warnings = append(warnings, warningPrefix+confighash.AnnotationOnFailure+": "+why)
	}
	if d.RecordErr != nil && d.Record != nil {
		warnings = append(warnings, warningPrefix+fmt.Sprintf("%s is not a sources record and was rewritten: %v", confighash.AnnotationSources, d.RecordErr))
	}
	switch {
	case errors.Is(err, confighash.ErrTooManySources), errors.Is(err, confighash.ErrSourceTooLarge), errors.Is(err, confighash.ErrAnnotationsTooLarge):
		result = overBound(err)
		return nil, append(warnings, warningPrefix+"not hashed: "+err.Error())
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fail(fmt.Sprintf("the sources could not be read within %v, the hash was not updated; the watcher will update it", Budget))
	case err != nil:
		return fail(fmt.Sprintf("could not %v; the hash was not updated", err))
	case !d.Acts:
		return nil, warnings
	}
	var notPinned string
	if d, notPinned, err = m.snapshots(ctx, ar, u, w, in, sources, d); err != nil {
		return fail(fmt.Sprintf("could not %v; the hash was not updated", err))
	}
	if notPinned != "" {
		warnings = append(warnings, warningPrefix+"not pinned this time: "+notPinned)
	}
	if d.Record != nil {
		out := written{record: d.Record.Text(d.Form), hash: d.Hash, adopted: d.Adopted, notPinned: notPinned, renames: confighash.Repin(w.Template, d.Pins)}
		if len(d.Pins) > 0 {
			out.pins = d.Pins.String()
		}
		if ops, err = annotationPatch(u, w.Kind, out); err != nil {
			return fail(err.Error())
		}
	}
	switch {
	case len(d.Unproven) > 0:
		result = ResultDeferred
	case len(ops) > 0:
		result = ResultPatched
	default:
		result = ResultUnchanged
	}
	return ops, warnings
}

// admissionSources reads the sources of one admission's namespace: at least at the
// versions its touch names.
type admissionSources struct {
	ctx       context.Context
	reader    SourceReader
	namespace string
	triggers  []confighash.Trigger
}

func (a *admissionSources) Names(kind confighash.SourceKind) ([]string, error) {
	return a.reader.Names(a.ctx, a.namespace, kind)
}

func (a *admissionSources) Read(refs []confighash.SourceRef) (map[confighash.SourceRef]confighash.Source, error) {
	return a.reader.Read(a.ctx, a.namespace, refs, a.triggers)
}

// touchTriggers returns the source changes that made the watcher touch the workload:
// the trigger annotation when this update set it to a new value.
func touchTriggers(annotations map[string]string, prev *confighash.Previous) []confighash.Trigger {
	text, ok := annotations[confighash.AnnotationTrigger]
	if !ok || prev == nil || prev.Annotations()[confighash.AnnotationTrigger] == text {
		return nil
	}
	triggers, err := confighash.ParseTriggers(text)
	if err != nil {
		return nil
	}
	return triggers
}
