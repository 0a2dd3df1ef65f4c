package watcher

import (
	"errors"
	"slices"
	"sync"

	"github.com/confighash/confighash"
)

// laterRecords are the workloads whose sources record a later release wrote, with the
// sources they use that changed since: such a record is left alone, never healed or
// rewritten, until one does (rule 12); then a touch naming it has the webhook
// write the record again, in this release's form.
type laterRecords struct {
	mu      sync.Mutex
	changed map[workloadKey][]confighash.SourceRef
}

func newLaterRecords() *laterRecords {
	return &laterRecords{changed: map[workloadKey][]confighash.SourceRef{}}
}

// sourceChanged notes a change of a source the workload may use, if a later release
// wrote its record.
func (l *laterRecords) sourceChanged(v *view, ref confighash.SourceRef) {
	if !errors.Is(v.RecordErr, confighash.ErrLaterForm) {
		return
	}
	key := keyOf(v)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Contains(l.changed[key], ref) {
		l.changed[key] = append(l.changed[key], ref)
	}
}

// forget drops what is kept of a workload gone.
func (l *laterRecords) forget(key workloadKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.changed, key)
}

// of returns the sources of the workload that changed since a later release wrote its
// record; none, forgetting them, once its record is of this release.
func (l *laterRecords) of(v *view) []confighash.SourceRef {
	key := keyOf(v)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !errors.Is(v.RecordErr, confighash.ErrLaterForm) {
		delete(l.changed, key)
		return nil
	}
	return slices.Clone(l.changed[key])
}
