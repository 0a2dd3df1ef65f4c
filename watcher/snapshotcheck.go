package watcher

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
)

// snapshotSource is the source a snapshot is of: its annotation holds the name whole,
// where the label may hold it cut.
func snapshotSource(kind confighash.SourceKind, s metav1.Object) confighash.SourceRef {
	return confighash.SourceRef{Kind: kind, Name: s.GetAnnotations()[confighash.LabelSnapshotOf]}
}

// madeSnapshot reports whether s, an object labelled as a snapshot, is one
// (confighash.IsSnapshot): only those are deleted, never an object a user made,
// restored from a snapshot's YAML or changed, that carries the label. One listed by
// its metadata alone is read whole; one that cannot be read is kept for now.
func (sn *snapshots) madeSnapshot(ctx context.Context, kind confighash.SourceKind, s metav1.Object) bool {
	source := snapshotSource(kind, s)
	switch obj := s.(type) {
	case *corev1.ConfigMap:
		return confighash.IsSnapshot(sn.key, source, obj, ptr.Deref(obj.Immutable, false), confighash.SourceOfConfigMap(obj))
	case *corev1.Secret:
		return confighash.IsSnapshot(sn.key, source, obj, ptr.Deref(obj.Immutable, false), confighash.SourceOfSecret(obj))
	}
	var read metav1.Object
	var err error
	if kind == confighash.ConfigMap {
		read, err = sn.client.CoreV1().ConfigMaps(s.GetNamespace()).Get(ctx, s.GetName(), metav1.GetOptions{})
	} else {
		read, err = sn.client.CoreV1().Secrets(s.GetNamespace()).Get(ctx, s.GetName(), metav1.GetOptions{})
	}
	return err == nil && read.GetUID() == s.GetUID() && sn.madeSnapshot(ctx, kind, read)
}
