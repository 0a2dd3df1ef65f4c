package watcher

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/bounded"
	"github.com/confighash/confighash/sourcecache"
)

// What the running pods of a workload hold, found out for the sources that started
// to count, or for a workload met for the first time (rule 8).

// record writes the record of a workload whose sources started to count, from what its
// running pods hold: without a rollout where they hold the current data, rolled once
// otherwise; a workload met for the first time is adopted or rolled. The webhook
// writes the hash from the record at the admission of this write.
func (w *Watcher) record(ctx context.Context, key workloadKey, v *view, d confighash.Decision) error {
	proven, err := w.proven(ctx, v, d.Observations)
	if err != nil {
		return fmt.Errorf("find out what the pods of %s %s/%s hold: %w", v.Kind.Kind, v.Namespace, v.Name, err)
	}
	counted := d.Unproven
	if d, err = w.decider.decide(v, confighash.Pods{Proven: proven}); err != nil {
		return w.notDecided(key, v, err)
	}
	if d.Record == nil {
		return fmt.Errorf("%s %s/%s: sources still unproven: %v", v.Kind.Kind, v.Namespace, v.Name, d.Unproven)
	}
	if d.Hash != v.Hash {
		w.tracking.pause(key, d.Policy.PausePeriod)
		counted = nil
	}
	var adopted any // removed unless adopted
	if d.Adopted != "" {
		adopted = d.Adopted
	}
	trig := triggers(v, d.Record, w.sources)
	said := confighash.Status{Act: confighash.ActAdopted, At: time.Now(),
		Why: fmt.Sprintf("its pods already hold the current data of its %d sources: recorded without a rollout", len(d.Record))}
	switch {
	case len(counted) > 0:
		said.Why = confighash.ListRefs(counted) + " started to count, and its pods already hold the data: recorded without a rollout"
	case d.Hash != v.Hash:
		said = rolled(trig, d.Policy.PausePeriod)
	}
	admitted, err := w.workloads.patch(ctx, v, annotationsPatch(map[string]any{
		confighash.AnnotationSources: d.Record.Text(d.Form), confighash.AnnotationAdopted: adopted,
		confighash.AnnotationTrigger: confighash.FormatTriggers(trig), confighash.AnnotationStatus: said.Text(),
	}))
	return w.verify(key, v, d, trig, counted, admitted, err)
}

// proven tells, for each source that exists, whether the workload's running pods
// provably hold its current data: it was written before their revision was created,
// or, for a required source, it was never written after its creation, since the pods
// could not start without it. A CronJob's next run reads the current data.
func (w *Watcher) proven(ctx context.Context, v *view, observations []confighash.Observation) (map[confighash.SourceRef]bool, error) {
	proven := map[confighash.SourceRef]bool{}
	written := map[confighash.SourceRef]confighash.Written{}
	var versions []string
	for _, o := range observations {
		if !o.Present {
			continue
		}
		proven[o.SourceRef] = v.Kind.Kind == confighash.CronJob.Kind
		if o.Kind == confighash.SecretProviderClass {
			// Its pods report what they hold: every one the current versions, or not.
			d, ok := w.sources.Lookup(v.Namespace, o.SourceRef)
			proven[o.SourceRef] = ok && d.Uniform
			continue
		}
		if d, ok := w.sources.Lookup(v.Namespace, o.SourceRef); ok {
			wr := w.written.of(d)
			written[o.SourceRef] = wr
			versions = append(versions, wr.ResourceVersion)
		}
	}
	if v.Kind.Kind == confighash.CronJob.Kind {
		return proven, nil
	}
	running, err := w.running(ctx, v, versions)
	if err != nil {
		return nil, err
	}
	for _, o := range observations {
		wr, ok := written[o.SourceRef]
		if !ok {
			continue
		}
		if proven[o.SourceRef] = running.Holds(wr); proven[o.SourceRef] || o.Optional {
			continue
		}
		if proven[o.SourceRef], err = w.neverRewritten(ctx, v.Namespace, o.SourceRef, wr); err != nil {
			return nil, err
		}
	}
	return proven, nil
}

// neverRewritten reports whether a source's data was last written when it was
// created: no later second in its metadata, and, while the API server keeps the
// history, absent just before that write.
func (w *Watcher) neverRewritten(ctx context.Context, namespace string, ref confighash.SourceRef, wr confighash.Written) (bool, error) {
	d, ok := w.sources.Lookup(namespace, ref)
	before, err := strconv.ParseUint(wr.ResourceVersion, 10, 64)
	if !ok || !d.Created().Equal(wr.Time) || err != nil || before < 2 {
		return false, nil
	}
	opts := metav1.ListOptions{
		FieldSelector:        fields.OneTermEqualSelector("metadata.name", ref.Name).String(),
		ResourceVersion:      strconv.FormatUint(before-1, 10),
		ResourceVersionMatch: metav1.ResourceVersionMatchExact,
	}
	res := bounded.Resource{GroupVersionResource: sourcecache.Resource(ref.Kind), Namespace: namespace}
	then, err := bounded.List[metav1.PartialObjectMetadata](ctx, w.cfg.Reads, res, opts, byNameLimits)
	if err != nil {
		return false, historyGone(err)
	}
	return len(then) == 0, nil
}

