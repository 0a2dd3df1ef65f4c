package watcher

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/alert"
	"github.com/confighash/confighash/sourcecache"
)

// Flapping: a source whose data will not stop changing (two controllers writing one
// Secret, each undoing the other) would roll its users at every change, without end.
// Past a number of changes within a window, the breaker holds them at their current
// revision until the source is quiet, then lets them roll once, with its latest data:
// every change still counts, the rollouts are coalesced.

// Defaults of the breaker's flags.
const (
	DefaultFlapLimit  = 10
	DefaultFlapWindow = 5 * time.Minute
	DefaultFlapQuiet  = 2 * time.Minute
)

// maxWriters bounds the field managers named per source: the few last ones are who
// fights over it.
const maxWriters = 4

// flapBreaker counts the changes of each source and holds the users of those that
// change too often.
type flapBreaker struct {
	// limit changes within window; a change less than spacing after the one counted
	// before is the same round of rollouts (the debounce merges them); a held source
	// is let go once it has not changed for quiet. A limit of 0 holds nothing.
	limit                  int
	window, spacing, quiet time.Duration

	mu      sync.Mutex
	sources map[sourceIn]*flaps
	// pruned is when sources quiet for a window were last forgotten.
	pruned time.Time
}

// flaps is what the breaker knows of one source that changed within its window.
type flaps struct {
	changes []time.Time // counted, within the window, oldest first; at most limit+1
	last    time.Time   // its last change, counted or not
	held    time.Time   // when its users were held; zero while they are not
	// ended is set when a hold ended, until the next: the markers its users still
	// carry are to be removed, not held on. marked is when a marker of it was first
	// met while it was not held (holdsMarked).
	ended  bool
	marked time.Time
	// writers are the field managers of its last writes of data, the latest first,
	// each learned as the write arrives; announced is what was last said of them.
	writers   []string
	announced string
	uid       types.UID // the source's, once a write of it arrived
}

func newFlapBreaker(limit int, window, spacing, quiet time.Duration) *flapBreaker {
	return &flapBreaker{limit: limit, window: window, spacing: spacing, quiet: quiet, sources: map[sourceIn]*flaps{}}
}

// changed counts a change of the source's data, seen at now, and reports whether it
// holds the source's users from now on (the change that trips the breaker).
func (b *flapBreaker) changed(src sourceIn, now time.Time) (tripped bool) {
	if b.limit <= 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.prune(now)
	f := b.sources[src]
	if f == nil {
		f = &flaps{}
		b.sources[src] = f
	}
	f.last = now
	f.changes = slices.DeleteFunc(f.changes, func(t time.Time) bool { return now.Sub(t) > b.window })
	if n := len(f.changes); n > 0 && now.Sub(f.changes[n-1]) < b.spacing {
		return false // the same round as the change counted before
	}
	f.changes = append(f.changes, now)
	if len(f.changes) > b.limit+1 {
		f.changes = f.changes[1:]
	}
	if f.held.IsZero() && len(f.changes) > b.limit {
		f.held, f.ended = now, false
		return true
	}
	return false
}

// prune forgets, once a window, the sources that have not changed for one, and those
// held that have not for a window and the quiet period besides (their users gone, or
// deleted with them, nobody asked whether they are held): a tenant's sources made and
// deleted in a loop cost nothing that stays. b.mu is held.
func (b *flapBreaker) prune(now time.Time) {
	if now.Sub(b.pruned) < b.window {
		return
	}
	b.pruned = now
	for src, f := range b.sources {
		if idle := now.Sub(f.last); idle > b.window && (f.held.IsZero() || idle > b.window+b.quiet) {
			delete(b.sources, src)
		}
	}
}

// forget drops what the breaker knows of a source just created or deleted: a tenant's
// sources made, changed and deleted in a loop cost nothing that stays.
func (b *flapBreaker) forget(src sourceIn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.sources, src)
}

