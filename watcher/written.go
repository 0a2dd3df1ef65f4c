package watcher

import (
	"slices"
	"sync"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
)

// dataWrites keeps, for the sources whose latest writes changed only their metadata
// (a match annotation added, say), their last write of data: the data running pods
// may hold dates from then, not from the metadata's write. It learns from the
// watcher's handler of sources; the cache keeps no handler of its own, whose buffer of
// notifications would grow with the first list and never shrink.
type dataWrites struct {
	mu   sync.Mutex
	kept map[sourceIn]confighash.Written
}

type sourceIn struct {
	namespace string
	ref       confighash.SourceRef
}

func newDataWrites() *dataWrites { return &dataWrites{kept: map[sourceIn]confighash.Written{}} }

// observe learns of a write of the source, prev being what it was; nil when it was
// created or deleted, which forgets what was kept of it.
func (dw *dataWrites) observe(prev, d *sourcecache.Digested) {
	if d.Source.Kind == confighash.SecretProviderClass {
		return // one pod's report: its class's last write is its latest report's
	}
	key := sourceIn{d.Namespace(), d.Source.SourceRef}
	dw.mu.Lock()
	defer dw.mu.Unlock()
	switch {
	case prev == nil, !slices.Equal(prev.Source.Data, d.Source.Data) || !slices.Equal(prev.Source.BinaryData, d.Source.BinaryData):
		delete(dw.kept, key)
	default:
		if _, ok := dw.kept[key]; !ok {
			dw.kept[key] = confighash.Written{Time: prev.Written(), ResourceVersion: prev.ResourceVersion}
		}
	}
}

// of returns the source's last write of data as far as the watcher has seen: after a
// restart, its last write of any kind.
func (dw *dataWrites) of(d *sourcecache.Digested) confighash.Written {
	dw.mu.Lock()
	w, kept := dw.kept[sourceIn{d.Namespace(), d.Source.SourceRef}]
	dw.mu.Unlock()
	if kept {
		return w
	}
	return confighash.Written{Time: d.Written(), ResourceVersion: d.ResourceVersion}
}
