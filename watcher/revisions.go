package watcher

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/bounded"
)

// revisionReader reads the revisions of a workload, its ReplicaSets or
// ControllerRevisions, bounded in bytes: a namespace user may make them as many and as
// large as their quota allows.
type revisionReader struct {
	client    kubernetes.Interface
	workloads *workloads
	reads     *bounded.Reader
}

// revisions are the revisions of a workload: its ReplicaSets or ControllerRevisions.
type revisions struct {
	// all are the revisions, read whole; running those that may still run pods.
	all, running []metav1.Object
	// at lists the revisions at an earlier resource version, their metadata alone.
	at func(ctx context.Context, resourceVersion string) ([]metav1.Object, error)
}

// of returns the workload's revisions, and those that may run pods.
func (r *revisionReader) of(ctx context.Context, v *view) (revisions, error) {
	apps := r.client.AppsV1()
	switch v.Kind.Kind {
	case confighash.Deployment.Kind:
		d, err := apps.Deployments(v.Namespace).Get(ctx, v.Name, metav1.GetOptions{})
		if err != nil {
			return revisions{}, err
		}
		return r.replicaSets(ctx, v, d.Spec.Selector)
	case confighash.Rollout.Kind:
		u, err := r.workloads.resource(v).Get(ctx, v.Name, metav1.GetOptions{})
		if err != nil {
			return revisions{}, err
		}
		selector := &metav1.LabelSelector{}
		if raw, ok, _ := unstructured.NestedMap(u.Object, "spec", "selector"); ok {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, selector); err != nil {
				return revisions{}, err
			}
		}
		return r.replicaSets(ctx, v, selector)
	case confighash.StatefulSet.Kind:
		s, err := apps.StatefulSets(v.Namespace).Get(ctx, v.Name, metav1.GetOptions{})
		if err != nil {
			return revisions{}, err
		}
		// Pods run the current revision, and during a rollout the update revision.
		return r.controllerRevisions(ctx, v, s.Spec.Selector, func(all []*appsv1.ControllerRevision, r *appsv1.ControllerRevision) bool {
			return r.Name == s.Status.CurrentRevision || r.Name == s.Status.UpdateRevision
		})
	case confighash.DaemonSet.Kind:
		d, err := apps.DaemonSets(v.Namespace).Get(ctx, v.Name, metav1.GetOptions{})
		if err != nil {
			return revisions{}, err
		}
		// Until every pod runs the latest revision, any older one may still run.
		updated := d.Status.UpdatedNumberScheduled >= d.Status.DesiredNumberScheduled
		return r.controllerRevisions(ctx, v, d.Spec.Selector, func(all []*appsv1.ControllerRevision, r *appsv1.ControllerRevision) bool {
			return !updated || !slices.ContainsFunc(all, func(o *appsv1.ControllerRevision) bool { return o.Revision > r.Revision })
		})
	}
	return r.itself(ctx, v)
}

// itself returns the workload as its only revision, for a kind whose revisions are
// unknown: its pods all started after it was created, so a source written before that
// is held by every one of them.
func (r *revisionReader) itself(ctx context.Context, v *view) (revisions, error) {
	res := bounded.Resource{GroupVersionResource: v.Kind.GroupVersion().WithResource(v.Kind.Resource), Namespace: v.Namespace}
	byName := fields.OneTermEqualSelector("metadata.name", v.Name).String()
	at := func(ctx context.Context, rv string) ([]metav1.Object, error) {
		opts := metav1.ListOptions{FieldSelector: byName, ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact}
		l, err := bounded.List[metav1.PartialObjectMetadata](ctx, r.reads, res, opts, byNameLimits)
		return objects(pointers(l)), err
	}
	u, err := bounded.Get[metav1.PartialObjectMetadata](ctx, r.reads, res, v.Name, objectBytes)
	if err != nil {
		return revisions{}, err
	}
	return revisions{all: []metav1.Object{u}, running: []metav1.Object{u}, at: at}, nil
}

// replicaSets returns the workload's ReplicaSets; those that have pods, and the
// newest, may run pods.
func (r *revisionReader) replicaSets(ctx context.Context, v *view, selector *metav1.LabelSelector) (revisions, error) {
	return ownedRevisions(ctx, r.reads, v, appsv1.SchemeGroupVersion.WithResource("replicasets"), selector, func(all []*appsv1.ReplicaSet, rs *appsv1.ReplicaSet) bool {
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
func (r *revisionReader) controllerRevisions(ctx context.Context, v *view, selector *metav1.LabelSelector, keep func(all []*appsv1.ControllerRevision, r *appsv1.ControllerRevision) bool) (revisions, error) {
	return ownedRevisions(ctx, r.reads, v, appsv1.SchemeGroupVersion.WithResource("controllerrevisions"), selector, keep)
}

// revisionTemplate returns a revision's number and its pod template: a ReplicaSet's,
// or the one a ControllerRevision keeps in its data; false for neither.
func revisionTemplate(obj metav1.Object) (int64, *corev1.PodTemplateSpec, bool) {
	switch r := obj.(type) {
	case *appsv1.ReplicaSet:
		return revisionOf(r), &r.Spec.Template, true
	case *appsv1.ControllerRevision:
		var data struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(r.Data.Raw, &data); err == nil {
			return r.Revision, &data.Spec.Template, true
		}
	}
	return 0, nil, false
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
