package confighash

import (
	"cmp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// SourceKind is the kind of object a workload can use: a ConfigMap, a Secret, or a
// Secrets Store CSI SecretProviderClass.
type SourceKind string

// The source kinds.
const (
	ConfigMap SourceKind = "ConfigMap"
	Secret    SourceKind = "Secret"
	// SecretProviderClass is mounted by a csi volume of SecretsStoreDriver. Its data are
	// the versions of its objects that the driver reports for the pods that mount it,
	// never their values.
	SecretProviderClass SourceKind = "SecretProviderClass"
)

// sourceKinds are the source kinds, in the order of SourceKinds' bits.
var sourceKinds = [...]SourceKind{ConfigMap, Secret, SecretProviderClass}

// SourceKinds is a set of source kinds. A bit set, not a map: the watcher keeps one
// in each workload's policy.
type SourceKinds uint8

// SourceKindsOf returns the set of the kinds.
func SourceKindsOf(kinds ...SourceKind) SourceKinds {
	var s SourceKinds
	for _, k := range kinds {
		s = s.With(k, true)
	}
	return s
}

func (k SourceKind) bit() SourceKinds {
	for i, kind := range sourceKinds {
		if kind == k {
			return 1 << i
		}
	}
	return 0
}

// Has reports whether the set holds the kind.
func (s SourceKinds) Has(k SourceKind) bool { return k.bit() != 0 && s&k.bit() != 0 }

// With returns the set with the kind added, on, or removed.
func (s SourceKinds) With(k SourceKind, on bool) SourceKinds {
	if on {
		return s | k.bit()
	}
	return s &^ k.bit()
}

// All returns the kinds of the set, in a fixed order.
func (s SourceKinds) All() []SourceKind {
	var out []SourceKind
	for _, k := range sourceKinds {
		if s.Has(k) {
			out = append(out, k)
		}
	}
	return out
}

func (s SourceKinds) String() string {
	names := make([]string, 0, len(sourceKinds))
	for _, k := range s.All() {
		names = append(names, string(k))
	}
	return "{" + strings.Join(names, ", ") + "}"
}

// SecretsStoreDriver is the Secrets Store CSI driver's name in a csi volume.
const SecretsStoreDriver = "secrets-store.csi.k8s.io"

// SourceRef names a ConfigMap or Secret in the workload's namespace.
type SourceRef struct {
	Kind SourceKind
	Name string
}

func (r SourceRef) String() string { return string(r.Kind) + "/" + r.Name }

// ListRefs names the sources for people: "ConfigMap/a, Secret/b".
func ListRefs(refs []SourceRef) string {
	names := make([]string, len(refs))
	for i, r := range refs {
		names[i] = r.String()
	}
	return strings.Join(names, ", ")
}

// Compare orders references by kind, then name.
func (r SourceRef) Compare(o SourceRef) int {
	return cmp.Or(cmp.Compare(r.Kind, o.Kind), cmp.Compare(r.Name, o.Name))
}

// Reference is every use a pod template makes of one source, merged.
type Reference struct {
	SourceRef
	// AllKeys is set when some use takes the whole object (envFrom, or a volume without
	// items); then Keys is empty.
	AllKeys bool
	// Keys are the keys the uses name, sorted, when no use takes the whole object.
	Keys []string
	// Optional is set when every use is optional: pods can start without the source.
	Optional bool
	// Named is set when the workload's annotations name the source (an include list):
	// it counts in search mode without a match annotation.
	Named bool
}

// Equal reports whether two references are the same.
func (r Reference) Equal(o Reference) bool {
	return r.SourceRef == o.SourceRef && r.AllKeys == o.AllKeys && slices.Equal(r.Keys, o.Keys) &&
		r.Optional == o.Optional && r.Named == o.Named
}

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
	if tmpl == nil {
		return c
	}
	spec := &tmpl.Spec
	for i := range spec.InitContainers {
		c.container(&spec.InitContainers[i], "init container")
	}
	for i := range spec.Containers {
		c.container(&spec.Containers[i], "container")
	}
	for i := range spec.Volumes {
		c.volume(spec.Volumes[i].Name, &spec.Volumes[i].VolumeSource)
	}
	return c
}

// collector merges uses per source, and describes them when uses is set.
type collector struct {
	refs map[SourceRef]*Reference
	uses map[SourceRef][]string
}

// usage says how a source is used, in parts: the admission path never joins them.
type usage struct {
	what, name           string // "env", "GREETING"; "volume", "files"; "envFrom", ""
	containerKind, owner string // "container", "app"; empty for a volume
}

func (u usage) String() string {
	s := u.what
	if u.name != "" {
		s += " " + u.name
	}
	if u.owner != "" {
		s += " of " + u.containerKind + " " + u.owner
	}
	return s
}

// container records a container's uses; kind says which kind of container it is.
func (c *collector) container(ctr *corev1.Container, kind string) {
	for _, from := range ctr.EnvFrom {
		if r := from.ConfigMapRef; r != nil {
			c.use(ConfigMap, r.Name, nil, r.Optional, usage{"envFrom", "", kind, ctr.Name})
		}
		if r := from.SecretRef; r != nil {
			c.use(Secret, r.Name, nil, r.Optional, usage{"envFrom", "", kind, ctr.Name})
		}
	}
	for _, env := range ctr.Env {
		if env.ValueFrom == nil {
			continue
		}
		if r := env.ValueFrom.ConfigMapKeyRef; r != nil {
			c.use(ConfigMap, r.Name, []string{r.Key}, r.Optional, usage{"env", env.Name, kind, ctr.Name})
		}
		if r := env.ValueFrom.SecretKeyRef; r != nil {
			c.use(Secret, r.Name, []string{r.Key}, r.Optional, usage{"env", env.Name, kind, ctr.Name})
		}
	}
}

func (c *collector) volume(name string, v *corev1.VolumeSource) {
	if s := v.ConfigMap; s != nil {
		c.use(ConfigMap, s.Name, itemKeys(s.Items), s.Optional, usage{what: "volume", name: name})
	}
	if s := v.Secret; s != nil {
		c.use(Secret, s.SecretName, itemKeys(s.Items), s.Optional, usage{what: "volume", name: name})
	}
	if s := v.CSI; s != nil && s.Driver == SecretsStoreDriver {
		c.use(SecretProviderClass, s.VolumeAttributes["secretProviderClass"], nil, nil, usage{what: "CSI volume", name: name})
	}
	if p := v.Projected; p != nil {
		for _, src := range p.Sources {
			if s := src.ConfigMap; s != nil {
				c.use(ConfigMap, s.Name, itemKeys(s.Items), s.Optional, usage{what: "projected volume", name: name})
			}
			if s := src.Secret; s != nil {
				c.use(Secret, s.Name, itemKeys(s.Items), s.Optional, usage{what: "projected volume", name: name})
			}
		}
	}
}

// itemKeys returns the keys a volume's items select; none means the whole object.
func itemKeys(items []corev1.KeyToPath) []string {
	if len(items) == 0 {
		return nil
	}
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	return keys
}

// use records one use; keys nil means the whole object.
func (c *collector) use(kind SourceKind, name string, keys []string, optional *bool, u usage) {
	if name == "" {
		return // invalid, and the API server rejects it; nothing to hash
	}
	ref := SourceRef{kind, name}
	opt := optional != nil && *optional
	if c.uses != nil {
		how := u.String()
		if keys != nil {
			how += " (keys " + strings.Join(keys, ", ") + ")"
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
	if keys == nil {
		r.AllKeys, r.Keys = true, nil
	} else if !r.AllKeys {
		r.Keys = append(r.Keys, keys...)
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
