// Package webhook is the mutating admission webhook: at every create and update of an
// opted-in workload it writes the keyed hash of the ConfigMaps and Secrets the pod
// template uses, so the workload rolls exactly when that data changes.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kwhmodel "github.com/slok/kubewebhook/v2/pkg/model"
	kwhwebhook "github.com/slok/kubewebhook/v2/pkg/webhook"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/namespaces"
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
	// ResultDeferred: an update of a running workload met for the first time, left
	// for the watcher to adopt without a rollout, or to roll if its pods are stale.
	ResultDeferred Result = "deferred"
	// ResultTooLarge: more sources than confighash.MaxSources: allowed unchanged.
	ResultTooLarge Result = "too_large"
)

// Budget is how long an admission may take before it answers "allowed, unchanged"
// with a warning, comfortably before the API server gives up at Timeout; the watcher
// then converges the workload.
const Budget = Timeout - time.Second

// Mutator writes the hash and the sources record into opted-in workloads. It is a
// kubewebhook Webhook that builds its JSON patch from the two annotations it sets,
// rather than by serializing and diffing the whole object.
type Mutator struct {
	key        confighash.Key
	vocabulary confighash.Vocabulary
	kinds      []confighash.Kind
	namespaces NamespaceModes
	reader     SourceReader
	metrics    Recorder
	// every: in a namespace that opts every workload in (see Policy.ForEveryWorkload).
	every bool
}

var _ kwhwebhook.Webhook = (*Mutator)(nil)

// MutatorConfig configures a Mutator.
type MutatorConfig struct {
	// Key hashes.
	Key confighash.Key
	// Vocabulary is which annotations workloads are read in.
	Vocabulary confighash.Vocabulary
	// Kinds are the workload kinds handled; empty: every supported kind.
	Kinds []confighash.Kind
	// Reader reads the sources.
	Reader SourceReader
	// Namespaces, when set, tells how confighash acts in each namespace: a review for
	// a namespace it does not act in, posted by anyone but the API server, reads
	// nothing.
	Namespaces NamespaceModes
	Metrics    Recorder
}

// NamespaceModes tells how confighash acts in a namespace (namespaces.Gate).
type NamespaceModes interface {
	Mode(namespace string) namespaces.Mode
}

// NewMutator returns a mutator.
func NewMutator(cfg MutatorConfig) *Mutator {
	if cfg.Metrics == nil {
		cfg.Metrics = NoopRecorder{}
	}
	if len(cfg.Kinds) == 0 {
		cfg.Kinds = confighash.Kinds
	}
	return &Mutator{key: cfg.Key, vocabulary: cfg.Vocabulary, kinds: cfg.Kinds, namespaces: cfg.Namespaces, reader: cfg.Reader, metrics: cfg.Metrics}
}

