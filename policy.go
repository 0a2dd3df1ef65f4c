package confighash

import (
	"regexp"
	"slices"
	"time"
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
	// RolloutRestart has an Argo Rollout's pods restarted for a change of its data
	// (spec.restartAt), its pod template left as it is (ReloaderRolloutStrategy
	// "restart"). Of a Rollout alone: State.Policy never has it for another kind.
	RolloutRestart bool
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
	return p.OptOut == q.OptOut && p.Search == q.Search && p.Restart == q.Restart && p.Reload == q.Reload && p.PausePeriod == q.PausePeriod && p.RolloutRestart == q.RolloutRestart && p.Pacing.Equal(q.Pacing) &&
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
