package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/bounded"
	"github.com/confighash/confighash/sourcecache"
	"github.com/rs/zerolog"
)

// Snapshots of a pinned workload are owned by each revision whose pod template names
// them (ReplicaSets, ControllerRevisions), so that the garbage collector deletes one
// with the last revision that names it: the revision history limit bounds them, and
// deleting the workload deletes them. The workload itself owns those its template
// names (the webhook makes an update's snapshots owned by it already), so that none
// goes while its revision is being made, and lets go of the others once its existing
// revisions own theirs and they are older than snapshotGrace (an admission may have
// just made one for a template the watcher has not seen); one left with no owner (its
// revisions were gone before they could own it) is deleted, unless a pinned workload
// of the namespace names it. A workload no longer pinned lets go of them all. A kind
// without revisions owns all its snapshots itself until it is deleted.

// snapshots gives the snapshots of pinned workloads their owners, and sweeps those
// nothing owns or names.
type snapshots struct {
	client    kubernetes.Interface
	reads     *bounded.Reader
	key       confighash.Key
	sources   *sourcecache.Cache
	workloads *workloads
	revisions *revisionReader
	queue     workqueue.TypedDelayingInterface[workloadKey]
	metrics   Recorder
	log       zerolog.Logger
	// every is how often the sweep runs, and how long a snapshot must have had no
	// owner first.
	every time.Duration

	mu sync.Mutex
	// owned is, per workload, its UID and pins when its snapshots were found owned,
	// and the checks in a row that found the revision of its template not made yet.
	owned map[workloadKey]ownership

	// candidates are the snapshots a sweep found owned and named by nothing; from,
	// per kind and namespace, where the next sweep goes on from when the last one
	// spent its calls, and at in which. Only the sweep, on one goroutine, uses them.
	candidates map[types.UID]bool
	from       map[string]string
	at         string
}

type ownership struct {
	owned string
	waits int
}

// ownedFor reports whether the workload's snapshots were found owned for its pins; a
// workload made again under the same name is not the one found.
func (sn *snapshots) ownedFor(v *view) bool {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	return sn.owned[keyOf(v)].owned == ownedText(v)
}

// known reports whether the workload was pinned when its snapshots' owners were last
// found.
func (sn *snapshots) known(key workloadKey) bool {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	return sn.owned[key].owned != ""
}

// retry is how long until the workload is checked again while the revision of its
// template is not made yet: from snapshotOwnerRetry, doubling up to a minute (a paused
// Deployment makes none until it is resumed, and its status says when it does).
func (sn *snapshots) retry(key workloadKey) time.Duration {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	o := sn.owned[key]
	after := snapshotOwnerRetry << min(o.waits, 6)
	o.waits++
	sn.owned[key] = o
	return after
}

// noteOwned remembers that the snapshots of the workload's pins are owned.
func (sn *snapshots) noteOwned(v *view) {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	sn.owned[keyOf(v)] = ownership{owned: ownedText(v)}
}

// forget forgets that the workload's snapshots were found owned: they are checked
// again at its next check, and nothing is kept of a workload gone.
func (sn *snapshots) forget(key workloadKey) {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	delete(sn.owned, key)
}

func ownedText(v *view) string { return string(v.UID) + " " + v.Pins.String() }

// revisionPins is a revision of a workload and the pins its pod template carries.
type revisionPins struct {
	owner metav1.OwnerReference
	pins  confighash.Pins
}

// snapshotOwnerRetry is how soon a pinned workload is checked again when the
// revision of its pod template does not exist yet.
const snapshotOwnerRetry = time.Second

// snapshotGrace is how old a snapshot must be before a workload lets go of it or it
// is deleted: an admission may have just made it for a template not stored yet, or
// not yet seen by the watcher (admissions time out within 30 seconds).
const snapshotGrace = time.Minute