// Bounds on the lists of a workload's revisions, which a namespace user may make as
// many and as large as their quota allows, with the workload's labels and owner:
// revisionsLimits on those read whole, for what their pod templates name and whether
// they run pods (a Deployment keeps 11 by default, of a few KiB each);
// versionLimits on their metadata at an earlier version; byNameLimits on a list of one
// object by its name. A list beyond them is an error: the workload is neither adopted
// nor rolled from what fits, and is tried again with backoff.
var (
	revisionsLimits = bounded.Limits{Page: 50, PageBytes: 4 << 20, Items: 1000, Bytes: 4 << 20}
	versionLimits   = bounded.Limits{Page: 100, PageBytes: 2 << 20, Items: 1000, Bytes: 4 << 20}
	byNameLimits    = bounded.Limits{Page: 10, PageBytes: 2 << 20, Items: 10, Bytes: 2 << 20}
)

// objectBytes caps the read of one object's metadata: an object is at most about
// 1.5 MiB.
const objectBytes = 2 << 20

// historyGone returns nil for an error saying the API server no longer keeps the
// version asked for: not known, rather than a failure.
func historyGone(err error) error {
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return nil
	}
	return err
}

// revisions are the revisions of a workload: its ReplicaSets or ControllerRevisions.
type revisions struct {
	// all are the revisions, read whole; running those that may still run pods.
	all, running []metav1.Object
	// at lists the revisions at an earlier resource version, their metadata alone.
	at func(ctx context.Context, resourceVersion string) ([]metav1.Object, error)
}

// running returns what is known of when the workload's running pods started: the
// creation of the oldest revision that may run pods, and the newest of versions at
// which none of those revisions existed yet, while the API server keeps them.
func (w *Watcher) running(ctx context.Context, v *view, versions []string) (confighash.Running, error) {
	revs, err := w.revisions(ctx, v)
	if err != nil {
		return confighash.Running{}, err
	}
	r := confighash.Running{Since: time.Now()}
	uids := make([]types.UID, len(revs.running))
	for i, rev := range revs.running {
		uids[i] = rev.GetUID()
		if created := rev.GetCreationTimestamp().Time; created.Before(r.Since) {
			r.Since = created
		}
	}
	slices.SortFunc(versions, func(a, b string) int {
		newer, _ := resourceversion.CompareResourceVersion(b, a)
		return newer
	})
	for _, rv := range slices.Compact(versions) {
		then, err := revs.at(ctx, rv)
		if err != nil {
			return r, historyGone(err)
		}
		if !slices.ContainsFunc(then, func(o metav1.Object) bool { return slices.Contains(uids, o.GetUID()) }) {
			r.AbsentAt = rv // and so at every earlier version
			break
		}
	}
	return r, nil
}

// revisions returns the workload's revisions, and those that may run pods.
func (w *Watcher) revisions(ctx context.Context, v *view) (revisions, error) {
	apps := w.cfg.Client.AppsV1()
	switch v.Kind.Kind {
	case confighash.Deployment.Kind:
		d, err := apps.Deployments(v.Namespace).Get(ctx, v.Name, metav1.GetOptions{})
		if err != nil {
			return revisions{}, err
		}
		return w.replicaSets(ctx, v, d.Spec.Selector)
	case confighash.Rollout.Kind:
		u, err := w.workloads.resource(v).Get(ctx, v.Name, metav1.GetOptions{})
		if err != nil {
			return revisions{}, err
		}
		selector := &metav1.LabelSelector{}
		if raw, ok, _ := unstructured.NestedMap(u.Object, "spec", "selector"); ok {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, selector); err != nil {
				return revisions{}, err
			}
		}
		return w.replicaSets(ctx, v, selector)
	case confighash.StatefulSet.Kind:
		s, err := apps.StatefulSets(v.Namespace).Get(ctx, v.Name, metav1.GetOptions{})
		if err != nil {
			return revisions{}, err
		}
		// Pods run the current revision, and during a rollout the update revision.
		return w.controllerRevisions(ctx, v, s.Spec.Selector, func(all []*appsv1.ControllerRevision, r *appsv1.ControllerRevision) bool {
			return r.Name == s.Status.CurrentRevision || r.Name == s.Status.UpdateRevision
		})
	case confighash.DaemonSet.Kind:
		d, err := apps.DaemonSets(v.Namespace).Get(ctx, v.Name, metav1.GetOptions{})
		if err != nil {
			return revisions{}, err
		}
		// Until every pod runs the latest revision, any older one may still run.
		updated := d.Status.UpdatedNumberScheduled >= d.Status.DesiredNumberScheduled
		return w.controllerRevisions(ctx, v, d.Spec.Selector, func(all []*appsv1.ControllerRevision, r *appsv1.ControllerRevision) bool {
			return !updated || !slices.ContainsFunc(all, func(o *appsv1.ControllerRevision) bool { return o.Revision > r.Revision })
		})
	}
	return w.itself(ctx, v)
}