// holds reports whether the source's users are held at now, and until when at the
// earliest: its last change and the quiet period. A source quiet for that long is let
// go, and forgotten with its changes once they are out of the window.
func (b *flapBreaker) holds(src sourceIn, now time.Time) (bool, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.sources[src]
	switch {
	case f == nil:
		return false, time.Time{}
	case !f.held.IsZero() && now.Sub(f.last) < b.quiet:
		return true, f.last.Add(b.quiet)
	case !f.held.IsZero():
		f.held, f.changes, f.writers, f.announced, f.ended = time.Time{}, nil, nil, "", true
	}
	if now.Sub(f.last) > b.window {
		delete(b.sources, src)
	}
	return false, time.Time{}
}

// wrote learns who last wrote the data of a source that changed within the window,
// from the managedFields of the write as it arrives, and the source's UID. Read later,
// the object names only its latest writer: two that take turns would be seen as one.
func (b *flapBreaker) wrote(src sourceIn, meta metav1.Object) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.sources[src]
	if f == nil {
		return
	}
	f.uid = meta.GetUID()
	manager := dataWriter(meta)
	if manager == "" {
		return
	}
	f.writers = slices.DeleteFunc(f.writers, func(m string) bool { return m == manager })
	f.writers = slices.Insert(f.writers, 0, manager)
	if len(f.writers) > maxWriters {
		f.writers = f.writers[:maxWriters]
	}
}

