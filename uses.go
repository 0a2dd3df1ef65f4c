package confighash

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// References returns every ConfigMap and Secret the pod template uses, from containers,
// init containers, volumes and projected volumes, sorted by kind and name.
// imagePullSecrets and service-account tokens do not count: a change to them does not
// change what a running pod sees. A Secrets Store CSI volume uses its
// SecretProviderClass, all of it.
func References(tmpl *corev1.PodTemplateSpec) []Reference {
	if tmpl == nil {
		return nil
	}
	return collect(tmpl, false).result()
}

// Uses describes every use the pod template makes of each source, for people: "env
// GREETING of container app (keys greeting)", "volume files (keys a.conf)".
func Uses(tmpl *corev1.PodTemplateSpec) map[SourceRef][]string {
	return collect(tmpl, true).uses
}

// collect gathers the uses; with describe, also their descriptions, which the
// admission path does not need.
func collect(tmpl *corev1.PodTemplateSpec, describe bool) *collector {
	c := &collector{refs: map[SourceRef]*Reference{}}
	if describe {
		c.uses = map[SourceRef][]string{}
	}
	if tmpl != nil {
		c.pins = TemplatePins(tmpl)
		eachUse(&tmpl.Spec, c.use)
	}
	return c
}

// collector merges uses per source, and describes them when uses is set. A name a
// pinned template gives a snapshot counts as the source's.
type collector struct {
	refs map[SourceRef]*Reference
	uses map[SourceRef][]string
	pins Pins
}

// use records one use.
func (c *collector) use(u use) {
	if *u.name == "" {
		return // invalid, and the API server rejects it; nothing to hash
	}
	ref := SourceRef{u.kind, *u.name}
	if src, ok := c.pins.source(u.kind, *u.name); ok {
		ref = src
	}
	opt := u.optional != nil && *u.optional
	if c.uses != nil {
		how := u.how.String()
		if u.keys != nil {
			how += " (keys " + strings.Join(u.keys, ", ") + ")"
		}
		if opt {
			how += ", optional"
		}
		c.uses[ref] = append(c.uses[ref], how)
	}
	r, ok := c.refs[ref]
	if !ok {
		r = &Reference{SourceRef: ref, Optional: true}
		c.refs[ref] = r
	}
	r.Optional = r.Optional && opt
	if u.keys == nil {
		r.AllKeys, r.Keys = true, nil
	} else if !r.AllKeys {
		r.Keys = append(r.Keys, u.keys...)
	}
}

func (c *collector) result() []Reference {
	refs := make([]Reference, 0, len(c.refs))
	for _, r := range c.refs {
		slices.Sort(r.Keys)
		r.Keys = slices.Compact(r.Keys)
		refs = append(refs, *r)
	}
	slices.SortFunc(refs, func(a, b Reference) int { return a.Compare(b.SourceRef) })
	return refs
}