// ForEveryWorkload returns the mutator for namespaces that opt every workload in.
func (m *Mutator) ForEveryWorkload() *Mutator {
	every := *m
	every.every = true
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

// admit returns the patch that writes the workload's hash and sources record, and the
// warnings for the user.
func (m *Mutator) admit(ctx context.Context, ar *kwhmodel.AdmissionReview) (ops []patchOp, warnings []string) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, Budget)
	defer cancel()
	kind, result := "unknown", ResultSkipped
	defer func() {
		if p := recover(); p != nil {
			m.metrics.Panic()
			ops, result = nil, ResultError
			warnings = append(warnings, warningPrefix+fmt.Sprintf("internal error, allowed unchanged: %v", p))
		}
		// kubewebhook spells operations in lower case; the API server and its metrics, in upper.
		m.metrics.ObserveAdmission(kind, strings.ToUpper(string(ar.Operation)), result, time.Since(start))
	}()
	fail := func(msg string) ([]patchOp, []string) {
		result = ResultError
		return nil, append(warnings, warningPrefix+msg)
	}

	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(ar.NewObjectRaw); err != nil {
		return fail("the object could not be read: " + err.Error())
	}
	w, err := confighash.WorkloadOf(u)
	switch {
	case errors.Is(err, confighash.ErrUnsupportedKind):
		return nil, nil
	case err == nil && !slices.ContainsFunc(m.kinds, func(k confighash.Kind) bool { return k.GroupVersionKind == w.Kind.GroupVersionKind }):
		return nil, nil // a kind this install does not handle
	case errors.Is(err, confighash.ErrNoPodTemplate):
		// Nothing to hash: writing into its template would break, e.g., a Rollout
		// with a workloadRef, whose template must stay empty.
		return nil, []string{warningPrefix + "not hashed: " + err.Error()}
	case err != nil:
		return fail(err.Error())
	}
	kind = w.Kind.Kind
	if m.namespaces != nil && m.namespaces.Mode(w.Namespace) == namespaces.Off {
		return nil, nil // the API server does not send these: read nothing for others
	}

	policy, problems := m.vocabulary.ParsePolicy(w.Annotations, w.Template.Annotations)
	if m.every {
		policy = policy.ForEveryWorkload()
	}
	for _, p := range problems {
		warnings = append(warnings, warningPrefix+p.Error())
	}
	if !policy.Enabled() {
		return nil, warnings
	}

	// Most updates need only the old object's annotations, if that.
	old := sync.OnceValue(func() map[string]string { return oldAnnotations(ar.OldObjectRaw) })
	triggers := touchTriggers(w.Annotations, ar.OldObjectRaw != nil, old)
	if len(triggers) == 0 && firstMet(ar.OldObjectRaw, old(), w) {
		result = ResultDeferred
		return nil, warnings
	}
	prev, warning := previousRecord(w.Annotations, old)
	if warning != "" {
		warnings = append(warnings, warningPrefix+warning)
	}
	names, err := m.patternNames(ctx, w.Namespace, policy, prev)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fail(fmt.Sprintf("the sources could not be listed within %v, the hash was not updated; the watcher will update it", Budget))
	}
	if err != nil {
		return fail("could not list the sources its name patterns may match, the hash was not updated: " + err.Error())
	}
	candidates := policy.Candidates(confighash.References(w.Template), names)
	if err := confighash.CheckCandidates(candidates); err != nil {
		result = ResultTooLarge
		return nil, append(warnings, warningPrefix+"not hashed: "+err.Error())
	}
	refs := make([]confighash.SourceRef, len(candidates))
	for i, c := range candidates {
		refs[i] = c.SourceRef
	}
	sources, err := m.reader.Read(ctx, w.Namespace, refs, triggers)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fail(fmt.Sprintf("the sources could not be read within %v, the hash was not updated; the watcher will update it", Budget))
	}
	if err != nil {
		return fail("could not read the sources, the hash was not updated: " + err.Error())
	}

	record := confighash.Update(prev, confighash.Observe(m.key, policy, candidates, sources))
	want := written{record: record.String(), hash: record.Hash(m.key)}
	if w.Template.Annotations[confighash.AnnotationHash] == "" {
		// An adopted workload keeps its pod template without a hash until a change
		// is due; an apply that replaced the whole object keeps the adoption too.
		adopted, ok := w.Annotations[confighash.AnnotationAdopted]
		if !ok {
			adopted = old()[confighash.AnnotationAdopted]
		}
		if confighash.Settled("", adopted, want.hash) {
			want.hash, want.adopted = "", adopted
		}
	}
	ops, err = annotationPatch(u, w.Kind, want)
	if err != nil {
		return fail(err.Error())
	}
	result = ResultUnchanged
	if len(ops) > 0 {
		result = ResultPatched
	}
	return ops, warnings
}

// patternNames returns what the policy's name patterns are matched against: the
// sources of their kinds that exist now, and those in the record, so that a deleted
// one stays in it as absent.
func (m *Mutator) patternNames(ctx context.Context, namespace string, policy confighash.Policy, prev confighash.Record) ([]confighash.SourceRef, error) {
	if len(policy.Patterns) == 0 {
		return nil, nil
	}
	names := prev.Sources()
	listed := map[confighash.SourceKind]bool{}
	for _, p := range policy.Patterns {
		if listed[p.Kind] {
			continue
		}
		listed[p.Kind] = true
		found, err := m.reader.Names(ctx, namespace, p.Kind)
		if err != nil {
			return nil, err
		}
		for _, name := range found {
			names = append(names, confighash.SourceRef{Kind: p.Kind, Name: name})
		}
	}
	return names, nil
}

// previousRecord returns the sources record of the object, or else of the old object:
// an apply that replaces the whole object drops it, and losing it would lose which
// sources are baselines and the last digests of deleted ones.
func previousRecord(annotations map[string]string, old func() map[string]string) (confighash.Record, string) {
	text, ok := annotations[confighash.AnnotationSources]
	if !ok {
		text, ok = old()[confighash.AnnotationSources]
	}
	if !ok {
		return nil, ""
	}
	rec, err := confighash.ParseRecord(text)
	if err != nil {
		return nil, fmt.Sprintf("%s is not a sources record and was rewritten: %v", confighash.AnnotationSources, err)
	}
	return rec, ""
}

