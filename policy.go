package confighash

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Policy is what a workload's annotations say about which sources count.
type Policy struct {
	// Inject is set by AnnotationInject.
	Inject bool
	// Only restricts discovery in the pod template to one kind; empty allows both.
	Only SourceKind
	// Include lists sources to hash even if the pod template does not use them.
	Include []SourceRef
	// Exclude lists sources never to hash.
	Exclude map[SourceRef]bool
	// Search makes only sources that carry AnnotationMatch count.
	Search bool
}

// Enabled reports whether the workload opted in, by AnnotationInject or by naming
// sources to include.
func (p Policy) Enabled() bool { return p.Inject || len(p.Include) > 0 }

// Problem is a bad annotation value. The annotation is ignored; every other setting
// still applies. Adapters surface it as an admission warning or an Event.
type Problem struct {
	Annotation string
	Value      string
	Reason     string
}

func (p Problem) Error() string {
	value := p.Value
	if len(value) > 64 {
		value = value[:64] + "..."
	}
	return fmt.Sprintf("annotation %s=%q: %s", p.Annotation, value, p.Reason)
}

// ParsePolicy reads the policy from a workload's annotations. Each annotation is read
// from the workload's metadata, or else from its pod template. Bad values are returned
// as problems and ignored, one by one: a bad list entry does not drop the valid ones.
func ParsePolicy(metadata, template map[string]string) (Policy, []Problem) {
	p := Policy{Exclude: map[SourceRef]bool{}}
	var problems []Problem
	get := func(name string) (string, bool) {
		if v, ok := metadata[name]; ok {
			return v, true
		}
		v, ok := template[name]
		return v, ok
	}
	boolean := func(name string) bool {
		v, ok := get(name)
		if !ok {
			return false
		}
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			problems = append(problems, Problem{name, v, `want "true" or "false"`})
		}
		return b
	}
	names := func(name string, kind SourceKind) []SourceRef {
		v, ok := get(name)
		if !ok {
			return nil
		}
		refs, bad := parseNames(name, v, kind)
		problems = append(problems, bad...)
		return refs
	}

	p.Inject = boolean(AnnotationInject)
	p.Search = boolean(AnnotationSearch)
	if v, ok := get(AnnotationOnly); ok {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "configmaps":
			p.Only = ConfigMap
		case "secrets":
			p.Only = Secret
		default:
			problems = append(problems, Problem{AnnotationOnly, v, `want "configmaps" or "secrets"; both kinds count`})
		}
	}
	p.Include = append(names(AnnotationIncludeConfigMaps, ConfigMap), names(AnnotationIncludeSecrets, Secret)...)
	for _, r := range append(names(AnnotationExcludeConfigMaps, ConfigMap), names(AnnotationExcludeSecrets, Secret)...) {
		p.Exclude[r] = true
	}
	return p, problems
}

// parseNames parses a comma-separated list of object names of one kind.
func parseNames(annotation, value string, kind SourceKind) ([]SourceRef, []Problem) {
	var refs []SourceRef
	var problems []Problem
	for _, field := range strings.Split(value, ",") {
		name := strings.TrimSpace(field)
		switch {
		case name == "":
			continue
		case strings.Contains(name, "/"):
			problems = append(problems, Problem{annotation, name, "references are same-namespace only; a namespace/name is never read"})
		case len(validation.IsDNS1123Subdomain(name)) > 0:
			problems = append(problems, Problem{annotation, name, "not a valid object name"})
		default:
			refs = append(refs, SourceRef{kind, name})
		}
	}
	if len(refs) == 0 && len(problems) == 0 {
		problems = append(problems, Problem{annotation, value, "empty list"})
	}
	return refs, problems
}

// Candidates returns the sources that may count for the workload: the pod template's
// references of the kinds Only allows, plus the included sources (whole objects,
// optional unless the pod template requires them), minus the excluded ones. Whether a
// candidate counts also depends on its own annotations: see Counts.
func (p Policy) Candidates(refs []Reference) []Reference {
	out := make([]Reference, 0, len(refs)+len(p.Include))
	for _, r := range refs {
		if (p.Only == "" || p.Only == r.Kind) && !p.Exclude[r.SourceRef] {
			out = append(out, r)
		}
	}
	for _, inc := range p.Include {
		if p.Exclude[inc] {
			continue
		}
		i, found := slices.BinarySearchFunc(out, inc, func(r Reference, t SourceRef) int { return r.compare(t) })
		if found {
			out[i].AllKeys, out[i].Keys = true, nil
			continue
		}
		out = slices.Insert(out, i, Reference{SourceRef: inc, AllKeys: true, Optional: true})
	}
	return out
}

// Counts reports whether an existing source counts: never when it carries
// AnnotationIgnore, and in search mode only when it carries AnnotationMatch.
func (p Policy) Counts(src Source) bool {
	return !src.Ignore && (!p.Search || src.Match)
}

func isTrue(v string) bool {
	b, _ := strconv.ParseBool(strings.TrimSpace(v))
	return b
}
