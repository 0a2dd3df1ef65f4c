package confighash

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// AnnotationSnapshotSeal is on every snapshot the webhook makes: SnapshotSeal of its
// kind, namespace and name. Only a holder of the hash key can write one, and it holds
// for that object alone, so the watcher deletes no object it cannot prove confighash
// made: not a ConfigMap a user labelled as a snapshot, nor one restored from a
// snapshot's YAML under another name or in another namespace.
const AnnotationSnapshotSeal = Domain + "/seal"

// sealPrefix separates seals from every other use of the key.
const sealPrefix = "confighash.dev/snapshot-seal/v1\x00"

// SnapshotSeal is the seal of the snapshot of the kind with this namespace and name.
func SnapshotSeal(key Key, kind SourceKind, namespace, name string) string {
	msg := []byte(sealPrefix)
	for _, f := range []string{string(kind), namespace, name} {
		msg = appendString(msg, f)
	}
	var sum [sha256.Size]byte
	key.sum(msg, &sum)
	return hex.EncodeToString(sum[:])
}

// Sealed reports whether the annotations hold the seal of the snapshot of the kind
// with this namespace and name.
func Sealed(key Key, kind SourceKind, namespace, name string, annotations map[string]string) bool {
	seal, ok := annotations[AnnotationSnapshotSeal]
	return ok && hmac.Equal([]byte(seal), []byte(SnapshotSeal(key, kind, namespace, name)))
}
