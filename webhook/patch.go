package webhook

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/confighash/confighash"
)

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
	// pins, on a pinned pod template, says the snapshots its names stand for;
	// otherwise it is removed. renames are the names the template changes.
	pins    string
	renames []confighash.Rename
	// notPinned, on the metadata of a pinned workload admitted unpinned, says why;
	// otherwise it is removed.
	notPinned string
}

// annotationPatch returns the operations that write w: the record and the adoption on
// the metadata and the hash on the pod template, for those that differ. An "add"
// replaces a member that exists; a missing annotations map (or template metadata) is
// added whole.
func annotationPatch(u *unstructured.Unstructured, kind confighash.Kind, w written) ([]patchOp, error) {
	var ops []patchOp
	// set writes the annotation key of the metadata at parent; an empty value removes it.
	set := func(parent []string, key, value string) error {
		path := append(slices.Clone(parent), "annotations")
		raw, _, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
		switch annotations := raw.(type) {
		case map[string]any:
			_, present := annotations[key]
			switch {
			case value == "" && present:
				ops = append(ops, patchOp{Op: "remove", Path: pointer(append(path, key))})
			case value != "" && annotations[key] != value:
				ops = append(ops, patchOp{"add", pointer(append(path, key)), value})
			}
		case nil: // absent, or null
			if value == "" {
				return nil
			}
			// The next annotation of the same map goes into the one added here.
			added, at := any(map[string]any{key: value}), path
			if meta, _, _ := unstructured.NestedFieldNoCopy(u.Object, parent...); meta == nil {
				added, at = map[string]any{"annotations": added}, parent
			}
			ops = append(ops, patchOp{"add", pointer(at), added})
			if err := unstructured.SetNestedField(u.Object, added, at...); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s is not a map of annotations", pointer(path))
		}
		return nil
	}
	if err := set([]string{"metadata"}, confighash.AnnotationSources, w.record); err != nil {
		return nil, err
	}
	if err := set([]string{"metadata"}, confighash.AnnotationAdopted, w.adopted); err != nil {
		return nil, err
	}
	// The watcher's request to make snapshots again is done with once admitted.
	if err := set([]string{"metadata"}, confighash.AnnotationRemakeSnapshots, ""); err != nil {
		return nil, err
	}
	if err := set([]string{"metadata"}, confighash.AnnotationNotPinned, w.notPinned); err != nil {
		return nil, err
	}
	if w.hash == "" {
		return ops, nil
	}
	templateMeta := append(slices.Clone(kind.TemplatePath), "metadata")
	if err := set(templateMeta, confighash.AnnotationHash, w.hash); err != nil {
		return nil, err
	}
	if err := set(templateMeta, confighash.AnnotationPinned, w.pins); err != nil {
		return nil, err
	}
	spec := pointer(append(slices.Clone(kind.TemplatePath), "spec"))
	for _, r := range w.renames {
		ops = append(ops, patchOp{"replace", spec + r.Path, r.Name})
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