// touchTriggers returns the source changes that made the watcher touch the workload:
// the trigger annotation when this update set it to a new value.
func touchTriggers(annotations map[string]string, update bool, old func() map[string]string) []confighash.Trigger {
	text, ok := annotations[confighash.AnnotationTrigger]
	if !ok || !update || old()[confighash.AnnotationTrigger] == text {
		return nil
	}
	triggers, err := confighash.ParseTriggers(text)
	if err != nil {
		return nil
	}
	return triggers
}

// oldAnnotations returns the metadata annotations of the old object's JSON, or nil.
func oldAnnotations(raw []byte) map[string]string {
	if len(raw) == 0 {
		return nil
	}
	var old struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &old); err != nil {
		return nil
	}
	return old.Metadata.Annotations
}

// firstMet reports whether an update meets a running workload for the first time (it
// had no hash, record or adoption) without changing its pods: hashing it now would
// roll it only to add the hash. The watcher decides instead whether its pods have the
// current data (adopt) or not (roll once). A create, a pod template change, or a
// watcher's touch is hashed as always. The old object is decoded whole only when its
// annotations leave the question open.
func firstMet(oldRaw []byte, oldAnnotations map[string]string, w *confighash.Workload) bool {
	_, recorded := oldAnnotations[confighash.AnnotationSources]
	_, adopted := oldAnnotations[confighash.AnnotationAdopted]
	if len(oldRaw) == 0 || recorded || adopted {
		return false
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(oldRaw); err != nil {
		return false
	}
	old, err := confighash.WorkloadOf(u)
	if err != nil || old.Template.Annotations[confighash.AnnotationHash] != "" {
		return false
	}
	return equality.Semantic.DeepEqual(old.Template, w.Template)
}

// patchOp is one JSON patch (RFC 6902) operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"` // none for a remove
}

// written is what the webhook writes on a workload.
type written struct {
	record string // on the metadata
	hash   string // on the pod template; empty leaves it without one
	// adopted stays on the metadata when set; otherwise it is removed.
	adopted string
}

// annotationPatch returns the operations that write w: the record and the adoption on
// the metadata and the hash on the pod template, for those that differ. An "add"
// replaces a member that exists; a missing annotations map (or template metadata) is
// added whole.
func annotationPatch(u *unstructured.Unstructured, kind confighash.Kind, w written) ([]patchOp, error) {
	var ops []patchOp
	set := func(parent []string, key, value string) error {
		path := append(slices.Clone(parent), "annotations")
		raw, _, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
		switch annotations := raw.(type) {
		case map[string]any:
			if annotations[key] != value {
				ops = append(ops, patchOp{"add", pointer(append(path, key)), value})
			}
		case nil: // absent, or null
			if meta, _, _ := unstructured.NestedFieldNoCopy(u.Object, parent...); meta == nil {
				ops = append(ops, patchOp{"add", pointer(parent), map[string]any{"annotations": map[string]string{key: value}}})
			} else {
				ops = append(ops, patchOp{"add", pointer(path), map[string]string{key: value}})
			}
		default:
			return fmt.Errorf("%s is not a map of annotations", pointer(path))
		}
		return nil
	}
	if err := set([]string{"metadata"}, confighash.AnnotationSources, w.record); err != nil {
		return nil, err
	}
	if w.adopted != "" {
		if err := set([]string{"metadata"}, confighash.AnnotationAdopted, w.adopted); err != nil {
			return nil, err
		}
	} else if _, ok := u.GetAnnotations()[confighash.AnnotationAdopted]; ok {
		ops = append(ops, patchOp{Op: "remove", Path: pointer([]string{"metadata", "annotations", confighash.AnnotationAdopted})})
	}
	if w.hash == "" {
		return ops, nil
	}
	if err := set(append(slices.Clone(kind.TemplatePath), "metadata"), confighash.AnnotationHash, w.hash); err != nil {
		return nil, err
	}
	return ops, nil
}

// pointer is the JSON pointer (RFC 6901) to a field path.
func pointer(path []string) string {
	var b strings.Builder
	for _, p := range path {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(p))
	}
	return b.String()
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")
