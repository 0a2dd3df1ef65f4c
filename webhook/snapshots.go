package webhook

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
)

// Snapshots makes the snapshots pinned workloads name: an immutable copy of the keys a
// workload uses of a source, a ConfigMap or a Secret of the source's type, in its
// namespace, labelled with the source's name. It is the one write made inside
// admission, before the pod template names the snapshot, so that no pod ever starts
// without it; a dry run makes none (sideEffects: NoneOnDryRun).
type Snapshots struct {
	client kubernetes.Interface
	key    confighash.Key
	// slots bounds the reads and creates in flight in the process (DESIGN rule 9).
	slots chan struct{}
}

// NewSnapshots returns the maker of snapshots hashed with key.
func NewSnapshots(client kubernetes.Interface, key confighash.Key) *Snapshots {
	return &Snapshots{client: client, key: key, slots: make(chan struct{}, readsInFlight)}
}

// Ensure makes the snapshots of the sources' current data the observations saw, at
// once: each is a read or two and a create, which would add up in line.
func (s *Snapshots) Ensure(ctx context.Context, namespace string, wanted []confighash.Snapshot, owner *metav1.OwnerReference, dryRun bool) error {
	return inParallel(ctx, s.slots, len(wanted), func(ctx context.Context, i int) error {
		return s.ensure(ctx, namespace, wanted[i], owner, dryRun)
	})
}

// ensure makes the snapshot of the source's current data o observed, unless it exists,
// owned by owner when it is known (an update; a create's workload has no UID yet).
// The data is read again, whole, and must still be the data o observed. Snapshots
// are immutable and named by their data: one that exists is the one wanted, if it is
// a snapshot at all (confighash.IsSnapshot).
func (s *Snapshots) ensure(ctx context.Context, namespace string, want confighash.Snapshot, owner *metav1.OwnerReference, dryRun bool) error {
	o, name := want.Source, want.Pin.Snapshot()
	meta := metav1.ObjectMeta{Name: name, Namespace: namespace,
		Labels:      map[string]string{confighash.LabelSnapshotOf: confighash.SnapshotOf(o.Name)},
		Annotations: map[string]string{confighash.LabelSnapshotOf: o.Name}}
	if owner != nil {
		meta.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	var err error
	switch o.Kind {
	case confighash.ConfigMap:
		// Most often the snapshot exists: the other workloads a change reached made it.
		existing, readErr := s.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsNotFound(readErr) {
			return s.existing(o, name, readErr, func() bool {
				return confighash.IsSnapshot(s.key, o.SourceRef, existing, ptr.Deref(existing.Immutable, false), confighash.SourceOfConfigMap(existing))
			})
		}
		var cm *corev1.ConfigMap
		if cm, err = s.client.CoreV1().ConfigMaps(namespace).Get(ctx, o.Name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("read %s for its snapshot: %w", o.SourceRef, err)
		}
		if err = s.same(want, namespace, confighash.SourceOfConfigMap(cm)); err != nil || dryRun {
			return err
		}
		snapshot := &corev1.ConfigMap{ObjectMeta: meta, Immutable: ptr.To(true), Data: used(o.Reference, cm.Data), BinaryData: used(o.Reference, cm.BinaryData)}
		_, err = s.client.CoreV1().ConfigMaps(namespace).Create(ctx, snapshot, metav1.CreateOptions{FieldManager: FieldManager})
	case confighash.Secret:
		existing, readErr := s.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsNotFound(readErr) {
			return s.existing(o, name, readErr, func() bool {
				return confighash.IsSnapshot(s.key, o.SourceRef, existing, ptr.Deref(existing.Immutable, false), confighash.SourceOfSecret(existing))
			})
		}
		var sec *corev1.Secret
		if sec, err = s.client.CoreV1().Secrets(namespace).Get(ctx, o.Name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("read %s for its snapshot: %w", o.SourceRef, err)
		}
		if err = s.same(want, namespace, confighash.SourceOfSecret(sec)); err != nil || dryRun {
			return err
		}
		data := used(o.Reference, sec.Data)
		if sec.Type != "" && sec.Type != corev1.SecretTypeOpaque {
			// A type may require keys the workload does not use (kubernetes.io/tls: tls.key).
			data = sec.Data
		}
		snapshot := &corev1.Secret{ObjectMeta: meta, Immutable: ptr.To(true), Type: sec.Type, Data: data}
		_, err = s.client.CoreV1().Secrets(namespace).Create(ctx, snapshot, metav1.CreateOptions{FieldManager: FieldManager})
	default:
		return fmt.Errorf("%s cannot be pinned", o.SourceRef)
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("make the snapshot %s of %s: %w", name, o.SourceRef, err)
	}
	return nil
}

// existing is the outcome of reading whether the snapshot exists: nil when it does and
// is one. An object under its name that is not (made beforehand, mutable, or holding
// other data) is never pinned to: its pods would run whatever it holds.
func (s *Snapshots) existing(o confighash.Observation, name string, err error, isSnapshot func() bool) error {
	switch {
	case err != nil:
		return fmt.Errorf("read the snapshot %s: %w", name, err)
	case !isSnapshot():
		return fmt.Errorf("pin %s: %s exists but is not its snapshot (not immutable, not labelled %s=%s, or holding other data); it is not used", o.SourceRef, name, confighash.LabelSnapshotOf, confighash.SnapshotOf(o.Name))
	}
	return nil
}

// same checks that the source read holds the data the decision observed.
func (s *Snapshots) same(want confighash.Snapshot, namespace string, src confighash.Source) error {
	if !want.Copies(s.key, namespace, src) {
		return fmt.Errorf("%s changed while it was admitted; its snapshot waits for the next admission", want.Source.SourceRef)
	}
	return nil
}

// used returns the entries of data the reference uses: all, or the keys it names.
func used[V any](ref confighash.Reference, data map[string]V) map[string]V {
	if ref.AllKeys || data == nil {
		return data
	}
	out := make(map[string]V, len(ref.Keys))
	for _, k := range ref.Keys {
		if v, ok := data[k]; ok {
			out[k] = v
		}
	}
	return out
}

// FieldManager owns the webhook's own writes: snapshots.
const FieldManager = "confighash-webhook"
