package confighash

import (
	"errors"
	"fmt"
	"strings"
)

// Trigger names a source change that made the watcher touch a workload, so that the
// webhook knows which version of that source it must see: kind/name@resourceVersion.
// A touch may name several, comma-separated.
type Trigger struct {
	SourceRef
	ResourceVersion string
}

func (t Trigger) String() string { return t.SourceRef.String() + "@" + t.ResourceVersion }

// FormatTriggers renders triggers for AnnotationTrigger.
func FormatTriggers(triggers []Trigger) string {
	parts := make([]string, len(triggers))
	for i, t := range triggers {
		parts[i] = t.String()
	}
	return strings.Join(parts, ",")
}

// ErrBadTrigger is returned by ParseTriggers for text that is not a list of triggers.
var ErrBadTrigger = errors.New("bad trigger")

// ParseTriggers parses a comma-separated list of kind/name@resourceVersion.
func ParseTriggers(s string) ([]Trigger, error) {
	var out []Trigger
	for _, part := range strings.Split(s, ",") {
		ref, rv, ok := strings.Cut(part, "@")
		kind, name, ok2 := strings.Cut(ref, "/")
		if !ok || !ok2 || name == "" || rv == "" || (SourceKind(kind) != ConfigMap && SourceKind(kind) != Secret) {
			return nil, fmt.Errorf("%w: %q, want ConfigMap/name@version or Secret/name@version", ErrBadTrigger, part)
		}
		out = append(out, Trigger{SourceRef{SourceKind(kind), name}, rv})
	}
	return out, nil
}
