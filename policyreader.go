package confighash

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

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

// entries returns the non-empty, trimmed entries of a comma-separated list, at most
// MaxSources of them: a longer list names too many sources.
func (r *policyReader) entries(annotation, value string) []string {
	var out []string
	for field := range strings.SplitSeq(value, ",") {
		entry := strings.TrimSpace(field)
		if entry == "" {
			continue
		}
		if len(out) == MaxSources {
			r.overBound(annotation, value, fmt.Sprintf("the list has more than the %d entries allowed", MaxSources))
			break
		}
		out = append(out, entry)
	}
	return out
}

// overBound records that the workload's annotations are over a bound on what they may
// make confighash read: it is then left as it is, never hashed from what fits
// (rule 9).
func (r *policyReader) overBound(annotation, value, reason string) {
	if r.over == "" {
		r.over = fmt.Sprintf("annotation %s: %s", annotation, reason)
	}
	r.problem(annotation, value, reason+"; the workload is left as it is")
}

// pattern compiles a name pattern, within the bounds on its length, its program and
// the number of a workload's patterns.
func (r *policyReader) pattern(annotation, entry string, kind SourceKind) (NamePattern, bool) {
	if len(entry) > maxPatternBytes {
		r.problem(annotation, entry, fmt.Sprintf("a pattern may be %d bytes long at most; ignored", maxPatternBytes))
		return NamePattern{}, false
	}
	if r.compiled == maxPatterns {
		r.overBound(annotation, entry, fmt.Sprintf("a workload may have %d name patterns at most", maxPatterns))
		return NamePattern{}, false
	}
	// Parsed first, and sized from the parse before it is compiled: parsing keeps
	// repetitions as counts, compiling expands them.
	text := "^(?:" + entry + ")$"
	re, err := syntax.Parse(text, syntax.Perl)
	if err != nil {
		r.problem(annotation, entry, "not a valid regular expression: "+err.Error())
		return NamePattern{}, false
	}
	size := programSize(re)
	if size > maxPatternSize {
		r.problem(annotation, entry, fmt.Sprintf("the pattern is too complex (over %d instructions compiled); ignored", maxPatternSize))
		return NamePattern{}, false
	}
	expr, err := regexp.Compile(text)
	if err != nil {
		r.problem(annotation, entry, "not a valid regular expression: "+err.Error())
		return NamePattern{}, false
	}
	r.compiled++
	return NamePattern{Kind: kind, Expr: expr, size: size}, true
}

// pacing reads the workload's AnnotationRolloutWindow, AnnotationWaveSize,
// AnnotationPin, AnnotationOnFailure, AnnotationCanary, AnnotationBake and
// AnnotationAnalysis.
func (r *policyReader) pacing() Pacing {
	var out Pacing
	if v, ok := r.get(AnnotationRolloutWindow); ok {
		ws, err := ParseWindows(v)
		if err != nil {
			r.problem(AnnotationRolloutWindow, v, strings.TrimPrefix(err.Error(), ErrBadWindow.Error()+" "))
		} else {
			out.Windows = ws
		}
	}
	out.WaveSize = readSetting(r.get, r.problem, AnnotationWaveSize, parseWaveSize, wantWaveSize)
	out.Pinning = readSetting(r.get, r.problem, AnnotationPin, parsePinning, wantPin)
	out.OnFailure = readSetting(r.get, r.problem, AnnotationOnFailure, parseOnFailure, wantOnFailure)
	out.Canary = readSetting(r.get, r.problem, AnnotationCanary, parseCanary, wantCanary)
	out.Bake = readSetting(r.get, r.problem, AnnotationBake, parseBake, wantBake)
	out.Analysis = readSetting(r.get, r.problem, AnnotationAnalysis, parseAnalysis, wantAnalysis)
	return out
}

// reloader reads Reloader's workload annotations into p, and reports whether they opt
// in to every kind of source.
func (r *policyReader) reloader(p *Policy, v Vocabulary) (all bool) {
	var auto, search bool
	for _, a := range reloaderWorkload {
		kinds := p.kinds
		if a.kind != "" {
			kinds = a.kind.bit()
		}
		if a.kind != "" && !p.kinds.Has(a.kind) {
			if value, ok := r.get(a.annotation); ok {
				r.problem(a.annotation, value, v.notCounted(a.kind))
			}
			continue
		}
		switch a.as {
		case optIn, searchIn:
			on, set := r.boolean(a.annotation)
			if set {
				p.decided |= kinds
			}
			switch {
			case a.as == searchIn:
				all, search = all || on, on
			case a.kind == "":
				all, auto, p.OptOut = all || on, on, p.OptOut || set && !on
			default:
				p.Discover = p.Discover.With(a.kind, on)
			}
		case named:
			refs, patterns := r.patterns(a.annotation, a.kind)
			p.Include = append(p.Include, refs...)
			p.Patterns = append(p.Patterns, patterns...)
		case excluded:
			p.Exclude = append(p.Exclude, r.names(a.annotation, a.kind)...)
		case pause:
			if p.PausePeriod == 0 {
				p.PausePeriod = r.duration(a.annotation)
			}
		case strategy:
			p.RolloutRestart = r.rolloutStrategy(a.annotation)
		}
	}
	// As in Reloader, auto wins over search: every used source counts.
	p.Search = p.Search || search && !auto
	return all
}

// rolloutStrategy reads ReloaderRolloutStrategy: whether an Argo Rollout's pods are
// restarted rather than rolled.
func (r *policyReader) rolloutStrategy(name string) bool {
	v, ok := r.get(name)
	switch s := strings.ToLower(strings.TrimSpace(v)); {
	case !ok || s == "rollout":
		return false
	case s == "restart":
		return true
	}
	r.problem(name, v, `want "restart" or "rollout"; it rolls through its pod template`)
	return false
}

// restart reads AnnotationRestart, from the pod template alone: the pods must carry
// it for the webhook to give them the restarter.
func (r *policyReader) restart() RestartMode {
	v, ok := r.template[AnnotationRestart]
	if said, onMetadata := r.metadata[AnnotationRestart]; onMetadata && (!ok || said != v) {
		r.problem(AnnotationRestart, said, "read on the pod template, whose pods carry it: put it there")
	}
	if !ok {
		return RestartRollout
	}
	mode, reload, err := ParseRestartMode(v)
	if err != nil {
		r.problem(AnnotationRestart, v, strings.TrimPrefix(err.Error(), fmt.Sprintf("restart %q: ", strings.TrimSpace(v))))
	}
	r.reload = reload
	return mode
}
