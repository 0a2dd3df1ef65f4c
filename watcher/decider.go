package watcher

import (
	"errors"
	"slices"
	"sync"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/namespaces"
	"github.com/confighash/confighash/sourcecache"
)

// decider decides for a workload, or a pod restarted in place, from the watcher's
// caches, as the webhook decides under this watcher: the one decision
// (confighash.Decide) with the install's pacing and the namespace's, and what changed
// since a later release wrote a workload's record. It tells bad settings it reads.
type decider struct {
	key       confighash.Key
	pacing    confighash.Pacing
	lifecycle confighash.Lifecycle
	inPlace   bool
	gate      namespaces.Gate
	sources   *sourcecache.Cache
	later     *laterRecords
	report    *reporter
}

// decide decides for the workload from the cache, as the webhook would under this
// watcher, which reads the newest form.
func (d *decider) decide(v *view, pods confighash.Pods) (confighash.Decision, error) {
	return d.decideWriting(v, pods, confighash.FormNamespaced)
}

func (d *decider) decideWriting(v *view, pods confighash.Pods, writes confighash.Form) (confighash.Decision, error) {
	// Each bad value is ignored on its own, as the webhook ignores it.
	pacing, err := d.gate.Pacing(v.Namespace)
	d.report.badSetting(namespaceRef(v.Namespace), errText(err))
	return confighash.Decide(confighash.Input{Key: d.key, Namespace: v.Namespace, State: v.State, Mode: d.gate.Mode(v.Namespace), Pods: pods,
		Pacing: pacing.Over(d.pacing), Writes: writes, Touched: d.later.of(v), InPlace: d.inPlace, Lifecycle: d.lifecycle}, cachedSources{d.sources, v.Namespace})
}

// failurePacing is the workload's pacing for a failed rollout of a change of the
// source: its own AnnotationOnFailure, else the source's, else its namespace's and the
// install's.
func (d *decider) failurePacing(v *view, source confighash.SourceRef) confighash.Pacing {
	var fromSource confighash.Pacing
	if s, ok := d.sources.Lookup(v.Namespace, source); ok {
		fromSource.OnFailure = s.Source.OnFailure
	}
	namespace, _ := d.gate.Pacing(v.Namespace) // told by the workloads' decisions
	return v.Policy.Pacing.Over(fromSource).Over(namespace.Over(d.pacing))
}

// carried reports whether the workload as admitted carries the decision made for it
// before the touch, in the form the webhook wrote: one that reads the newer form
// writes it at a due rollout, one of an earlier release or under a watcher of one
// does not, and either converges the workload.
func (d *decider) carried(dec confighash.Decision, admitted *view) bool {
	if dec.Carried(admitted.State) {
		return true
	}
	if admitted.Record == nil || admitted.RecordErr != nil || admitted.Form == dec.Form {
		return false
	}
	again, err := d.decideWriting(admitted, confighash.Pods{}, admitted.Form)
	return err == nil && again.Converged
}

// restartOf decides the restart token of a pod restarted in place.
func (d *decider) restartOf(p *podView) (confighash.Restart, error) {
	pacing, _ := d.gate.Pacing(p.Namespace) // told by the workloads' decisions
	return confighash.RestartOf(confighash.Input{Key: d.key, Namespace: p.Namespace, State: p.State, Mode: d.gate.Mode(p.Namespace),
		Pacing: pacing.Over(d.pacing)}, cachedSources{d.sources, p.Namespace})
}

// sourceChanged notes a change of a source the workload may use.
func (d *decider) sourceChanged(v *view, ref confighash.SourceRef) { d.later.sourceChanged(v, ref) }

// forget drops what is kept of a workload no longer acted on.
func (d *decider) forget(key workloadKey) { d.later.forget(key) }

// tellSources tells the sources a workload uses whose settings are bad.
func (d *decider) tellSources(ns string, used []confighash.Observation) {
	for _, o := range used {
		if s, ok := d.sources.Lookup(ns, o.SourceRef); ok && o.Present {
			d.report.badSetting(*sourceIn{ns, o.SourceRef}.object(), s.Source.Bad)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// cachedSources are the sources of one namespace as the watcher's cache holds them.
type cachedSources struct {
	cache     *sourcecache.Cache
	namespace string
}

func (c cachedSources) Names(kind confighash.SourceKind) ([]string, error) {
	return c.cache.Names(c.namespace, kind), nil
}

func (c cachedSources) Read(refs []confighash.SourceRef) (map[confighash.SourceRef]confighash.Source, error) {
	out := make(map[confighash.SourceRef]confighash.Source, len(refs))
	for _, ref := range refs {
		if d, ok := c.cache.Lookup(c.namespace, ref); ok {
			out[ref] = d.Source
		}
	}
	return out, nil
}

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
