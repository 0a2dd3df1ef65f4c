package webhook

import (
	"context"
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kwhmodel "github.com/slok/kubewebhook/v2/pkg/model"

	"github.com/confighash/confighash"
)

// snapshots makes the snapshots the decision needs, if any. Beyond the namespace's snapshot
// cap it makes none and decides again, unpinned for this admission: the hash is written
// as usual, nothing partial, and notPinned says why (the watcher tells it in an Event,
// as sideEffects None keeps admission from writing one).
func (m *Mutator) snapshots(ctx context.Context, ar *kwhmodel.AdmissionReview, u *unstructured.Unstructured, w *confighash.Workload,
	in confighash.Input, sources confighash.Sources, d confighash.Decision) (_ confighash.Decision, notPinned string, _ error) {
	if len(d.Snapshots) == 0 {
		return d, "", nil
	}
	if m.cfg.Snapshots == nil {
		return d, "", errors.New("pin the workload: this webhook makes no snapshots")
	}
	var owner *metav1.OwnerReference
	// A create's workload has no UID until it is stored: one in the review is whatever
	// the client or a forger sent, and would have another workload own the snapshot.
	if uid := u.GetUID(); uid != "" && ar.OldObjectRaw != nil {
		// Until its revisions own them: the watcher sees to it, and to those that none does.
		owner = &metav1.OwnerReference{APIVersion: w.Kind.GroupVersion().String(), Kind: w.Kind.Kind, Name: w.Name, UID: uid}
	}
	err := m.cfg.Snapshots.Ensure(ctx, w.Namespace, d.Snapshots, owner, ar.DryRun)
	var capped *SnapshotCapError
	if !errors.As(err, &capped) {
		return d, "", err
	}
	m.cfg.Metrics.SnapshotsCapped(capped.Limit)
	in.Unpinned = true
	d, err = confighash.Decide(in, sources)
	return d, capped.Error(), err
}