// ownSnapshots gives the snapshots of the pinned workload their owners, and lets go of
// those its template no longer names. Until the revision of its template exists, it
// checks again soon: its controller is making it.
func (sn *snapshots) own(ctx context.Context, key workloadKey, v *view) error {
	if sn.ownedFor(v) {
		return nil
	}
	self := metav1.OwnerReference{APIVersion: v.Kind.GroupVersion().String(), Kind: v.Kind.Kind, Name: v.Name, UID: v.UID}
	owners := []revisionPins{{self, v.Pins}}
	// Without revisions, a Job a CronJob started may still name any of its snapshots.
	versioned := keepsRevisions(v.Kind.Kind)
	current := !versioned
	if versioned {
		revs, err := sn.pinnedRevisions(ctx, v)
		if err != nil {
			return err
		}
		for _, r := range revs {
			current = current || slices.Equal(r.pins, v.Pins)
		}
		owners = append(owners, revs...)
	}
	again, gone, err := sn.reconcileOwners(ctx, v, owners, versioned)
	switch {
	case err != nil:
		return err
	case len(gone) > 0:
		// The garbage collector took them before the workload owned them (it replaced
		// one that had them, or shared them with one deleted meanwhile).
		sn.log.Warn().Str("workload", key.String()).Strs("snapshots", gone).Msg("snapshots the pod template names are gone; asking the webhook to make them again")
		if _, err := sn.workloads.touch(ctx, v, triggers(v, v.Record, sn.sources), map[string]any{confighash.AnnotationRemakeSnapshots: strings.Join(gone, " ")}); err != nil {
			return err
		}
		sn.queue.AddAfter(key, sn.retry(key))
	case !current:
		sn.queue.AddAfter(key, sn.retry(key))
	case again > 0:
		sn.queue.AddAfter(key, again)
	case len(v.Pins) == 0:
		sn.forget(key) // no longer pinned: nothing more to let go of
	default:
		sn.noteOwned(v)
	}
	return nil
}

// pinnedRevisions returns the workload's revisions with their pins: ReplicaSets for
// Deployments and Rollouts, ControllerRevisions for StatefulSets and DaemonSets; none
// for the other kinds, which keep no revisions.
func (sn *snapshots) pinnedRevisions(ctx context.Context, v *view) ([]revisionPins, error) {
	revs, err := sn.revisions.of(ctx, v)
	if err != nil {
		return nil, err
	}
	var out []revisionPins
	for _, obj := range revs.all {
		if _, template, ok := revisionTemplate(obj); ok {
			kind := "ReplicaSet"
			if _, cr := obj.(*appsv1.ControllerRevision); cr {
				kind = "ControllerRevision"
			}
			out = append(out, revisionPins{metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: obj.GetName(), UID: obj.GetUID()}, confighash.TemplatePins(template)})
		}
	}
	return out, nil
}

// reconcileOwners makes each of owners (the workload first) an owner of the snapshots
// its pins name. With letGo, the workload leaves those its template no longer names,
// and one it was the last owner of is deleted, unless a pinned workload of the
// namespace names it; one younger than snapshotGrace is left for now. again says how
// soon the workload must be checked again: soon when another wrote a snapshot's owners
// since it was read, or when the oldest of those left is old enough.
// gone are the snapshots the workload's template names that do not exist.
func (sn *snapshots) reconcileOwners(ctx context.Context, v *view, owners []revisionPins, letGo bool) (again time.Duration, gone []string, err error) {
	wanted := map[string][]metav1.OwnerReference{}
	sources := map[confighash.SourceRef]bool{}
	for _, o := range owners {
		for _, pin := range o.pins {
			wanted[pin.Snapshot()] = append(wanted[pin.Snapshot()], o.owner)
			sources[pin.SourceRef] = true
		}
	}
	for _, e := range v.Record {
		sources[e.SourceRef] = true
	}
	for _, kind := range []confighash.SourceKind{confighash.ConfigMap, confighash.Secret} {
		snapshots, err := sn.snapshotsOf(ctx, v.Namespace, kind, sources)
		if err != nil {
			return 0, nil, err
		}
		for _, pin := range v.Pins {
			if pin.Kind == kind && !slices.ContainsFunc(snapshots, func(s metav1.Object) bool { return s.GetName() == pin.Snapshot() }) {
				gone = append(gone, pin.Snapshot())
			}
		}
		for _, s := range snapshots {
			refs := slices.Clone(s.GetOwnerReferences())
			changed := false
			for _, o := range wanted[s.GetName()] {
				if !slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == o.UID }) {
					refs, changed = append(refs, o), true
				}
			}
			named := v.Pins.Names(kind, s.GetName())
			if i := slices.IndexFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == v.UID }); letGo && !named && i >= 0 {
				if age := time.Since(s.GetCreationTimestamp().Time); age < snapshotGrace {
					again = sooner(again, snapshotGrace-age)
				} else {
					refs, changed = slices.Delete(refs, i, i+1), true
				}
			}
			switch {
			case !changed:
				continue
			case len(refs) == 0 && len(sn.naming(v.Namespace, kind, s.GetName())) == 0 &&
				confighash.Sealed(sn.key, kind, s.GetNamespace(), s.GetName(), s.GetAnnotations()):
				if sn.madeSnapshot(ctx, kind, s) {
					err = sn.deleteSnapshot(ctx, kind, s)
				}
			default:
				err = sn.setOwners(ctx, kind, s, refs)
			}
			switch {
			case apierrors.IsConflict(err):
				// Another workload that shares it set its owners since it was read.
				again = sooner(again, snapshotOwnerRetry)
			case apierrors.IsNotFound(err) && named:
				gone = append(gone, s.GetName())
			case err != nil && !apierrors.IsNotFound(err):
				return 0, nil, fmt.Errorf("set the owners of the snapshot %s: %w", s.GetName(), err)
			}
		}
	}
	return again, gone, nil
}

