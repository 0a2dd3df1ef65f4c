package confighash

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// The prefixes separate seals from each other and from every other use of the key.
const (
	snapshotSealPrefix   = "confighash.dev/snapshot-seal/v1\x00"
	recreationSealPrefix = "confighash.dev/recreation-seal/v1\x00"
	sealedAtPrefix       = "confighash.dev/sealed-at/v1\x00"
)

// seal is the keyed digest, in hex, of the fields under the prefix, each
// length-prefixed.
func seal(key Key, prefix string, fields ...string) string {
	msg := []byte(prefix)
	for _, f := range fields {
		msg = appendString(msg, f)
	}
	var sum [sha256.Size]byte
	key.sum(msg, &sum)
	return hex.EncodeToString(sum[:])
}

// sealedWith reports whether the annotations hold the seal want.
func sealedWith(annotations map[string]string, want string) bool {
	s, ok := annotations[AnnotationSeal]
	return ok && hmac.Equal([]byte(s), []byte(want))
}

// SnapshotSeal is the seal of the snapshot of the kind with this namespace and name.
func SnapshotSeal(key Key, kind SourceKind, namespace, name string) string {
	return seal(key, snapshotSealPrefix, string(kind), namespace, name)
}

// Sealed reports whether the annotations hold the seal of the snapshot of the kind
// with this namespace and name.
func Sealed(key Key, kind SourceKind, namespace, name string, annotations map[string]string) bool {
	return sealedWith(annotations, SnapshotSeal(key, kind, namespace, name))
}
