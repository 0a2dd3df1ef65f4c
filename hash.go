package confighash

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"slices"
	"strings"
	"sync"
)

// MinKeySize is the shortest HMAC key accepted, in bytes.
const MinKeySize = 32

// Key is the per-install HMAC key. It keeps hashes from revealing anything about a
// Secret's value to someone who can read workloads but not Secrets. Safe for concurrent
// use.
type Key struct {
	// macs holds keyed HMAC states: keying costs two SHA-256 blocks and several
	// allocations, more than hashing a small source.
	macs *sync.Pool
}

// NewKey returns a key from at least MinKeySize secret bytes.
func NewKey(secret []byte) (Key, error) {
	if len(secret) < MinKeySize {
		return Key{}, fmt.Errorf("hash key must be at least %d bytes, got %d", MinKeySize, len(secret))
	}
	secret = bytes.Clone(secret)
	return Key{macs: &sync.Pool{New: func() any { return hmac.New(sha256.New, secret) }}}, nil
}

// sum returns the HMAC of msg into out.
func (k Key) sum(msg []byte, out *[sha256.Size]byte) {
	mac := k.macs.Get().(hash.Hash)
	mac.Reset()
	_, _ = mac.Write(msg)
	mac.Sum(out[:0])
	k.macs.Put(mac)
}

// Digest is the keyed digest of the part of a source one workload uses. It is short
// because it is recorded on the workload and only has to tell versions of one object
// apart: 64 bits make two versions with equal digests (a missed rollout) vanishingly
// rare. The workload hash is a full HMAC-SHA256 over these digests.
type Digest [8]byte

func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// Entry sections in the canonical encoding: ConfigMap data and binaryData are kept apart,
// and a used key that is absent has its own marker.
const (
	sectionData       = 'd'
	sectionBinaryData = 'b'
	sectionAbsentKey  = '-'
)

// Domain-separation prefixes, so that no two kinds of digest share an input: a source
// digest in either form, a snapshot's name, a workload hash.
const (
	sourcePrefix           = "confighash.dev/source/v1\x00"
	namespacedSourcePrefix = "confighash.dev/source/v2\x00"
	snapshotPrefix         = "confighash.dev/snapshot/v1\x00"
	workloadPrefix         = "confighash.dev/workload/v1\x00"
)

// entry is one key in the canonical encoding; sum is unused for an absent key.
type entry struct {
	section byte
	key     string
	sum     Sum
}

// SourceDigest returns the keyed digest of the keys of src that ref uses, in the
// shared form (FormShared): every key when ref.AllKeys, else only ref.Keys. The
// encoding is length-prefixed and sorted, so no two different contents encode alike.
// It reads only digests, so the webhook (which reads values) and the watcher (which
// keeps digests) compute the same value.
func SourceDigest(key Key, ref Reference, src Source) Digest {
	return keyedDigest(key, sourcePrefix, []string{string(ref.Kind), ref.Name}, usedEntries(ref, src, true))
}

// NamespacedDigest is SourceDigest bound to the source's namespace (FormNamespaced), so
// that equal data in two namespaces has unrelated digests: otherwise whoever may read
// one namespace's workloads and write another's Secrets tests guesses of a Secret by
// comparing digests. The namespace enters the keyed encoding, rather than keying each
// namespace apart, so that one pool of keyed states serves every namespace.
func NamespacedDigest(key Key, namespace string, ref Reference, src Source) Digest {
	return keyedDigest(key, namespacedSourcePrefix, []string{namespace, string(ref.Kind), ref.Name}, usedEntries(ref, src, true))
}

// SnapshotDigest returns the keyed digest, bound to the namespace, of the data a
// snapshot of src for ref copies: the keys ref uses that exist, or every key when ref
// uses all of them or src is copied whole (Source.Whole). It names the snapshot, so
// that the same data is one snapshot however workloads reference it, and a name
// cannot be predicted without the key.
func SnapshotDigest(key Key, namespace string, ref Reference, src Source) Digest {
	if src.Whole {
		ref = Reference{SourceRef: ref.SourceRef, AllKeys: true}
	}
	return keyedDigest(key, snapshotPrefix, []string{namespace, string(ref.Kind), ref.Name}, usedEntries(ref, src, false))
}

// usedEntries returns the entries of src that ref uses, sorted, with a marker for each
// key it names that src lacks when absent is set.
func usedEntries(ref Reference, src Source, absent bool) []entry {
	var entries []entry
	if ref.AllKeys {
		entries = make([]entry, 0, len(src.Data)+len(src.BinaryData))
		entries = appendSection(entries, sectionData, src.Data)
		entries = appendSection(entries, sectionBinaryData, src.BinaryData)
	} else {
		entries = make([]entry, 0, len(ref.Keys))
		for _, k := range ref.Keys {
			n := len(entries)
			if sum, ok := src.Data.Get(k); ok {
				entries = append(entries, entry{sectionData, k, sum})
			}
			if sum, ok := src.BinaryData.Get(k); ok {
				entries = append(entries, entry{sectionBinaryData, k, sum})
			}
			if len(entries) == n && absent {
				entries = append(entries, entry{section: sectionAbsentKey, key: k})
			}
		}
	}
	slices.SortFunc(entries, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.section, b.section), strings.Compare(a.key, b.key))
	})
	return entries
}

// keyedDigest returns the first bytes of the HMAC of the prefix, each of the fields
// and the entries, each length-prefixed.
func keyedDigest(key Key, prefix string, fields []string, entries []entry) Digest {
	size := len(prefix) + (len(fields)+1)*binary.MaxVarintLen64
	for _, f := range fields {
		size += len(f)
	}
	for _, e := range entries {
		size += 1 + binary.MaxVarintLen64 + len(e.key) + len(e.sum)
	}
	msg := make([]byte, 0, size)
	msg = append(msg, prefix...)
	for _, f := range fields {
		msg = appendString(msg, f)
	}
	msg = binary.AppendUvarint(msg, uint64(len(entries)))
	for _, e := range entries {
		msg = append(msg, e.section)
		msg = appendString(msg, e.key)
		if e.section != sectionAbsentKey {
			msg = append(msg, e.sum[:]...)
		}
	}
	var full [sha256.Size]byte
	key.sum(msg, &full)
	var d Digest
	copy(d[:], full[:])
	return d
}

func appendSection(entries []entry, section byte, sums Sums) []entry {
	for _, e := range sums {
		entries = append(entries, entry{section, e.Key, e.Sum})
	}
	return entries
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
