package confighash

import (
	"crypto/sha256"
	"maps"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
)

// Sum is the SHA-256 of one value of a ConfigMap or Secret.
type Sum [sha256.Size]byte

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
	// Data holds ConfigMap data and Secret data; BinaryData holds ConfigMap binaryData.
	Data       map[string]Sum
	BinaryData map[string]Sum
}

// Equal reports whether two views are the same: the same data, existence and
// counting annotations.
func (s Source) Equal(o Source) bool {
	return s.SourceRef == o.SourceRef && s.Present == o.Present &&
		s.Ignore == o.Ignore && s.Match == o.Match && s.ReloaderIgnore == o.ReloaderIgnore && s.ReloaderMatch == o.ReloaderMatch && s.WaveSize == o.WaveSize &&
		maps.Equal(s.Data, o.Data) && maps.Equal(s.BinaryData, o.BinaryData)
}

// SourceOfConfigMap returns the digest-only view of a ConfigMap.
func SourceOfConfigMap(cm *corev1.ConfigMap) Source {
	s := sourceMeta(ConfigMap, cm.Name, cm.Annotations)
	s.Data = make(map[string]Sum, len(cm.Data))
	for k, v := range cm.Data {
		// Hash the string's bytes in place: a copy would double the allocation of a
		// live read of a large ConfigMap. sha256 only reads them.
		s.Data[k] = sha256.Sum256(unsafe.Slice(unsafe.StringData(v), len(v)))
	}
	if len(cm.BinaryData) > 0 {
		s.BinaryData = sumBytes(cm.BinaryData)
	}
	return s
}

// SourceOfSecret returns the digest-only view of a Secret. The API server has already
// merged stringData into data.
func SourceOfSecret(sec *corev1.Secret) Source {
	s := sourceMeta(Secret, sec.Name, sec.Annotations)
	s.Data = sumBytes(sec.Data)
	return s
}

// AbsentSource returns the view of a source that does not exist.
func AbsentSource(ref SourceRef) Source { return Source{SourceRef: ref} }

func sourceMeta(kind SourceKind, name string, annotations map[string]string) Source {
	waveSize, _ := parseWaveSize(annotations[AnnotationWaveSize])
	return Source{
		SourceRef:      SourceRef{kind, name},
		Present:        true,
		Ignore:         isTrue(annotations[AnnotationIgnore]),
		Match:          isTrue(annotations[AnnotationMatch]),
		ReloaderIgnore: isTrue(annotations[ReloaderIgnore]),
		ReloaderMatch:  isTrue(annotations[ReloaderMatch]),
		WaveSize:       waveSize,
	}
}

func sumBytes(m map[string][]byte) map[string]Sum {
	out := make(map[string]Sum, len(m))
	for k, v := range m {
		out[k] = sha256.Sum256(v)
	}
	return out
}
