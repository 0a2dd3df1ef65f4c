package watcher

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/bounded"
	"github.com/confighash/confighash/sourcecache"
)

// The sweep deletes, in the namespaces confighash acts in, the snapshots confighash
// made (sealed, confighash.Sealed) that have had no owner holding them for longer than
// the sweep interval and that no workload it acts on names, in its template or in a
// revision. They come from a create the API server refused after the webhook had made
// them, from a workload whose pins moved on before the watcher first saw it, or from
// a review a client forged and posted to the webhook. One a revision still names gets
// its owners from its workload's check instead. A sweep makes at most sweepCalls API
// calls, whatever the number of snapshots and workloads: the next goes on from where
// it stopped.

// sweepCalls bounds the API calls of one sweep: pages listed, revisions read (two calls
// per workload, once a sweep) and deletes.
const sweepCalls = 200

// sweepLimits bound the list of a namespace's snapshots: their metadata alone, a page
// of sweepLimits.Page at a time, each page capped in bytes (a namespace user may make
// objects with the label, as large as their quota allows); the sweep's calls bound the
// pages.
var sweepLimits = bounded.Limits{Page: 100, PageBytes: 2 << 20, Items: 1 << 20, Bytes: 1 << 30}

// errSweepSpent stops a list when the sweep's calls are spent.
var errSweepSpent = errors.New("the sweep's calls are spent")

// sweep is one sweep's state.
type sweep struct {
	calls int
	// revisions are the workloads' revisions read in this sweep, by workload UID.
	revisions map[types.UID][]revisionPins
}

// spend reports whether n more calls fit in the sweep, and counts them.
func (s *sweep) spend(n int) bool {
	if s.calls+n > sweepCalls {
		return false
	}
	s.calls += n
	return true
}

// sweep sweeps each kind of each namespace confighash acts in, in turn, from
// where the last sweep stopped, until the calls are spent.
func (sn *snapshots) sweep(ctx context.Context) {
	s := &sweep{revisions: map[types.UID][]revisionPins{}}
	defer func() { sn.metrics.SweepCalls(s.calls) }()
	namespaces, err := sn.workloads.actingNamespaces(ctx, &s.calls)
	if err != nil {
		sn.log.Warn().Err(err).Msg("list namespaces to sweep")
		return
	}
	var at []string
	for _, kind := range []confighash.SourceKind{confighash.ConfigMap, confighash.Secret} {
		for _, ns := range namespaces {
			at = append(at, string(kind)+"/"+ns)
		}
	}
	// The lists after the one the last sweep stopped in come first: however many
	// namespaces there are, each is swept in its turn.
	start := max(0, slices.Index(at, sn.at))
	for i := range at {
		next := at[(start+i)%len(at)]
		kind, ns, _ := strings.Cut(next, "/")
		if !sn.sweepList(ctx, s, confighash.SourceKind(kind), ns) {
			sn.at = next
			return
		}
	}
	sn.at = ""
}

// sweepList sweeps the snapshots of a kind in a namespace, a page at a time, from where
// the last sweep stopped. It reports false when the calls ran out first.
func (sn *snapshots) sweepList(ctx context.Context, s *sweep, kind confighash.SourceKind, namespace string) bool {
	at := string(kind) + "/" + namespace
	from := sn.from[at]
	if s.calls >= sweepCalls {
		return false
	}
	res := bounded.Resource{GroupVersionResource: sourcecache.Resource(kind), Namespace: namespace}
	err := bounded.Each(ctx, sn.reads, res, metav1.ListOptions{LabelSelector: confighash.LabelSnapshotOf}, sweepLimits, func(items []metav1.PartialObjectMetadata) error {
		s.calls++ // the call that listed the page
		for i := range items {
			item := &items[i]
			// Lists are in key order: what the last sweep looked at is behind.
			if key := item.Namespace + "/" + item.Name; key > from {
				if !sn.sweepOne(ctx, s, kind, item) {
					return errSweepSpent
				}
				sn.from[at] = key
			}
		}
		if s.calls >= sweepCalls {
			return errSweepSpent // none left for the next page
		}
		return nil
	})
	switch {
	case errors.Is(err, errSweepSpent):
		return false
	case err != nil:
		s.calls++
		sn.log.Warn().Err(err).Str("kind", string(kind)).Str("namespace", namespace).Msg("list snapshots to sweep")
		return true
	}
	delete(sn.from, at)
	return true
}

