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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/confighash/confighash"
)

// What the running pods of a workload hold, found out for the sources that started
// to count, or for a workload met for the first time (DESIGN rule 8).

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
	if d, err = w.decide(v, confighash.Pods{Proven: proven}); err != nil {
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
	admitted, err := w.patch(ctx, v, map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		confighash.AnnotationSources: d.Record.Text(d.Form), confighash.AnnotationAdopted: adopted,
		confighash.AnnotationTrigger: confighash.FormatTriggers(trig),
	}}})
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
	var n int
	switch ref.Kind {
	case confighash.ConfigMap:
		list, err := w.cfg.Client.CoreV1().ConfigMaps(namespace).List(ctx, opts)
		if err != nil {
			return false, historyGone(err)
		}
		n = len(list.Items)
	case confighash.Secret:
		list, err := w.cfg.Client.CoreV1().Secrets(namespace).List(ctx, opts)
		if err != nil {
			return false, historyGone(err)
		}
		n = len(list.Items)
	}
	return n == 0, nil
}

// historyGone returns nil for an error saying the API server no longer keeps the
// version asked for: not known, rather than a failure.
func historyGone(err error) error {
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return nil
	}
	return err
}

// revisions lists the revisions of a workload: its ReplicaSets or ControllerRevisions.
type revisions struct {
	list func(ctx context.Context, opts metav1.ListOptions) ([]metav1.Object, error)
	// running are those that may still run pods.
	running []metav1.Object
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
		then, err := revs.list(ctx, metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
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
		u, err := w.dynamic(v).Get(ctx, v.Name, metav1.GetOptions{})
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
	byName := fields.OneTermEqualSelector("metadata.name", v.Name).String()
	list := func(ctx context.Context, opts metav1.ListOptions) ([]metav1.Object, error) {
		opts.FieldSelector = byName
		l, err := w.dynamic(v).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		out := make([]metav1.Object, len(l.Items))
		for i := range l.Items {
			out[i] = &l.Items[i]
		}
		return out, nil
	}
	u, err := w.dynamic(v).Get(ctx, v.Name, metav1.GetOptions{})
	if err != nil {
		return revisions{}, err
	}
	return revisions{list: list, running: []metav1.Object{u}}, nil
}

// replicaSets returns the workload's ReplicaSets; those that have pods, and the
// newest, may run pods.
func (w *Watcher) replicaSets(ctx context.Context, v *view, selector *metav1.LabelSelector) (revisions, error) {
	list := func(ctx context.Context, opts metav1.ListOptions) ([]appsv1.ReplicaSet, error) {
		l, err := w.cfg.Client.AppsV1().ReplicaSets(v.Namespace).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		return l.Items, nil
	}
	return ownedRevisions(ctx, v, selector, list, func(all []*appsv1.ReplicaSet, rs *appsv1.ReplicaSet) bool {
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
	list := func(ctx context.Context, opts metav1.ListOptions) ([]appsv1.ControllerRevision, error) {
		l, err := w.cfg.Client.AppsV1().ControllerRevisions(v.Namespace).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		return l.Items, nil
	}
	return ownedRevisions(ctx, v, selector, list, keep)
}

// ownedRevisions lists the revisions of the workload with its selector, those it
// owns, and keeps as running those keep selects.
func ownedRevisions[T any, P interface {
	*T
	metav1.Object
}](ctx context.Context, v *view, selector *metav1.LabelSelector, list func(context.Context, metav1.ListOptions) ([]T, error), keep func(all []P, r P) bool) (revisions, error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return revisions{}, err
	}
	owned := func(ctx context.Context, opts metav1.ListOptions) ([]P, error) {
		opts.LabelSelector = sel.String()
		items, err := list(ctx, opts)
		if err != nil {
			return nil, err
		}
		return ownedBy[T, P](items, v.UID), nil
	}
	all, err := owned(ctx, metav1.ListOptions{})
	if err != nil {
		return revisions{}, err
	}
	revs := revisions{list: func(ctx context.Context, opts metav1.ListOptions) ([]metav1.Object, error) {
		l, err := owned(ctx, opts)
		return objects(l), err
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