// itself returns the workload as its only revision, for a kind whose revisions are
// unknown: its pods all started after it was created, so a source written before that
// is held by every one of them.
func (w *Watcher) itself(ctx context.Context, v *view) (revisions, error) {
	res := bounded.Resource{GroupVersionResource: v.Kind.GroupVersion().WithResource(v.Kind.Resource), Namespace: v.Namespace}
	byName := fields.OneTermEqualSelector("metadata.name", v.Name).String()
	at := func(ctx context.Context, rv string) ([]metav1.Object, error) {
		opts := metav1.ListOptions{FieldSelector: byName, ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact}
		l, err := bounded.List[metav1.PartialObjectMetadata](ctx, w.cfg.Reads, res, opts, byNameLimits)
		return objects(pointers(l)), err
	}
	u, err := bounded.Get[metav1.PartialObjectMetadata](ctx, w.cfg.Reads, res, v.Name, objectBytes)
	if err != nil {
		return revisions{}, err
	}
	return revisions{all: []metav1.Object{u}, running: []metav1.Object{u}, at: at}, nil
}

// replicaSets returns the workload's ReplicaSets; those that have pods, and the
// newest, may run pods.
func (w *Watcher) replicaSets(ctx context.Context, v *view, selector *metav1.LabelSelector) (revisions, error) {
	return ownedRevisions(ctx, w.cfg.Reads, v, appsv1.SchemeGroupVersion.WithResource("replicasets"), selector, func(all []*appsv1.ReplicaSet, rs *appsv1.ReplicaSet) bool {
		return rs.Status.Replicas > 0 || !slices.ContainsFunc(all, func(o *appsv1.ReplicaSet) bool { return revisionOf(o) > revisionOf(rs) })
	})
}

// revisionOf is a ReplicaSet's revision number, as its Deployment or Rollout sets it.
func revisionOf(rs *appsv1.ReplicaSet) int64 {
	for _, key := range []string{"deployment.kubernetes.io/revision", "rollout.argoproj.io/revision"} {
		if n, err := strconv.ParseInt(rs.Annotations[key], 10, 64); err == nil {
			return n
		}
	}
	return 0
}

// controllerRevisions returns the workload's ControllerRevisions; those keep selects
// may run pods.
func (w *Watcher) controllerRevisions(ctx context.Context, v *view, selector *metav1.LabelSelector, keep func(all []*appsv1.ControllerRevision, r *appsv1.ControllerRevision) bool) (revisions, error) {
	return ownedRevisions(ctx, w.cfg.Reads, v, appsv1.SchemeGroupVersion.WithResource("controllerrevisions"), selector, keep)
}

// ownedRevisions lists the revisions of the workload with its selector, those it
// owns, and keeps as running those keep selects.
func ownedRevisions[T any, P interface {
	*T
	metav1.Object
}](ctx context.Context, r *bounded.Reader, v *view, gvr schema.GroupVersionResource, selector *metav1.LabelSelector, keep func(all []P, r P) bool) (revisions, error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return revisions{}, err
	}
	res := bounded.Resource{GroupVersionResource: gvr, Namespace: v.Namespace}
	items, err := bounded.List[T](ctx, r, res, metav1.ListOptions{LabelSelector: sel.String()}, revisionsLimits)
	if err != nil {
		return revisions{}, err
	}
	all := ownedBy[T, P](items, v.UID)
	revs := revisions{all: objects(all), at: func(ctx context.Context, rv string) ([]metav1.Object, error) {
		opts := metav1.ListOptions{LabelSelector: sel.String(), ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact}
		l, err := bounded.List[metav1.PartialObjectMetadata](ctx, r, res, opts, versionLimits)
		return objects(ownedBy(l, v.UID)), err
	}}
	for _, r := range all {
		if keep(all, r) {
			revs.running = append(revs.running, r)
		}
	}
	return revs, nil
}

func objects[T metav1.Object](l []T) []metav1.Object {
	out := make([]metav1.Object, len(l))
	for i, o := range l {
		out[i] = o
	}
	return out
}

// ownedBy returns the items the workload with this uid owns.
func ownedBy[T any, P interface {
	*T
	metav1.Object
}](items []T, uid types.UID) []P {
	var owned []P
	for i := range items {
		p := P(&items[i])
		if slices.ContainsFunc(p.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == uid }) {
			owned = append(owned, p)
		}
	}
	return owned
}
