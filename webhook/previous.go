package webhook

import (
	"encoding/json"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/confighash/confighash"
)

// previousOf returns the old object of an update as the decision reads it, nil for a
// create. Its annotations are decoded alone, and the whole object only when asked
// for: most updates need neither.
func previousOf(oldRaw []byte, kind confighash.Kind) *confighash.Previous {
	if oldRaw == nil {
		return nil
	}
	return &confighash.Previous{
		Annotations: sync.OnceValue(func() map[string]string { return oldAnnotations(oldRaw) }),
		Workload:    sync.OnceValue(func() *confighash.Workload { return oldWorkload(oldRaw, kind) }),
	}
}

// oldAnnotations returns the metadata annotations of the old object's JSON, or nil.
func oldAnnotations(raw []byte) map[string]string {
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

// oldWorkload decodes the old object of an update, nil if it cannot be read.
func oldWorkload(raw []byte, kind confighash.Kind) *confighash.Workload {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return nil
	}
	old, err := confighash.Kinds{kind}.WorkloadOf(u)
	if err != nil {
		return nil
	}
	return old
}
