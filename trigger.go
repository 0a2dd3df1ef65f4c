package confighash

import (
	"errors"
	"fmt"
	"strings"
)

// Trigger names the source change that made the watcher touch a workload, so that the
// webhook knows which version of that source it must see: kind/name@resourceVersion.
type Trigger struct {
	SourceRef
	ResourceVersion string
}

func (t Trigger) String() string { return t.SourceRef.String() + "@" + t.ResourceVersion }

// ErrBadTrigger is returned by ParseTrigger for text that is not a trigger.
var ErrBadTrigger = errors.New("bad trigger")

// ParseTrigger parses kind/name@resourceVersion.
func ParseTrigger(s string) (Trigger, error) {
	ref, rv, ok := strings.Cut(s, "@")
	kind, name, ok2 := strings.Cut(ref, "/")
	if !ok || !ok2 || name == "" || rv == "" || (SourceKind(kind) != ConfigMap && SourceKind(kind) != Secret) {
		return Trigger{}, fmt.Errorf("%w: %q, want ConfigMap/name@version or Secret/name@version", ErrBadTrigger, s)
	}
	return Trigger{SourceRef{SourceKind(kind), name}, rv}, nil
}
