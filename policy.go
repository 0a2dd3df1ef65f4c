package confighash

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Policy is what a workload's annotations say about which sources count.
type Policy struct {
	// OptOut is set by AnnotationInject or ReloaderAuto "false": it wins over every
	// opt-in.
	OptOut bool
	// Discover holds the source kinds whose uses in the pod template count: both for
	// AnnotationInject, an include list, ReloaderAuto or ReloaderSearch; one for a
	// typed Reloader auto; narrowed by AnnotationOnly.
	Discover SourceKinds
	// Include lists sources to hash even if the pod template does not use them.
	Include []SourceRef
	// Patterns include the existing sources whose whole name matches one of them.
	Patterns []NamePattern
	// Exclude lists sources never to hash, sorted.
	Exclude []SourceRef
	// Search makes only the discovered sources that carry a match annotation count.
	Search bool
	// PausePeriod holds further touches of the workload for this long after one, so
	// that the changes made meanwhile roll it once.
	PausePeriod time.Duration
	// Pacing is how the workload's changes roll, as its own annotations say; its
	// namespace and the install's flags say the rest (Pacing.Over).
	Pacing Pacing
	// Restart is how a change reaches its pods (AnnotationRestart): pod by pod, it
	// also opts the workload in, as AnnotationInject does; Reload, how its app reloads.
	Restart RestartMode
	Reload  Reload

	reloader bool // read the sources' Reloader annotations too
	// kinds are the source kinds that can count: see Vocabulary.kinds.
	kinds SourceKinds
	// decided holds the kinds for which an annotation says whether used sources count.
	decided SourceKinds
	// only is AnnotationOnly's kind, if set.
	only SourceKind
	// over says which bound on what annotations may make confighash read they are
	// over, if any: the workload is then left as it is (see policyReader.overBound).
	over string
}

// ForEveryWorkload returns the policy in a namespace that opts every workload in (see
// InjectionEvery): a workload whose annotations do not say which of its used sources
// count has them all count, as with AnnotationInject. One that opts out stays out.
func (p Policy) ForEveryWorkload() Policy {
	if p.OptOut {
		return p
	}
	for _, kind := range p.kinds.All() {
		if !p.decided.Has(kind) && (p.only == "" || p.only == kind) {
			p.Discover = p.Discover.With(kind, true)
		}
	}
	return p
}

// NamePattern is a regular expression that must match a source's whole name.
type NamePattern struct {
	Kind SourceKind
	Expr *regexp.Regexp
	// size bounds the instructions of its compiled program: what matching one byte
	// of a name may cost.
	size int
}

// Matches reports whether the pattern matches the source.
func (p NamePattern) Matches(ref SourceRef) bool {
	return p.Kind == ref.Kind && p.Expr.MatchString(ref.Name)
}

// Equal reports whether two policies are the same, and so make the same decisions.
func (p Policy) Equal(q Policy) bool {
	return p.OptOut == q.OptOut && p.Search == q.Search && p.Restart == q.Restart && p.Reload == q.Reload && p.PausePeriod == q.PausePeriod && p.Pacing.Equal(q.Pacing) &&
		p.reloader == q.reloader && p.only == q.only && p.kinds == q.kinds && p.over == q.over &&
		p.Discover == q.Discover && p.decided == q.decided && slices.Equal(p.Exclude, q.Exclude) &&
		slices.Equal(p.Include, q.Include) &&
		slices.EqualFunc(p.Patterns, q.Patterns, func(a, b NamePattern) bool { return a.Kind == b.Kind && a.Expr.String() == b.Expr.String() })
}

// excludes reports whether the source is never to be hashed.
func (p Policy) excludes(ref SourceRef) bool {
	_, found := slices.BinarySearchFunc(p.Exclude, ref, SourceRef.Compare)
	return found
}

// sortedRefs sorts the references and drops repeats; nil when there are none.
func sortedRefs(refs []SourceRef) []SourceRef {
	if len(refs) == 0 {
		return nil
	}
	slices.SortFunc(refs, SourceRef.Compare)
	return slices.Clip(slices.Compact(refs))
}

// Enabled reports whether the workload opted in and did not opt out.
func (p Policy) Enabled() bool {
	return !p.OptOut && (p.Discover != 0 || len(p.Include) > 0 || len(p.Patterns) > 0)
}

// Problem is a bad annotation value. The annotation is ignored; every other setting
// still applies. Adapters surface it as an admission warning or an Event.
type Problem struct {
	Annotation string
	Value      string
	Reason     string
}

