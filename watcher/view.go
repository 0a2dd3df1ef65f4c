package watcher

import (
	"fmt"
	"slices"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
)

// view is what the watcher keeps of a workload: enough to find it from a source and to
// check it has converged, never its pod template, and no more: the watcher keeps one
// per workload of the cluster.
type view struct {
	Namespace, Name, ResourceVersion string
	UID                              types.UID
	// Deleting is set once the workload is being deleted.
	Deleting bool
	// Kind is one of the watcher's kinds, shared.
	Kind *confighash.Kind
	confighash.State
	// Status is where its controller stands with its latest pod template.
	Status confighash.RolloutStatus
	// Selector selects its pods; "" for a kind whose pods a wave does not wait for.
	// MaxUnavailable is how many of them its rollout takes down at once
	// (maxUnavailableOf), the most a restart in place may.
	// Replacing is set while its rollout replaces pods of an earlier template.
	// Pods is how many pods the controller of its pod template runs (podsOf).
	Selector             string
	MaxUnavailable, Pods int
	Replacing            bool
	// NotPinned says why the webhook admitted it unpinned (AnnotationNotPinned).
	NotPinned string
	// Said is the status the watcher last wrote on it (AnnotationStatus), "" when
	// none or over its bound.
	Said string
	// Of a Job: Owned when a controller, as a CronJob, made it; Finished once it
	// completed or failed; RecreateFinished when it asks to be recreated even then.
	Owned, Finished, RecreateFinished bool
	// Of a Deployment: Paused as its spec says, and PausedAt, the time a pause of its
	// pause period began, Reloader's way (ReloaderPausedAt): "" when none, or over its
	// bound.
	Paused   bool
	PausedAt string
	// Of a CronJob: RunOnChange when it asks for a Job at once when its data
	// changes; RunDue while that Job is to be started.
	RunOnChange, RunDue bool
}

var (
	_ runtime.Object            = (*view)(nil)
	_ metav1.ObjectMetaAccessor = (*view)(nil)
)

func (v *view) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// GetObjectMeta implements metav1.ObjectMetaAccessor, which the informers key and
// index objects by; it is built when asked, not kept.
func (v *view) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: v.Namespace, Name: v.Name, ResourceVersion: v.ResourceVersion, UID: v.UID}
}

// DeepCopyObject implements runtime.Object; views are never modified once built.
func (v *view) DeepCopyObject() runtime.Object {
	c := *v
	return &c
}

// viewTransform returns the workload informers' transform, which reads annotations in
// vocabulary.
func viewTransform(vocabulary confighash.Vocabulary, kinds confighash.Kinds) cache.TransformFunc {
	return func(obj any) (any, error) {
		o, ok := obj.(runtime.Object)
		if !ok {
			return obj, nil
		}
		if _, isView := o.(*view); isView {
			return obj, nil
		}
		w, err := kinds.WorkloadOf(o)
		if err != nil {
			return obj, nil // a tombstone or an object we cannot read: left as is
		}
		meta, err := metaOf(o)
		if err != nil {
			return obj, nil
		}
		return &view{
			Namespace:        unique.Make(w.Namespace).Value(),
			Name:             w.Name,
			ResourceVersion:  meta.GetResourceVersion(),
			UID:              meta.GetUID(),
			Deleting:         meta.GetDeletionTimestamp() != nil,
			Kind:             &kinds[slices.IndexFunc(kinds, func(k confighash.Kind) bool { return k.GroupVersionKind == w.Kind.GroupVersionKind })],
			State:            vocabulary.Read(w),
			Status:           rolloutOf(o),
			Selector:         selectorOf(o),
			MaxUnavailable:   maxUnavailableOf(o),
			Pods:             podsOf(o),
			Replacing:        replacingPods(o),
			NotPinned:        meta.GetAnnotations()[confighash.AnnotationNotPinned],
			Said:             upTo(meta.GetAnnotations()[confighash.AnnotationStatus], confighash.MaxStatusBytes),
			Owned:            metav1.GetControllerOfNoCopy(meta) != nil,
			Finished:         finished(o),
			RecreateFinished: meta.GetAnnotations()[confighash.AnnotationRecreateFinished] == "true",
			RunOnChange:      meta.GetAnnotations()[confighash.AnnotationRunOnChange] == "true",
			RunDue:           meta.GetAnnotations()[confighash.AnnotationRunDue] != "",
			Paused:           paused(o),
			PausedAt:         upTo(meta.GetAnnotations()[confighash.ReloaderPausedAt], maxPausedAtBytes),
		}, nil
	}
}

func metaOf(o runtime.Object) (metav1.Object, error) {
	m, ok := o.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no metadata", o)
	}
	return m, nil
}

// mayHold reports whether the workload's pods may hold the source's data, and its
// revisions name its snapshots: it may use the source, or its record still holds it.
func (v *view) mayHold(ref confighash.SourceRef) bool {
	return v.MayUse(ref) || slices.ContainsFunc(v.Record, func(e confighash.RecordEntry) bool { return e.SourceRef == ref })
}

// upTo returns text, or "" when it is longer than limit: anyone who may annotate a
// workload writes what the watcher keeps of it.
func upTo(text string, limit int) string {
	if len(text) > limit {
		return ""
	}
	return text
}

// workloadKey names a workload in the queue.
type workloadKey struct {
	Kind, Namespace, Name string
}

func (k workloadKey) String() string { return k.Kind + " " + k.Namespace + "/" + k.Name }

func keyOf(v *view) workloadKey { return workloadKey{v.Kind.Kind, v.Namespace, v.Name} }

func objectRef(v *view) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		Kind: v.Kind.Kind, APIVersion: v.Kind.GroupVersion().String(),
		Namespace: v.Namespace, Name: v.Name, UID: v.UID, ResourceVersion: v.ResourceVersion,
	}
}

// triggers names the sources whose entry the workload has not recorded yet, at the
// version the cache holds, so the webhook reads at least that version. When only
// deletions drifted it names every existing source, so the touch still changes the
// annotation.
func triggers(v *view, want confighash.Record, sources *sourcecache.Cache) []confighash.Trigger {
	recorded := make(map[confighash.RecordEntry]bool, len(v.Record))
	for _, e := range v.Record {
		recorded[e] = true
	}
	var drifted, all []confighash.Trigger
	for _, e := range want {
		d, ok := sources.Lookup(v.Namespace, e.SourceRef)
		if !ok {
			continue
		}
		t := confighash.Trigger{SourceRef: e.SourceRef, ResourceVersion: d.ResourceVersion}
		all = append(all, t)
		if !recorded[e] {
			drifted = append(drifted, t)
		}
	}
	if len(drifted) == 0 {
		return all
	}
	return drifted
}

// sourceIn is a source of a namespace.
type sourceIn struct {
	namespace string
	ref       confighash.SourceRef
}

// object is the source, for its Events.
func (s sourceIn) object() *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: string(s.ref.Kind), APIVersion: "v1", Namespace: s.namespace, Name: s.ref.Name}
}

func (k workloadKey) namespace() string { return k.Namespace }
