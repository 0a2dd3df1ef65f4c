package watcher

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/confighash/confighash"
)

// firstMet reports whether the workload has never been hashed, recorded or adopted:
// confighash meets a running workload for the first time (namespace just enabled,
// annotation just added, installed over Reloader).
func firstMet(v *view) bool {
	return v.Hash == "" && v.Adopted == "" && v.Record == nil && v.RecordErr == nil
}

// adoptable reports whether the pods of a workload met for the first time can only
// have the current data: no counted source was written after the oldest revision that
// may still run pods was created (DESIGN rule 8). Times are to the second, so a write
// in the same second as the revision counts as after it. A CronJob's next run reads
// the current data anyway.
func (w *Watcher) adoptable(ctx context.Context, v *view, want confighash.Record) (bool, error) {
	if v.Kind.Kind == confighash.CronJob.Kind {
		return true, nil
	}
	created, err := w.revisionCreated(ctx, v)
	if err != nil {
		return false, fmt.Errorf("read the revisions of %s %s/%s: %w", v.Kind.Kind, v.Namespace, v.Name, err)
	}
	for _, e := range want {
		if !e.Seen || e.Absent {
			continue
		}
		d, ok := w.sources.Lookup(v.Namespace, e.SourceRef)
		if !ok || !d.Written.Before(created) {
			return false, nil
		}
	}
	return true, nil
}

// revisionCreated returns when the oldest revision of the workload that may still run
// pods was created; now, when it has none yet.
func (w *Watcher) revisionCreated(ctx context.Context, v *view) (time.Time, error) {
	apps := w.cfg.Client.AppsV1()
	switch v.Kind.Kind {
	case confighash.Deployment.Kind:
		d, err := apps.Deployments(v.Namespace).Get(ctx, v.Name, metav1.GetOptions{})
		if err != nil {
			return time.Time{}, err
		}
		return w.replicaSetsCreated(ctx, v, d.Spec.Selector)
	case confighash.Rollout.Kind:
		gvr := confighash.Rollout.GroupVersion().WithResource(confighash.Rollout.Resource)
		u, err := w.cfg.Dynamic.Resource(gvr).Namespace(v.Namespace).Get(ctx, v.Name, metav1.GetOptions{})
		if err != nil {
			return time.Time{}, err
		}
		selector := &metav1.LabelSelector{}
		if raw, ok, _ := unstructured.NestedMap(u.Object, "spec", "selector"); ok {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, selector); err != nil {
				return time.Time{}, err
			}
		}
		return w.replicaSetsCreated(ctx, v, selector)
	case confighash.StatefulSet.Kind:
		s, err := apps.StatefulSets(v.Namespace).Get(ctx, v.Name, metav1.GetOptions{})
		if err != nil {
			return time.Time{}, err
		}
		revisions, err := w.controllerRevisions(ctx, v, s.Spec.Selector)
		if err != nil {
			return time.Time{}, err
		}
		// Pods run the current revision, and during a rollout the update revision.
		return oldest(revisions, func(r *appsv1.ControllerRevision) bool {
			return r.Name == s.Status.CurrentRevision || r.Name == s.Status.UpdateRevision
		}), nil
	case confighash.DaemonSet.Kind:
		d, err := apps.DaemonSets(v.Namespace).Get(ctx, v.Name, metav1.GetOptions{})
		if err != nil {
			return time.Time{}, err
		}
		revisions, err := w.controllerRevisions(ctx, v, d.Spec.Selector)
		if err != nil {
			return time.Time{}, err
		}
		latest := int64(0)
		for _, r := range revisions {
			latest = max(latest, r.Revision)
		}
		// Until every pod runs the latest revision, any older one may still run.
		updated := d.Status.UpdatedNumberScheduled >= d.Status.DesiredNumberScheduled
		return oldest(revisions, func(r *appsv1.ControllerRevision) bool { return !updated || r.Revision == latest }), nil
	}
	return time.Time{}, fmt.Errorf("unsupported kind %s", v.Kind.Kind)
}

// replicaSetsCreated returns when the oldest of the workload's ReplicaSets that has
// pods, or is its newest, was created.
func (w *Watcher) replicaSetsCreated(ctx context.Context, v *view, selector *metav1.LabelSelector) (time.Time, error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return time.Time{}, err
	}
	list, err := w.cfg.Client.AppsV1().ReplicaSets(v.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return time.Time{}, err
	}
	var owned []*appsv1.ReplicaSet
	var newest *appsv1.ReplicaSet
	for i := range list.Items {
		rs := &list.Items[i]
		if !ownedBy(rs.OwnerReferences, v.UID) {
			continue
		}
		owned = append(owned, rs)
		if newest == nil || revisionOf(rs) > revisionOf(newest) {
			newest = rs
		}
	}
	return oldest(owned, func(rs *appsv1.ReplicaSet) bool { return rs == newest || rs.Status.Replicas > 0 }), nil
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

func (w *Watcher) controllerRevisions(ctx context.Context, v *view, selector *metav1.LabelSelector) ([]*appsv1.ControllerRevision, error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, err
	}
	list, err := w.cfg.Client.AppsV1().ControllerRevisions(v.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	var owned []*appsv1.ControllerRevision
	for i := range list.Items {
		if ownedBy(list.Items[i].OwnerReferences, v.UID) {
			owned = append(owned, &list.Items[i])
		}
	}
	return owned, nil
}

func ownedBy(refs []metav1.OwnerReference, uid types.UID) bool {
	return slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == uid })
}

// oldest returns the earliest creation time among the objects keep selects, or now
// when it selects none.
func oldest[T metav1.Object](objs []T, keep func(T) bool) time.Time {
	t := time.Now()
	for _, o := range objs {
		if created := o.GetCreationTimestamp().Time; keep(o) && created.Before(t) {
			t = created
		}
	}
	return t
}

// adopt records the workload's sources and marks it adopted at their hash, so that
// its pod template stays as it is, without a rollout, until a source changes.
func (w *Watcher) adopt(ctx context.Context, key workloadKey, v *view, want confighash.Record) error {
	hash := want.Hash(w.cfg.Key)
	admitted, err := w.patch(ctx, v, map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		confighash.AnnotationSources: want.String(), confighash.AnnotationAdopted: hash,
	}}})
	if err != nil {
		w.cfg.Metrics.Touch(TouchError)
		return err
	}
	if admitted == nil {
		w.done(key)
		return nil
	}
	if !slices.Equal(admitted.Record, want) || !confighash.Settled(admitted.Hash, admitted.Adopted, hash) {
		// A source changed meanwhile, and the webhook hashed the workload: it rolls.
		w.cfg.Metrics.Touch(TouchNotConverged)
		return errNotConverged
	}
	w.cfg.Metrics.Touch(TouchAdopted)
	w.cfg.Events.Event(objectRef(v), corev1.EventTypeNormal, "Adopted",
		fmt.Sprintf("its pods already have the current data of its %d sources: recorded without a rollout", len(want)))
	w.converged(key)
	return nil
}