func (p Problem) Error() string {
	value := p.Value
	if len(value) > problemValueBytes {
		value = value[:problemValueBytes] + "..."
	}
	return fmt.Sprintf("annotation %s=%q: %s", p.Annotation, value, p.Reason)
}

// problemValueBytes is how much of a bad value a problem quotes.
const problemValueBytes = 64

// ParsePolicy reads the policy from a workload's annotations. Each annotation is read
// from the workload's metadata, or else from its pod template. Bad values are returned
// as problems and ignored, one by one: a bad list entry does not drop the valid ones.
func (v Vocabulary) ParsePolicy(metadata, template map[string]string) (Policy, []Problem) {
	r := policyReader{metadata: metadata, template: template}
	p := Policy{reloader: v.Reloader, kinds: v.kinds()}

	inject, injectSet := r.boolean(AnnotationInject)
	includeCM := r.names(AnnotationIncludeConfigMaps, ConfigMap)
	includeSecrets := r.names(AnnotationIncludeSecrets, Secret)
	p.Include = append(includeCM, includeSecrets...)
	p.Restart = r.restart()
	p.Reload = r.reload
	all := inject || len(p.Include) > 0 || p.Restart.PodByPod()
	p.OptOut = injectSet && !inject
	search, searchSet := r.boolean(AnnotationSearch)
	p.Search = search
	if injectSet || searchSet {
		p.decided = p.kinds
	}
	p.Exclude = append(r.names(AnnotationExcludeConfigMaps, ConfigMap), r.names(AnnotationExcludeSecrets, Secret)...)
	p.PausePeriod = r.duration(AnnotationPausePeriod)
	p.Pacing = r.pacing()

	if v.Reloader {
		all = r.reloader(&p, v) || all
	}
	if all {
		p.Discover = p.kinds
	}
	if only, ok := r.only(); ok {
		p.only = only
		p.Discover &= only.bit()
	}
	p.Include = sortedRefs(p.Include)
	p.Exclude = sortedRefs(p.Exclude)
	p.over = r.over
	for _, m := range []map[string]string{metadata, template} {
		for _, u := range UnknownKeys(m, OnWorkload, v.Reloader) {
			r.problem(u.Annotation, u.Value, u.Reason)
		}
	}
	return p, r.problems
}

// policyReader reads a workload's annotations and collects their problems.
type policyReader struct {
	metadata, template map[string]string
	problems           []Problem
	// read counts the bytes of the values read so far; compiled, the name patterns.
	read, compiled int
	// over is the first bound the annotations are over, if any.
	over string
	// reload is how AnnotationRestart says the app reloads, if it does.
	reload Reload
}

func (r *policyReader) get(name string) (string, bool) {
	v, ok := r.metadata[name]
	if !ok {
		if v, ok = r.template[name]; !ok {
			return "", false
		}
	}
	switch {
	case len(v) > maxValueBytes:
		r.overBound(name, v, fmt.Sprintf("longer than the %d bytes allowed", maxValueBytes))
		return "", false
	case r.read+len(v) > maxPolicyBytes:
		r.overBound(name, v, fmt.Sprintf("confighash's annotations on the workload hold more than the %d bytes allowed in all", maxPolicyBytes))
		return "", false
	}
	r.read += len(v)
	return v, true
}

// maxProblems is how many problems are reported one by one; the rest are counted.
const maxProblems = 10

func (r *policyReader) problem(annotation, value, reason string) {
	switch n := len(r.problems); {
	case n < maxProblems:
		// A copy of its start: a problem kept in a cache must not keep a whole value alive.
		if len(value) > problemValueBytes {
			value = strings.Clone(value[:problemValueBytes]) + "..."
		}
		r.problems = append(r.problems, Problem{annotation, value, reason})
	case n == maxProblems:
		r.problems = append(r.problems, Problem{annotation, "", "and more problems, not listed"})
	}
}

// boolean returns the annotation's value, and whether it is set to a valid one.
func (r *policyReader) boolean(name string) (value, set bool) {
	v, ok := r.get(name)
	if !ok {
		return false, false
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		r.problem(name, v, `want "true" or "false"`)
		return false, false
	}
	return b, true
}

func (r *policyReader) only() (SourceKind, bool) {
	v, ok := r.get(AnnotationOnly)
	if !ok {
		return "", false
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "configmaps":
		return ConfigMap, true
	case "secrets":
		return Secret, true
	}
	r.problem(AnnotationOnly, v, `want "configmaps" or "secrets"; both kinds count`)
	return "", false
}

