package confighash

import (
	"cmp"
	"slices"
	"strconv"
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

// use is one place a pod spec names a source.
type use struct {
	kind SourceKind
	// name points at the name in the pod spec.
	name *string
	// keys are the keys it takes, nil for the whole object.
	keys     []string
	optional *bool
	how      usage
	at       path
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

// path is where a use's name is in the pod spec, in parts: joined only when a patch
// needs it. j is -1 when the path has no second index.
type path struct {
	list  string // "containers", "initContainers", "volumes"
	i     int
	inner string // "envFrom", "env", "projected/sources"; "" for a volume's own source
	j     int
	field string // "configMapRef/name", "valueFrom/secretKeyRef/name", "secret/secretName"
}

// String returns the JSON pointer of the name within the pod spec.
func (p path) String() string {
	s := "/" + p.list + "/" + strconv.Itoa(p.i)
	if p.inner != "" {
		s += "/" + p.inner + "/" + strconv.Itoa(p.j)
	}
	return s + "/" + p.field
}

// eachUse calls f with every place the pod spec names a ConfigMap, a Secret or a
// SecretProviderClass: containers, init containers, volumes and projected volumes.
func eachUse(spec *corev1.PodSpec, f func(use)) {
	for i := range spec.InitContainers {
		containerUses(&spec.InitContainers[i], "init container", "initContainers", i, f)
	}
	for i := range spec.Containers {
		containerUses(&spec.Containers[i], "container", "containers", i, f)
	}
	for i := range spec.Volumes {
		volumeUses(&spec.Volumes[i], i, f)
	}
}

// containerUses calls f with a container's uses; kind says which kind of container it
// is, list and i where it is.
func containerUses(ctr *corev1.Container, kind, list string, i int, f func(use)) {
	for j := range ctr.EnvFrom {
		from := &ctr.EnvFrom[j]
		if r := from.ConfigMapRef; r != nil {
			f(use{ConfigMap, &r.Name, nil, r.Optional, usage{"envFrom", "", kind, ctr.Name}, path{list, i, "envFrom", j, "configMapRef/name"}})
		}
		if r := from.SecretRef; r != nil {
			f(use{Secret, &r.Name, nil, r.Optional, usage{"envFrom", "", kind, ctr.Name}, path{list, i, "envFrom", j, "secretRef/name"}})
		}
	}
	for j := range ctr.Env {
		env := &ctr.Env[j]
		if env.ValueFrom == nil {
			continue
		}
		if r := env.ValueFrom.ConfigMapKeyRef; r != nil {
			f(use{ConfigMap, &r.Name, []string{r.Key}, r.Optional, usage{"env", env.Name, kind, ctr.Name}, path{list, i, "env", j, "valueFrom/configMapKeyRef/name"}})
		}
		if r := env.ValueFrom.SecretKeyRef; r != nil {
			f(use{Secret, &r.Name, []string{r.Key}, r.Optional, usage{"env", env.Name, kind, ctr.Name}, path{list, i, "env", j, "valueFrom/secretKeyRef/name"}})
		}
	}
}

// volumeUses calls f with the uses of the volume at index i.
func volumeUses(vol *corev1.Volume, i int, f func(use)) {
	v := &vol.VolumeSource
	if s := v.ConfigMap; s != nil {
		f(use{ConfigMap, &s.Name, itemKeys(s.Items), s.Optional, usage{what: "volume", name: vol.Name}, path{"volumes", i, "", -1, "configMap/name"}})
	}
	if s := v.Secret; s != nil {
		f(use{Secret, &s.SecretName, itemKeys(s.Items), s.Optional, usage{what: "volume", name: vol.Name}, path{"volumes", i, "", -1, "secret/secretName"}})
	}
	if s := v.CSI; s != nil && s.Driver == SecretsStoreDriver {
		name := s.VolumeAttributes["secretProviderClass"]
		f(use{SecretProviderClass, &name, nil, nil, usage{what: "CSI volume", name: vol.Name}, path{"volumes", i, "", -1, "csi/volumeAttributes/secretProviderClass"}})
	}
	if p := v.Projected; p != nil {
		for j := range p.Sources {
			src := &p.Sources[j]
			if s := src.ConfigMap; s != nil {
				f(use{ConfigMap, &s.Name, itemKeys(s.Items), s.Optional, usage{what: "projected volume", name: vol.Name}, path{"volumes", i, "projected/sources", j, "configMap/name"}})
			}
			if s := src.Secret; s != nil {
				f(use{Secret, &s.Name, itemKeys(s.Items), s.Optional, usage{what: "projected volume", name: vol.Name}, path{"volumes", i, "projected/sources", j, "secret/name"}})
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
