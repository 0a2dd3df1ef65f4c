package confighash

import (
	"time"

	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// Written is when a source's data was last written, as far as the API server tells.
type Written struct {
	// Time is to the second, as the API server records it.
	Time time.Time
	// ResourceVersion is the write's resource version.
	ResourceVersion string
}

// Running is what is known of when a workload's running pods read their sources: the
// revisions (ReplicaSets, ControllerRevisions) that may still run pods were created
// after the pods of older revisions, and before their own pods.
type Running struct {
	// Since is when the oldest of those revisions was created, to the second.
	Since time.Time
	// AbsentAt is a resource version at which none of them existed yet; "" when not
	// known (the API server keeps a few minutes of history).
	AbsentAt string
}

// Holds reports whether the running pods provably hold the data a source has had
// since its last write w: the write came before the oldest revision that may run pods
// was created. Times order writes a second apart or more; resource versions order the
// rest, while the API server still has them (rule 8). A write in the same
// second as the revision, older than that history, is not known to come first.
func (r Running) Holds(w Written) bool {
	if !w.Time.IsZero() && w.Time.Before(r.Since) {
		return true
	}
	if r.AbsentAt == "" {
		return false
	}
	order, err := resourceversion.CompareResourceVersion(w.ResourceVersion, r.AbsentAt)
	return err == nil && order <= 0
}
