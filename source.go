package confighash

import (
	"cmp"
	"crypto/sha256"
	"slices"
	"strconv"
	"strings"
	"time"
	"unique"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
)

// Sum is the SHA-256 of one value of a ConfigMap or Secret.
type Sum [sha256.Size]byte

// KeySum is the digest of one key's value.
type KeySum struct {
	Key string
	Sum Sum
}

// Sums are a source's digests, sorted by key. A slice, not a map: caches keep one per
// source, and a map of a few keys costs several times its entries.
type Sums []KeySum

// Get returns the digest of the key's value, if the source has the key.
func (s Sums) Get(key string) (Sum, bool) {
	i, ok := slices.BinarySearchFunc(s, key, func(e KeySum, k string) int { return strings.Compare(e.Key, k) })
	if !ok {
		return Sum{}, false
	}
	return s[i].Sum, true
}

// SumsOf returns the digests of the values of m, each digested by sum. Keys are
// interned: caches keep thousands of "config.yaml" and "tls.crt".
func SumsOf[V any](m map[string]V, sum func(V) Sum) Sums {
	if len(m) == 0 {
		return nil
	}
	out := make(Sums, 0, len(m))
	for k, v := range m {
		out = append(out, KeySum{unique.Make(k).Value(), sum(v)})
	}
	slices.SortFunc(out, func(a, b KeySum) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// Source is what confighash keeps of a ConfigMap or Secret: whether it exists, the
// annotations that decide whether it counts, and a digest per key. Never a value.
type Source struct {
	SourceRef
	// Present is set when the object exists.
	Present bool
	// Ignore and Match are its AnnotationIgnore and AnnotationMatch; ReloaderIgnore
	// and ReloaderMatch, Reloader's, which count when the policy reads Reloader's.
	Ignore, Match                 bool
	ReloaderIgnore, ReloaderMatch bool
	// WaveSize is its AnnotationWaveSize: above zero, its changes roll in waves of at
	// most this many workloads. A value that is not a number is 0.
	WaveSize int
	// OnFailure is its AnnotationOnFailure, for the users whose own is unset; a value
	// that is neither is unset.
	OnFailure OnFailure
	// Canary, Bake and Analysis are its AnnotationCanary, AnnotationBake and
	// AnnotationAnalysis, for all its users (Paces); a bad value is unset.
	Canary   Canary
	Bake     time.Duration
	Analysis Analysis
	// Whole is set for a Secret of a type other than Opaque: its snapshot copies it
	// whole, since a type may require keys a workload does not use (kubernetes.io/tls:
	// tls.key).
	Whole bool
	// Bad says which of its confighash annotations are bad and ignored, "" for none:
	// the watcher tells its owner.
	Bad string
	// Data holds ConfigMap data and Secret data; BinaryData holds ConfigMap binaryData.
	Data       Sums
	BinaryData Sums
	// TooLarge is set for one with more than MaxSourceKeys keys, whose digests are not
	// kept: its users are left unhashed (ErrSourceTooLarge).
	TooLarge bool
}

// MaxSourceKeys bounds the keys of a source whose digests are kept: each costs both
// components' caches a digest of 48 bytes, and a tenant's ConfigMap of 1 MiB may hold
// 50,000 keys. 10,000 keys, about 470 KiB of digests, is room for the largest in use.
const MaxSourceKeys = 10_000

// Equal reports whether two views are the same: the same data, existence and
// counting annotations.
func (s Source) Equal(o Source) bool {
	return s.SourceRef == o.SourceRef && s.Present == o.Present &&
		s.Ignore == o.Ignore && s.Match == o.Match && s.ReloaderIgnore == o.ReloaderIgnore && s.ReloaderMatch == o.ReloaderMatch && s.WaveSize == o.WaveSize && s.OnFailure == o.OnFailure && s.Canary == o.Canary && s.Bake == o.Bake && s.Analysis == o.Analysis && s.Whole == o.Whole && s.Bad == o.Bad &&
		s.TooLarge == o.TooLarge &&
		slices.Equal(s.Data, o.Data) && slices.Equal(s.BinaryData, o.BinaryData)
}

// SourceOfConfigMap returns the digest-only view of a ConfigMap.
func SourceOfConfigMap(cm *corev1.ConfigMap) Source {
	s := sourceMeta(ConfigMap, cm.Name, cm.Annotations)
	if s.TooLarge = len(cm.Data)+len(cm.BinaryData) > MaxSourceKeys; s.TooLarge {
		return s
	}
	// Hash the strings' bytes in place: a copy would double the allocation of a live
	// read of a large ConfigMap. sha256 only reads them.
	s.Data = SumsOf(cm.Data, func(v string) Sum { return sha256.Sum256(unsafe.Slice(unsafe.StringData(v), len(v))) })
	s.BinaryData = SumsOf(cm.BinaryData, sumBytes)
	return s
}

// SourceOfSecret returns the digest-only view of a Secret. The API server has already
// merged stringData into data.
func SourceOfSecret(sec *corev1.Secret) Source {
	s := sourceMeta(Secret, sec.Name, sec.Annotations)
	s.Whole = sec.Type != "" && sec.Type != corev1.SecretTypeOpaque
	if s.TooLarge = len(sec.Data) > MaxSourceKeys; s.TooLarge {
		return s
	}
	s.Data = SumsOf(sec.Data, sumBytes)
	return s
}

func sumBytes(v []byte) Sum { return sha256.Sum256(v) }

// Waves reports whether the source's own settings roll its changes in waves.
func (s Source) Waves() bool { return s.WaveSize > 0 || s.Canary.N > 0 || s.Bake > 0 }

// Paces returns a user's pacing with the source's own wave settings, which bind all
// its users: the smaller wave, its canary, the longer bake, its metric gate.
func (s Source) Paces(p Pacing) Pacing {
	if s.WaveSize > 0 && (p.WaveSize == 0 || s.WaveSize < p.WaveSize) {
		p.WaveSize = s.WaveSize
	}
	if s.Canary.N > 0 {
		p.Canary = s.Canary
	}
	p.Bake = max(p.Bake, s.Bake)
	if !s.Analysis.IsZero() {
		p.Analysis = s.Analysis
	}
	return p
}

// AbsentSource returns the view of a source that does not exist.
func AbsentSource(ref SourceRef) Source { return Source{SourceRef: ref} }

func sourceMeta(kind SourceKind, name string, annotations map[string]string) Source {
	var problems []Problem
	get := func(name string) (string, bool) { v, ok := annotations[name]; return v, ok }
	bad := func(name, value, want string) { problems = append(problems, Problem{name, value, want}) }
	s := Source{
		SourceRef:      SourceRef{kind, name},
		Present:        true,
		Ignore:         isTrue(annotations[AnnotationIgnore]),
		Match:          isTrue(annotations[AnnotationMatch]),
		ReloaderIgnore: isTrue(annotations[ReloaderIgnore]),
		ReloaderMatch:  isTrue(annotations[ReloaderMatch]),
		WaveSize:       readSetting(get, bad, AnnotationWaveSize, parseWaveSize, wantWaveSize),
		OnFailure:      readSetting(get, bad, AnnotationOnFailure, parseOnFailure, wantOnFailure),
		Canary:         readSetting(get, bad, AnnotationCanary, parseCanary, wantCanary),
		Bake:           readSetting(get, bad, AnnotationBake, parseBake, wantBake),
		Analysis:       readSetting(get, bad, AnnotationAnalysis, parseAnalysis, wantAnalysis),
	}
	s.Bad = sourceProblems(annotations, problems)
	return s
}

// sourceProblems says what is wrong with a source's confighash annotations: the bad
// wave settings sourceMeta read, a value of another that is not one, a key nothing
// reads. "" for nothing, the common case, at the cost of a look at each key.
func sourceProblems(annotations map[string]string, problems []Problem) string {
	for _, name := range []string{AnnotationIgnore, AnnotationMatch} {
		if v, ok := annotations[name]; ok {
			if _, err := strconv.ParseBool(strings.TrimSpace(v)); err != nil {
				problems = append(problems, Problem{name, v, `want "true" or "false"; counts as "false"`})
			}
		}
	}
	problems = append(problems, UnknownKeys(annotations, OnSource, false)...)
	return JoinProblems(problems)
}

// JoinProblems says the problems in one line, "" for none.
func JoinProblems(problems []Problem) string {
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.Error()
	}
	slices.Sort(msgs) // a map's keys come in any order; the same problems say the same
	return strings.Join(msgs, "; ")
}
