package watcher

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/alert"
)

// A wave halts when a workload it let roll has failed and none still rolls: the
// markers on the workloads hold the rest.

// halt marks the failed users and holds the pending ones, in the API server so that
// a restart keeps the halt, and says so once: an Event on each, an alert. Called
// under the waves' lock, which it releases before it writes: the wave is claimed
// meanwhile, so that the others of it (requeued) wait for the markers and no other
// worker waits on the API server.
func (w *Watcher) halt(ctx context.Context, key workloadKey, wv *wave, st standing) error {
	ns := wv.users[0].Namespace
	id := waveID{ns, wv.source}
	if w.waves.halting[id] {
		w.waves.mu.Unlock()
		w.queue.AddAfter(key, time.Second) // looked at again once the markers are written
		return nil
	}
	w.waves.halting[id] = true
	whys := make(map[*view]string, len(st.failed))
	for _, u := range st.failed {
		whys[u] = u.Status.String()
		if f := w.waves.failing[keyOf(u)]; f.hash == u.Hash {
			whys[u] = f.why
		}
	}
	w.waves.mu.Unlock()
	defer func() {
		w.waves.mu.Lock()
		delete(w.waves.halting, id)
		w.waves.mu.Unlock()
	}()
	rv := ""
	if src, ok := w.sources.Lookup(ns, wv.source); ok {
		rv = src.ResourceVersion
	}
	change := confighash.Trigger{SourceRef: wv.source, ResourceVersion: rv}.String()
	var failedNames []string
	for _, u := range st.failed {
		failedNames = append(failedNames, u.Kind.Kind+"/"+u.Name)
	}
	summary := fmt.Sprintf("the rollout of %s failed in %s; %d workloads held until %s changes again or is resumed",
		change, strings.Join(failedNames, ", "), len(st.pending), wv.source)
	// The held first: a halt cut short is taken up again while the failed ones are
	// not yet marked, and the alert goes once all is marked.
	for _, u := range st.pending {
		if _, err := w.patch(ctx, u, annotationPatch(confighash.AnnotationHeld, marker(change, st.due[u]))); err != nil {
			return err
		}
		w.markWritten(u, st.due[u])
		w.cfg.Events.Event(objectRef(u), corev1.EventTypeWarning, "Held", summary)
	}
	for _, u := range st.failed {
		if _, err := w.patch(ctx, u, annotationPatch(confighash.AnnotationFailed, marker(change, u.Hash))); err != nil {
			return err
		}
		w.markWritten(u, u.Hash)
		w.cfg.Events.Event(objectRef(u), corev1.EventTypeWarning, "RolloutFailed", fmt.Sprintf("%s (%s): %s", change, whys[u], summary))
	}
	for _, u := range st.failed {
		w.alert(alert.Halted, u, []confighash.Trigger{{SourceRef: wv.source, ResourceVersion: rv}}, summary)
	}
	w.cfg.Metrics.Halted()
	return nil
}

func annotationPatch(name string, value any) map[string]any {
	return map[string]any{"metadata": map[string]any{"annotations": map[string]any{name: value}}}
}

// markWritten notes the hash of the marker just written on the workload, until the
// cache shows it.
func (w *Watcher) markWritten(u *view, hash string) {
	w.waves.mu.Lock()
	w.waves.marked[keyOf(u)] = hash
	w.waves.generation++
	w.waves.mu.Unlock()
}

// marker is what AnnotationHeld and AnnotationFailed hold: the change, then the hash
// the workload was held from or failed at.
func marker(change, hash string) string { return change + " " + hash }

// markedHash returns the hash of a marker, "" for none.
func markedHash(text string) string {
	fields := strings.Fields(text)
	if len(fields) == 0 {
		return ""
	}
	return fields[len(fields)-1]
}
