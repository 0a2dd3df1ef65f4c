package confighash

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// MinKeySize is the shortest HMAC key accepted, in bytes.
const MinKeySize = 32

// Key is the per-install HMAC key. It keeps hashes from revealing anything about a
// Secret's value to someone who can read workloads but not Secrets.
type Key []byte

// Validate reports whether the key is long enough.
func (k Key) Validate() error {
	if len(k) < MinKeySize {
		return errors.New("hash key must be at least 32 bytes")
	}
	return nil
}

// Sum is the SHA-256 of one value of a ConfigMap or Secret.
type Sum [sha256.Size]byte

// Source is what confighash keeps of a ConfigMap or Secret: whether it exists, the
// annotations that decide whether it counts, and a digest per key. Never a value.
type Source struct {
	SourceRef
	Present bool
	Ignore  bool
	Match   bool
	// Data holds ConfigMap data and Secret data; BinaryData holds ConfigMap binaryData.
	Data       map[string]Sum
	BinaryData map[string]Sum
}

// SourceOfConfigMap returns the digest-only view of a ConfigMap.
func SourceOfConfigMap(cm *corev1.ConfigMap) Source {
	s := sourceMeta(ConfigMap, cm.Name, cm.Annotations)
	s.Data = make(map[string]Sum, len(cm.Data))
	for k, v := range cm.Data {
		s.Data[k] = sha256.Sum256([]byte(v))
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
	return Source{
		SourceRef: SourceRef{kind, name},
		Present:   true,
		Ignore:    isTrue(annotations[AnnotationIgnore]),
		Match:     isTrue(annotations[AnnotationMatch]),
	}
}

func sumBytes(m map[string][]byte) map[string]Sum {
	out := make(map[string]Sum, len(m))
	for k, v := range m {
		out[k] = sha256.Sum256(v)
	}
	return out
}

// Digest is the keyed digest of the part of a source one workload uses. It is short
// because it only tells versions of one object apart, and it is recorded on the
// workload; the workload hash itself is a full HMAC-SHA256.
type Digest [8]byte

func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// Entry sections in the canonical encoding: ConfigMap data and binaryData are kept apart,
// and a used key that is absent has its own marker.
const (
	sectionData       = 'd'
	sectionBinaryData = 'b'
	sectionAbsentKey  = '-'
)

// Domain-separation prefixes, so a source digest can never equal a workload hash input.
const (
	sourcePrefix   = "confighash.dev/source/v1\x00"
	workloadPrefix = "confighash.dev/workload/v1\x00"
)

// entry is one key in the canonical encoding; sum is unused for an absent key.
type entry struct {
	section byte
	key     string
	sum     Sum
}

// SourceDigest returns the keyed digest of the keys of src that ref uses: every key when
// ref.AllKeys, else only ref.Keys. The encoding is length-prefixed and sorted, so no two
// different contents encode alike. It reads only digests, so the webhook (which reads
// values) and the watcher (which keeps digests) compute the same value.
func SourceDigest(key Key, ref Reference, src Source) Digest {
	var entries []entry
	if ref.AllKeys {
		entries = make([]entry, 0, len(src.Data)+len(src.BinaryData))
		entries = appendSection(entries, sectionData, src.Data)
		entries = appendSection(entries, sectionBinaryData, src.BinaryData)
	} else {
		entries = make([]entry, 0, len(ref.Keys))
		for _, k := range ref.Keys {
			n := len(entries)
			if sum, ok := src.Data[k]; ok {
				entries = append(entries, entry{sectionData, k, sum})
			}
			if sum, ok := src.BinaryData[k]; ok {
				entries = append(entries, entry{sectionBinaryData, k, sum})
			}
			if len(entries) == n {
				entries = append(entries, entry{section: sectionAbsentKey, key: k})
			}
		}
	}
	slices.SortFunc(entries, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.section, b.section), strings.Compare(a.key, b.key))
	})

	mac := hmac.New(sha256.New, key)
	_, _ = mac.Write([]byte(sourcePrefix))
	writeString(mac, string(ref.Kind))
	writeString(mac, ref.Name)
	writeUvarint(mac, uint64(len(entries)))
	for _, e := range entries {
		_, _ = mac.Write([]byte{e.section})
		writeString(mac, e.key)
		if e.section != sectionAbsentKey {
			_, _ = mac.Write(e.sum[:])
		}
	}
	var d Digest
	copy(d[:], mac.Sum(nil))
	return d
}

func appendSection(entries []entry, section byte, m map[string]Sum) []entry {
	for k, sum := range m {
		entries = append(entries, entry{section, k, sum})
	}
	return entries
}

// hashPrefix versions the workload hash written on pod templates.
const hashPrefix = "v1:"

// workloadHash is the keyed hash over the sorted (kind, name, digest) list.
func workloadHash(key Key, entries []RecordEntry) string {
	mac := hmac.New(sha256.New, key)
	_, _ = mac.Write([]byte(workloadPrefix))
	var n uint64
	for _, e := range entries {
		if e.hashed() {
			n++
		}
	}
	writeUvarint(mac, n)
	for _, e := range entries {
		if e.hashed() {
			writeString(mac, string(e.Kind))
			writeString(mac, e.Name)
			_, _ = mac.Write(e.Digest[:])
		}
	}
	return hashPrefix + hex.EncodeToString(mac.Sum(nil))
}

func writeString(h hash.Hash, s string) {
	writeUvarint(h, uint64(len(s)))
	_, _ = h.Write([]byte(s))
}

func writeUvarint(h hash.Hash, v uint64) {
	var buf [binary.MaxVarintLen64]byte
	_, _ = h.Write(buf[:binary.PutUvarint(buf[:], v)])
}