func (r *policyReader) duration(name string) time.Duration {
	v, ok := r.get(name)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 {
		r.problem(name, v, `want a duration such as "5m"`)
		return 0
	}
	return d
}

// names parses a comma-separated list of object names of one kind.
func (r *policyReader) names(annotation string, kind SourceKind) []SourceRef {
	value, ok := r.get(annotation)
	if !ok {
		return nil
	}
	var refs []SourceRef
	bad := false
	for _, name := range r.entries(annotation, value) {
		switch {
		case strings.Contains(name, "/"):
			r.problem(annotation, name, "references are same-namespace only; a namespace/name is never read")
		case len(validation.IsDNS1123Subdomain(name)) > 0:
			r.problem(annotation, name, "not a valid object name")
		default:
			refs = append(refs, SourceRef{kind, name})
			continue
		}
		bad = true
	}
	if len(refs) == 0 && !bad {
		r.problem(annotation, value, "empty list")
	}
	return refs
}

// patterns parses a Reloader list, whose entries are regular expressions anchored at
// both ends. An entry without any regular expression syntax is a plain name: the
// common case, that needs no listing of the namespace.
func (r *policyReader) patterns(annotation string, kind SourceKind) ([]SourceRef, []NamePattern) {
	value, ok := r.get(annotation)
	if !ok {
		return nil, nil
	}
	var refs []SourceRef
	var patterns []NamePattern
	for _, entry := range r.entries(annotation, value) {
		switch {
		case regexp.QuoteMeta(entry) == entry && strings.Contains(entry, "/"):
			r.problem(annotation, entry, "references are same-namespace only; a namespace/name is never read")
		case regexp.QuoteMeta(entry) == entry && len(validation.IsDNS1123Subdomain(entry)) > 0:
			r.problem(annotation, entry, "not a valid object name")
		case regexp.QuoteMeta(entry) == entry:
			refs = append(refs, SourceRef{kind, entry})
		default:
			if pattern, ok := r.pattern(annotation, entry, kind); ok {
				patterns = append(patterns, pattern)
			}
		}
	}
	return refs, patterns
}

// Candidates returns the sources that may count for the workload: the pod template's
// references of the kinds it discovers, plus the included sources (whole objects,
// optional unless the pod template requires them), minus the excluded ones. names are
// the sources the patterns are matched against: those that exist in the namespace,
// and those in the workload's record, so that a deleted one stays as absent; nil when
// the policy has no patterns. Whether a candidate counts also depends on its own
// annotations: see observe.
func (p Policy) Candidates(refs []Reference, names []SourceRef) []Reference {
	out := make([]Reference, 0, len(refs)+len(p.Include))
	for _, r := range refs {
		if p.Discover.Has(r.Kind) && !p.excludes(r.SourceRef) {
			out = append(out, r)
		}
	}
	include := func(inc SourceRef) {
		if p.excludes(inc) {
			return
		}
		i, found := slices.BinarySearchFunc(out, inc, func(r Reference, t SourceRef) int { return r.Compare(t) })
		switch {
		case found && out[i].Named:
		case found:
			out[i].AllKeys, out[i].Keys, out[i].Named = true, nil, true
		default:
			// Optional unless the pod template requires it.
			optional := true
			if j, used := slices.BinarySearchFunc(refs, inc, func(r Reference, t SourceRef) int { return r.Compare(t) }); used {
				optional = refs[j].Optional
			}
			out = slices.Insert(out, i, Reference{SourceRef: inc, AllKeys: true, Optional: optional, Named: true})
		}
	}
	for _, inc := range p.Include {
		include(inc)
	}
	for _, name := range names {
		if slices.ContainsFunc(p.Patterns, func(pat NamePattern) bool { return pat.Matches(name) }) {
			include(name)
		}
	}
	return out
}

// counts reports whether an existing source counts for the workload: never when it
// is ignored, and in search mode only when it matches or the workload names it.
func (p Policy) counts(ref Reference, src Source) bool {
	ignore, match := src.Ignore, src.Match
	if p.reloader {
		ignore, match = ignore || src.ReloaderIgnore, match || src.ReloaderMatch
	}
	return !ignore && (!p.Search || match || ref.Named)
}

func isTrue(v string) bool {
	b, _ := strconv.ParseBool(strings.TrimSpace(v))
	return b
}
