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
// namespace, labelled with the source's name and sealed (confighash.SnapshotSeal). It
// is the one write made inside admission, before the pod template names the snapshot,
// so that no pod ever starts without it; a dry run makes none (sideEffects:
// NoneOnDryRun). Its data is always read from the source, never taken from the review.
type Snapshots struct {
	client kubernetes.Interface
	key    confighash.Key
	// slots bounds the reads and creates in flight in the process (rule 9).
	slots chan struct{}
	// limit, when set, bounds each namespace's snapshots.
	limit *SnapshotCap
}

// NewSnapshots returns the maker of snapshots hashed and sealed with key, within limit
// when it is not nil.
func NewSnapshots(client kubernetes.Interface, key confighash.Key, limit *SnapshotCap) *Snapshots {
	return &Snapshots{client: client, key: key, slots: make(chan struct{}, readsInFlight), limit: limit}
}

// Ensure makes the snapshots of the sources' current data the observations saw, at
// once: each is a read or two and a create, which would add up in line. It makes all
// or none: when those that do not exist yet would take the namespace over its cap, it
// makes none and returns a *SnapshotCapError.
func (s *Snapshots) Ensure(ctx context.Context, namespace string, wanted []confighash.Snapshot, owner *metav1.OwnerReference, dryRun bool) error {
	made := make([]*snapshot, len(wanted))
	err := inParallel(ctx, s.slots, len(wanted), func(ctx context.Context, i int) (err error) {
		made[i], err = s.prepare(ctx, namespace, wanted[i], owner)
		return err
	})
	if err != nil {
		return err
	}
	sizes := map[string]int64{}
	for _, m := range made {
		if m != nil {
			sizes[m.name()] = m.bytes
		}
	}
	if len(sizes) == 0 {
		return nil
	}
	if s.limit != nil {
		if err := s.limit.reserve(namespace, sizes, dryRun); err != nil {
			return err
		}
	}
	if dryRun {
		return nil
	}
	return inParallel(ctx, s.slots, len(made), func(ctx context.Context, i int) error {
		if made[i] == nil {
			return nil
		}
		return s.create(ctx, made[i])
	})
}

// snapshot is a snapshot to make: a ConfigMap or a Secret, and the bytes it holds.
type snapshot struct {
	of        confighash.SourceRef
	configMap *corev1.ConfigMap
	secret    *corev1.Secret
	bytes     int64
}

// prepare returns the snapshot of the source's current data o observed, owned by owner
// when it is known (an update; a create's workload has no UID yet), or nil when it
// exists. The data is read again, whole, and must still be the data o observed.
// Snapshots are immutable and named by their data: one that exists is the one wanted,
// if it is a snapshot at all (confighash.IsSnapshot).
func (s *Snapshots) prepare(ctx context.Context, namespace string, want confighash.Snapshot, owner *metav1.OwnerReference) (*snapshot, error) {
	o, name := want.Source, want.Pin.Snapshot()
	meta := metav1.ObjectMeta{Name: name, Namespace: namespace,
		Labels: map[string]string{confighash.LabelSnapshotOf: confighash.SnapshotOf(o.Name)},
		Annotations: map[string]string{confighash.LabelSnapshotOf: o.Name,
			confighash.AnnotationSeal: confighash.SnapshotSeal(s.key, o.Kind, namespace, name)}}
	if owner != nil {
		meta.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	var err error
	switch o.Kind {
	case confighash.ConfigMap:
		// Most often the snapshot exists: the other workloads a change reached made it.
		existing, readErr := s.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsNotFound(readErr) {
			return nil, s.existing(o, name, readErr, func() bool {
				return confighash.IsSnapshot(s.key, o.SourceRef, existing, ptr.Deref(existing.Immutable, false), confighash.SourceOfConfigMap(existing))
			})
		}
		var cm *corev1.ConfigMap
		if cm, err = s.client.CoreV1().ConfigMaps(namespace).Get(ctx, o.Name, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("read %s for its snapshot: %w", o.SourceRef, err)
		}
		if err = s.same(want, namespace, confighash.SourceOfConfigMap(cm)); err != nil {
			return nil, err
		}
		made := &corev1.ConfigMap{ObjectMeta: meta, Immutable: ptr.To(true), Data: used(o.Reference, cm.Data), BinaryData: used(o.Reference, cm.BinaryData)}
		return &snapshot{of: o.SourceRef, configMap: made, bytes: dataBytes(made.Data) + dataBytes(made.BinaryData)}, nil
	case confighash.Secret:
		existing, readErr := s.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsNotFound(readErr) {
			return nil, s.existing(o, name, readErr, func() bool {
				return confighash.IsSnapshot(s.key, o.SourceRef, existing, ptr.Deref(existing.Immutable, false), confighash.SourceOfSecret(existing))
			})
		}
		var sec *corev1.Secret
		if sec, err = s.client.CoreV1().Secrets(namespace).Get(ctx, o.Name, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("read %s for its snapshot: %w", o.SourceRef, err)
		}
		if err = s.same(want, namespace, confighash.SourceOfSecret(sec)); err != nil {
			return nil, err
		}
		data := used(o.Reference, sec.Data)
		if sec.Type != "" && sec.Type != corev1.SecretTypeOpaque {
			// A type may require keys the workload does not use (kubernetes.io/tls: tls.key).
			data = sec.Data
		}
		made := &corev1.Secret{ObjectMeta: meta, Immutable: ptr.To(true), Type: sec.Type, Data: data}
		return &snapshot{of: o.SourceRef, secret: made, bytes: dataBytes(data)}, nil
	}
	return nil, fmt.Errorf("%s cannot be pinned", o.SourceRef)
}

func (m *snapshot) name() string {
	if m.configMap != nil {
		return m.configMap.Name
	}
	return m.secret.Name
}

// create makes the snapshot; one made meanwhile by another admission is the same.
func (s *Snapshots) create(ctx context.Context, m *snapshot) error {
	var err error
	if m.configMap != nil {
		_, err = s.client.CoreV1().ConfigMaps(m.configMap.Namespace).Create(ctx, m.configMap, metav1.CreateOptions{FieldManager: FieldManager})
	} else {
		_, err = s.client.CoreV1().Secrets(m.secret.Namespace).Create(ctx, m.secret, metav1.CreateOptions{FieldManager: FieldManager})
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("make the snapshot %s of %s: %w", m.name(), m.of, err)
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