// holdsMarked is holds for a workload marked held for the source (AnnotationFlapping).
// A source the breaker does not hold, as after a restart or on a new leader, which
// count only the changes they saw, holds the marked workload until it has not changed
// for the quiet period since the breaker first met its marker; the source's other
// users, unmarked, roll: a marker anyone who may annotate a workload can write holds
// that workload alone. One whose hold the breaker ended is let go, and with no limit
// nothing is held: the marker is removed.
func (b *flapBreaker) holdsMarked(src sourceIn, now time.Time) (bool, time.Time) {
	if held, until := b.holds(src, now); held || b.limit <= 0 {
		return held, until
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.sources[src]
	if f == nil {
		f = &flaps{}
		b.sources[src] = f
	}
	if f.ended {
		return false, time.Time{}
	}
	if f.marked.IsZero() {
		f.marked = now
	}
	until := f.marked
	if f.last.After(until) {
		until = f.last
	}
	until = until.Add(b.quiet)
	return now.Before(until), until
}

// hold is what the breaker tells of a held source.
type hold struct {
	changes int       // within the window, counted
	writers []string  // the latest first, at most maxWriters
	uid     types.UID // the source's, once read
}

// object is the source, for its Events.
func (h hold) object(src sourceIn) *corev1.ObjectReference {
	ref := src.object()
	ref.UID = h.uid
	return ref
}

// String says who writes the source, for Events and alerts: `"a" and "b"`, or "an
// unknown writer". Each name is quoted: anyone who may write the source chooses it,
// and one that reads as two names, or as a sentence, is seen for what it is. The names
// are sorted: two writers taking turns are the same news whoever wrote last.
func (h hold) String() string {
	quoted := make([]string, len(h.writers))
	for i, w := range slices.Sorted(slices.Values(h.writers)) {
		quoted[i] = strconv.Quote(w)
	}
	switch len(quoted) {
	case 0:
		return "an unknown writer"
	case 1:
		return quoted[0]
	}
	return strings.Join(quoted[:len(quoted)-1], ", ") + " and " + quoted[len(quoted)-1]
}

// state returns what is known of the source's hold, and whether it is held.
func (b *flapBreaker) state(src sourceIn) (hold, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.sources[src]
	if f == nil || f.held.IsZero() {
		return hold{}, false
	}
	return hold{changes: len(f.changes), writers: slices.Clone(f.writers), uid: f.uid}, true
}

// announce returns the hold of the source, and whether it is news: held since it was
// last announced, or written by others.
func (b *flapBreaker) announce(src sourceIn) (hold, bool) {
	h, held := b.state(src)
	if !held {
		return h, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.sources[src]
	said := h.String() // who writes it is the news; a count that moves is not
	if f == nil || f.announced == said {
		return h, false
	}
	f.announced = said
	return h, true
}

// heldByFlapping holds the workload when every source whose change is due to roll it
// keeps changing, and reports whether it does. The hold is written on the workload
// (AnnotationFlapping), where the webhook reads it: no write of the workload rolls it
// meanwhile, and a new leader holds it on from the marker (holdsMarked). A Warning Event on
// the workload and on each source names who writes it; the workload is checked again
// when the hold may end. A due change of any other source rolls it, with every
// source's latest data.
func (pc *pacer) heldByFlapping(ctx context.Context, key workloadKey, v *view, due []confighash.Trigger) (bool, error) {
	if len(due) == 0 {
		return false, nil
	}
	now := time.Now()
	var until time.Time
	srcs := make([]sourceIn, len(due))
	for i, t := range due {
		srcs[i] = sourceIn{v.Namespace, t.SourceRef}
		holds := pc.flapping.holds
		if slices.ContainsFunc(v.Flapping, func(m confighash.Trigger) bool { return m.SourceRef == t.SourceRef }) {
			holds = pc.flapping.holdsMarked
		}
		held, end := holds(srcs[i], now)
		if !held {
			return false, nil
		}
		if end.After(until) {
			until = end
		}
	}
	says := make([]string, len(srcs))
	learnt := false
	for i, src := range srcs {
		h, news := pc.flapping.announce(src)
		learnt = learnt || h.changes > 0
		says[i] = fmt.Sprintf("%s changed %d times within %s, written by %s", src.ref, h.changes, pc.flapping.window, h)
		if h.changes == 0 {
			says[i] = fmt.Sprintf("%s is marked as changing too often (%s), held on until it has not changed for %s", src.ref, confighash.AnnotationFlapping, pc.flapping.quiet)
		}
		if news {
			pc.log.Warn().Str("namespace", src.namespace).Stringer("source", src.ref).Strs("writers", h.writers).Int("changes", h.changes).
				Msg("a source keeps changing: its users are held at their current revision")
			pc.report.Event(h.object(src), corev1.EventTypeWarning, "Flapping", fmt.Sprintf(
				"changed %d times within %s, written by %s: the workloads that use it are held at their current revision until it has not changed for %s (or confighash resume)",
				h.changes, pc.flapping.window, h, pc.flapping.quiet))
		}
	}
	said := strings.Join(says, "; ")
	if len(v.Flapping) == 0 {
		held := confighash.Status{Act: confighash.ActHeld, At: now, Why: said}
		marker := annotationsPatch(map[string]any{confighash.AnnotationFlapping: confighash.FlappingMarker(due), confighash.AnnotationStatus: held.Text()})
		if _, err := pc.workloads.patch(ctx, v, marker); err != nil {
			return true, err
		}
	}
	// A hold taken on from the marker alone has nothing new to say.
	if pc.hold(key, confighash.HoldFlapping, said) && learnt {
		pc.report.EventOn(v, corev1.EventTypeWarning, "FlappingHeld", fmt.Sprintf(
			"held at its current revision: %s; it rolls once, with the latest data, when no change has come for %s (or confighash resume)", said, pc.flapping.quiet))
		pc.report.alert(alert.Held, v, due, said)
	}
	pc.queue.AddAfter(key, until.Sub(now))
	return true, nil
}

// changesOf are the changes of the sources of a namespace, at the versions the cache
// holds; a source it does not hold is left out.
func changesOf(namespace string, refs []confighash.SourceRef, sources *sourcecache.Cache) []confighash.Trigger {
	var out []confighash.Trigger
	for _, ref := range refs {
		if d, ok := sources.Lookup(namespace, ref); ok {
			out = append(out, confighash.Trigger{SourceRef: ref, ResourceVersion: d.ResourceVersion})
		}
	}
	return out
}

// dataWriter returns the field manager of the object's last write of data: of the
// managedFields entries that own data, the latest.
func dataWriter(m metav1.Object) string {
	var who string
	var at time.Time
	for _, f := range m.GetManagedFields() {
		if f.FieldsV1 == nil || f.Time == nil {
			continue
		}
		if raw := f.FieldsV1.GetRawBytes(); !bytes.Contains(raw, []byte(`"f:data"`)) && !bytes.Contains(raw, []byte(`"f:binaryData"`)) {
			continue
		}
		if who == "" || f.Time.After(at) {
			who, at = f.Manager, f.Time.Time
		}
	}
	return who
}
