// Package webhook is the mutating admission webhook: at every create and update of an
// opted-in workload it writes the keyed hash of the ConfigMaps and Secrets the pod
// template uses, so the workload rolls exactly when that data changes.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kwhmodel "github.com/slok/kubewebhook/v2/pkg/model"
	kwhmutating "github.com/slok/kubewebhook/v2/pkg/webhook/mutating"

	"github.com/confighash/confighash"
)

// SourceReader reads the current state of the named sources of one namespace, as
// digest-only views. A source that does not exist is returned with Present unset.
type SourceReader interface {
	Read(ctx context.Context, namespace string, refs []confighash.SourceRef, triggers []confighash.Trigger) (map[confighash.SourceRef]confighash.Source, error)
}

// Result is the outcome of one admission, for metrics.
type Result string

// Admission results.
const (
	ResultPatched   Result = "patched"   // the hash or the sources record changed
	ResultUnchanged Result = "unchanged" // opted in, nothing to change
	ResultSkipped   Result = "skipped"   // not opted in, or not a workload
	ResultError     Result = "error"     // a lookup failed: allowed unchanged
)

// Mutator writes the hash and the sources record into opted-in workloads.
type Mutator struct {
	key     confighash.Key
	reader  SourceReader
	metrics Recorder
}

var _ kwhmutating.Mutator = (*Mutator)(nil)

// NewMutator returns a mutator hashing with key the sources reader reads.
func NewMutator(key confighash.Key, reader SourceReader, metrics Recorder) *Mutator {
	if metrics == nil {
		metrics = NoopRecorder{}
	}
	return &Mutator{key: key, reader: reader, metrics: metrics}
}

// warningPrefix marks our admission warnings among others in kubectl's output.
const warningPrefix = "confighash: "

// Mutate implements kwhmutating.Mutator. It never returns an error for a workload it
// cannot handle: it allows it unchanged with a warning, so a write is never denied.
func (m *Mutator) Mutate(ctx context.Context, ar *kwhmodel.AdmissionReview, obj metav1.Object) (res *kwhmutating.MutatorResult, _ error) {
	start := time.Now()
	kind := "unknown"
	result, warnings := ResultSkipped, []string(nil)
	defer func() {
		if p := recover(); p != nil {
			m.metrics.Panic()
			result = ResultError
			res = unchanged(ar, append(warnings, warningPrefix+fmt.Sprintf("internal error, allowed unchanged: %v", p)))
		}
		m.metrics.ObserveAdmission(kind, string(ar.Operation), result, time.Since(start))
	}()

	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return &kwhmutating.MutatorResult{}, nil
	}
	w, err := confighash.WorkloadOf(u)
	if err != nil {
		if !errors.Is(err, confighash.ErrUnsupportedKind) {
			result, warnings = ResultError, []string{warningPrefix + err.Error()}
		}
		return &kwhmutating.MutatorResult{Warnings: warnings}, nil
	}
	kind = w.Kind.Kind
	if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, w.Kind.TemplatePath...); !found {
		return &kwhmutating.MutatorResult{}, nil // e.g. a Rollout with a workloadRef: no pod template to hash
	}

	policy, problems := confighash.ParsePolicy(w.Annotations, w.Template.Annotations)
	for _, p := range problems {
		warnings = append(warnings, warningPrefix+p.Error())
	}
	if !policy.Enabled() {
		return &kwhmutating.MutatorResult{Warnings: warnings}, nil
	}

	prev, warning := previousRecord(w.Annotations, ar.OldObjectRaw)
	if warning != "" {
		warnings = append(warnings, warningPrefix+warning)
	}
	candidates := policy.Candidates(confighash.References(w.Template))
	refs := make([]confighash.SourceRef, len(candidates))
	for i, c := range candidates {
		refs[i] = c.SourceRef
	}
	sources, err := m.reader.Read(ctx, w.Namespace, refs, touchTriggers(w.Annotations, ar.OldObjectRaw))
	if err != nil {
		result = ResultError
		warnings = append(warnings, warningPrefix+"could not read the sources, the hash was not updated: "+err.Error())
		return &kwhmutating.MutatorResult{Warnings: warnings}, nil
	}

	record := confighash.Update(prev, confighash.Observe(m.key, policy, candidates, sources))
	changed, err := setAnnotations(u, w.Kind, record.Hash(m.key), record.String())
	if err != nil {
		result = ResultError
		warnings = append(warnings, warningPrefix+err.Error())
		return &kwhmutating.MutatorResult{Warnings: warnings}, nil
	}
	result = ResultUnchanged
	if changed {
		result = ResultPatched
	}
	return &kwhmutating.MutatorResult{MutatedObject: u, Warnings: warnings}, nil
}

// unchanged returns a result that patches nothing: the object as it was sent, decoded
// afresh, whatever happened to obj.
func unchanged(ar *kwhmodel.AdmissionReview, warnings []string) *kwhmutating.MutatorResult {
	original := &unstructured.Unstructured{}
	if err := original.UnmarshalJSON(ar.NewObjectRaw); err != nil {
		return &kwhmutating.MutatorResult{Warnings: warnings}
	}
	return &kwhmutating.MutatorResult{MutatedObject: original, Warnings: warnings}
}

// previousRecord returns the sources record of the object, or else of the old object:
// an apply that replaces the whole object drops it, and losing it would lose which
// sources are baselines and the last digests of deleted ones.
func previousRecord(annotations map[string]string, oldRaw []byte) (confighash.Record, string) {
	text, ok := annotations[confighash.AnnotationSources]
	if !ok {
		text, ok = oldAnnotations(oldRaw)[confighash.AnnotationSources]
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
func touchTriggers(annotations map[string]string, oldRaw []byte) []confighash.Trigger {
	text, ok := annotations[confighash.AnnotationTrigger]
	if !ok || oldRaw == nil || oldAnnotations(oldRaw)[confighash.AnnotationTrigger] == text {
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

// setAnnotations writes the hash on the pod template and the record on the metadata,
// and reports whether either changed.
func setAnnotations(u *unstructured.Unstructured, kind confighash.Kind, hash, record string) (bool, error) {
	changed := false
	meta := u.GetAnnotations()
	if meta[confighash.AnnotationSources] != record {
		if meta == nil {
			meta = map[string]string{}
		}
		meta[confighash.AnnotationSources] = record
		u.SetAnnotations(meta)
		changed = true
	}
	path := append(append([]string{}, kind.TemplatePath...), "metadata", "annotations")
	tmpl, _, err := unstructured.NestedStringMap(u.Object, path...)
	if err != nil {
		return false, fmt.Errorf("read pod template annotations: %w", err)
	}
	if tmpl[confighash.AnnotationHash] != hash {
		if tmpl == nil {
			tmpl = map[string]string{}
		}
		tmpl[confighash.AnnotationHash] = hash
		if err := unstructured.SetNestedStringMap(u.Object, tmpl, path...); err != nil {
			return false, fmt.Errorf("write pod template annotations: %w", err)
		}
		changed = true
	}
	return changed, nil
}