// sooner is the sooner of two waits, where 0 is none.
func sooner(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}

// snapshotsLimits bound the list of the snapshots of a workload's sources: their
// metadata alone (those to delete are read whole, one at a time), a few for each
// source and revision. A namespace user may make more, with the label, as large as
// their quota allows: beyond the bound, the workload's snapshots are not reconciled,
// and it is tried again with backoff.
var snapshotsLimits = bounded.Limits{Page: 100, PageBytes: 2 << 20, Items: 2000, Bytes: 4 << 20}

// snapshotsOf lists the metadata of the namespace's snapshots of the sources of the
// kind.
func (sn *snapshots) snapshotsOf(ctx context.Context, namespace string, kind confighash.SourceKind, sources map[confighash.SourceRef]bool) ([]metav1.Object, error) {
	var names []string
	for ref := range sources {
		if ref.Kind == kind {
			names = append(names, confighash.SnapshotOf(ref.Name))
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	of, err := labels.NewRequirement(confighash.LabelSnapshotOf, selection.In, names)
	if err != nil {
		return nil, err
	}
	opts := metav1.ListOptions{LabelSelector: labels.NewSelector().Add(*of).String()}
	res := bounded.Resource{GroupVersionResource: sourcecache.Resource(kind), Namespace: namespace}
	l, err := bounded.List[metav1.PartialObjectMetadata](ctx, sn.reads, res, opts, snapshotsLimits)
	if err != nil {
		return nil, err
	}
	return objects(pointers(l)), nil
}

// naming returns the pinned workloads of the namespace whose templates name the
// snapshot: another workload may share it, and not own it yet.
func (sn *snapshots) naming(namespace string, kind confighash.SourceKind, snapshot string) []*view {
	return sn.workloads.inNamespace(namespace, func(u *view) bool { return u.Pins.Names(kind, snapshot) })
}

// setOwners writes the snapshot's owners. The resourceVersion makes it fail, rather
// than drop another's owner, when the snapshot changed since it was read.
func (sn *snapshots) setOwners(ctx context.Context, kind confighash.SourceKind, s metav1.Object, refs []metav1.OwnerReference) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": s.GetResourceVersion(), "ownerReferences": refs}})
	opts := metav1.PatchOptions{FieldManager: FieldManager}
	var err error
	if kind == confighash.ConfigMap {
		_, err = sn.client.CoreV1().ConfigMaps(s.GetNamespace()).Patch(ctx, s.GetName(), types.MergePatchType, patch, opts)
	} else {
		_, err = sn.client.CoreV1().Secrets(s.GetNamespace()).Patch(ctx, s.GetName(), types.MergePatchType, patch, opts)
	}
	return err
}

// deleteSnapshot deletes the snapshot if it is still as read.
func (sn *snapshots) deleteSnapshot(ctx context.Context, kind confighash.SourceKind, s metav1.Object) error {
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(s.GetUID()), ResourceVersion: ptr.To(s.GetResourceVersion())}}
	if kind == confighash.ConfigMap {
		return sn.client.CoreV1().ConfigMaps(s.GetNamespace()).Delete(ctx, s.GetName(), opts)
	}
	return sn.client.CoreV1().Secrets(s.GetNamespace()).Delete(ctx, s.GetName(), opts)
}

// recheck checks the workload's snapshots' owners again.
func (sn *snapshots) recheck(v *view) {
	sn.forget(keyOf(v))
	sn.queue.Add(keyOf(v))
}

// keepsRevisions reports whether workloads of the kind keep revisions of their pod
// template that can own snapshots.
func keepsRevisions(kind string) bool {
	return slices.Contains([]string{confighash.Deployment.Kind, confighash.StatefulSet.Kind, confighash.DaemonSet.Kind, confighash.Rollout.Kind}, kind)
}
