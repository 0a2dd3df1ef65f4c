package watcher

import (
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/confighash/confighash"
)

// badSettings tells the owner of a Namespace or a source that some of its confighash
// settings are bad and ignored, the rest standing: a Warning Event on that object,
// once for each new set of problems. Workloads are told through their own problems
// (BadAnnotation).
type badSettings struct {
	events record.EventRecorder

	mu sync.Mutex
	// told is, per object, the problems last told; entries is its size, read without
	// the lock on the path every decision takes.
	told    map[corev1.ObjectReference]string
	entries atomic.Int64
}

func newBadSettings(events record.EventRecorder) *badSettings {
	return &badSettings{events: events, told: map[corev1.ObjectReference]string{}}
}

// tell sends the object's problems unless they were the last told; "" forgets it.
func (b *badSettings) tell(ref corev1.ObjectReference, problems string) {
	if problems == "" && b.entries.Load() == 0 {
		return
	}
	b.mu.Lock()
	last, had := b.told[ref]
	switch {
	case problems == "":
		delete(b.told, ref)
	default:
		b.told[ref] = problems
	}
	b.entries.Store(int64(len(b.told)))
	b.mu.Unlock()
	if problems != "" && (!had || last != problems) {
		b.events.Event(&ref, corev1.EventTypeWarning, "BadSetting", "ignored, the rest stands: "+problems)
	}
}

// namespaceRef names a Namespace for an Event kept in that namespace, where its
// owner, who may not list events across the cluster, reads it.
func namespaceRef(ns string) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "Namespace", APIVersion: "v1", Name: ns, Namespace: ns}
}

// tellSources tells the sources a workload uses whose settings are bad.
func (w *Watcher) tellSources(ns string, used []confighash.Observation) {
	for _, o := range used {
		if d, ok := w.sources.Lookup(ns, o.SourceRef); ok && o.Present {
			w.settings.tell(corev1.ObjectReference{Kind: string(o.Kind), APIVersion: "v1", Namespace: ns, Name: o.Name}, d.Source.Bad)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