// sweepOne deletes the snapshot if it is the second sweep in a row to find it made by
// confighash, old enough, and held and named by nothing. It reports false when the
// calls ran out before it could tell.
func (sn *snapshots) sweepOne(ctx context.Context, s *sweep, kind confighash.SourceKind, item *metav1.PartialObjectMetadata) bool {
	if time.Since(item.CreationTimestamp.Time) < sn.every || sn.workloads.mode(item.Namespace) == confighash.ModeOff ||
		!confighash.Sealed(sn.key, kind, item.Namespace, item.Name, item.Annotations) || sn.ownerHolds(kind, item) {
		delete(sn.candidates, item.UID)
		return true
	}
	named, ok := sn.sweptNamed(ctx, s, kind, item)
	switch {
	case !ok:
		return false
	case named:
		delete(sn.candidates, item.UID)
		return true
	case !sn.candidates[item.UID]:
		// Deleted at the sweep after the one that first found it so: a create admitted
		// meanwhile that names it is seen, and its workload owns it.
		sn.candidates[item.UID] = true
		return true
	case !s.spend(2): // a read of its data, and the delete
		return false
	case !sn.madeSnapshot(ctx, kind, item):
		// Sealed, but mutable or holding other data: a copy someone made of a snapshot.
		delete(sn.candidates, item.UID)
		return true
	}
	delete(sn.candidates, item.UID)
	if err := sn.deleteSnapshot(ctx, kind, item); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		sn.log.Warn().Err(err).Str("namespace", item.Namespace).Str("snapshot", item.Name).Msg("delete a snapshot nothing names")
		return true
	}
	sn.metrics.SnapshotSwept()
	sn.log.Info().Str("namespace", item.Namespace).Str("kind", string(kind)).Str("snapshot", item.Name).Msg("deleted a snapshot nothing owned or named")
	return true
}

// ownerHolds reports whether an owner of the snapshot holds it: a revision (only the
// watcher makes one an owner, of the snapshots its template names), or the workload
// the owner reference names, with that UID, whose template names the snapshot or which
// may use its source (acted on or not: one no longer opted in may still name it). The
// webhook takes an update's owner UID from the review it is sent: one that is not the
// named workload's, or whose workload has nothing to do with the snapshot, came from a
// forged review, and holds nothing.
func (sn *snapshots) ownerHolds(kind confighash.SourceKind, snapshot metav1.Object) bool {
	source := snapshotSource(kind, snapshot)
	for _, ref := range snapshot.GetOwnerReferences() {
		if ref.APIVersion == "apps/v1" && (ref.Kind == "ReplicaSet" || ref.Kind == "ControllerRevision") {
			return true
		}
		v := sn.workloads.lookup(workloadKey{ref.Kind, snapshot.GetNamespace(), ref.Name})
		if v == nil || v.UID != ref.UID {
			continue
		}
		if v.Pins.Names(kind, snapshot.GetName()) || v.mayHold(source) {
			return true
		}
	}
	return false
}

// sweptNamed reports whether a workload confighash acts on in the snapshot's namespace
// names it, in its template or in one of its revisions, each workload's revisions read
// once a sweep; a workload whose revision names it is checked again, to own it. On an
// error it answers yes: the snapshot waits for the next sweep. ok is false when the
// calls ran out before it could tell.
func (sn *snapshots) sweptNamed(ctx context.Context, s *sweep, kind confighash.SourceKind, snapshot metav1.Object) (named, ok bool) {
	if naming := sn.naming(snapshot.GetNamespace(), kind, snapshot.GetName()); len(naming) > 0 {
		for _, v := range naming {
			sn.recheck(v)
		}
		return true, true
	}
	source := snapshotSource(kind, snapshot)
	users := sn.workloads.inNamespace(snapshot.GetNamespace(), func(v *view) bool { return keepsRevisions(v.Kind.Kind) && v.mayHold(source) })
	for _, v := range users {
		revs, read := s.revisions[v.UID]
		if !read {
			if !s.spend(2) { // the workload, and its revisions
				return false, false
			}
			var err error
			if revs, err = sn.pinnedRevisions(ctx, v); err != nil {
				return true, true
			}
			s.revisions[v.UID] = revs
		}
		for _, r := range revs {
			if r.pins.Names(kind, snapshot.GetName()) {
				sn.recheck(v)
				return true, true
			}
		}
	}
	return false, true
}
