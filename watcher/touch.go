package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/alert"
	"github.com/confighash/confighash/sourcecache"
)

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

// touch patches the trigger annotation, and the others given, on the workload's
// metadata, so the API server admits it again through the webhook, and returns the
// admitted workload.
func (w *Watcher) touch(ctx context.Context, v *view, trig []confighash.Trigger, others map[string]any) (*view, error) {
	annotations := map[string]any{confighash.AnnotationTrigger: confighash.FormatTriggers(trig)}
	maps.Copy(annotations, others)
	return w.patch(ctx, v, annotationsPatch(annotations))
}

// heal writes the hash and the record the webhook would have written, and says so.
func (w *Watcher) heal(ctx context.Context, key workloadKey, v *view, d confighash.Decision) error {
	want := d.Record
	healed := confighash.Status{Act: confighash.ActHealed, At: time.Now(), Why: fmt.Sprintf(
		"the webhook did not write the hash after %d touches; the watcher wrote it: %s", w.cfg.HealAfter, confighash.ChangedData(v.Record, want))}
	patch := hashPatch(v.Kind, want.Hash(w.cfg.Key), map[string]any{"annotations": map[string]any{
		confighash.AnnotationSources: want.Text(d.Form), confighash.AnnotationAdopted: nil, confighash.AnnotationStatus: healed.Text(),
	}})
	trig := triggers(v, want, w.sources)
	if _, err := w.patch(ctx, v, patch); err != nil {
		w.cfg.Metrics.Touch(TouchError)
		w.alert(alert.Failed, v, trig, "the webhook did not write the hash, and the watcher could not either: "+err.Error())
		return err
	}
	w.cfg.Metrics.Touch(TouchHealed)
	w.cfg.Events.Event(objectRef(v), corev1.EventTypeWarning, "Healed", healed.Why)
	w.alert(alert.Healed, v, trig, fmt.Sprintf("the webhook did not write the hash after %d touches", w.cfg.HealAfter))
	w.recordLatency(key)
	return nil
}

// hashPatch is a merge patch of the hash on a workload's pod template, nested along
// its kind's template path, and of metadata on the workload's own.
func hashPatch(kind *confighash.Kind, hash string, metadata map[string]any) map[string]any {
	nested := map[string]any{"metadata": map[string]any{"annotations": map[string]any{confighash.AnnotationHash: hash}}}
	for i := len(kind.TemplatePath) - 1; i >= 1; i-- {
		nested = map[string]any{kind.TemplatePath[i]: nested}
	}
	return map[string]any{"metadata": metadata, kind.TemplatePath[0]: nested}
}

func (w *Watcher) patch(ctx context.Context, v *view, patch map[string]any) (*view, error) {
	body, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	opts := metav1.PatchOptions{FieldManager: FieldManager}
	var obj runtime.Object
	switch v.Kind.Kind {
	case confighash.Deployment.Kind:
		obj, err = w.cfg.Client.AppsV1().Deployments(v.Namespace).Patch(ctx, v.Name, types.MergePatchType, body, opts)
	case confighash.StatefulSet.Kind:
		obj, err = w.cfg.Client.AppsV1().StatefulSets(v.Namespace).Patch(ctx, v.Name, types.MergePatchType, body, opts)
	case confighash.DaemonSet.Kind:
		obj, err = w.cfg.Client.AppsV1().DaemonSets(v.Namespace).Patch(ctx, v.Name, types.MergePatchType, body, opts)
	case confighash.CronJob.Kind:
		obj, err = w.cfg.Client.BatchV1().CronJobs(v.Namespace).Patch(ctx, v.Name, types.MergePatchType, body, opts)
	default:
		obj, err = w.dynamic(v).Patch(ctx, v.Name, types.MergePatchType, body, opts)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil // deleted meanwhile: nothing to converge
	}
	if err != nil {
		return nil, fmt.Errorf("patch %s %s/%s: %w", v.Kind.Kind, v.Namespace, v.Name, err)
	}
	admitted, err := w.toView(obj)
	if err != nil {
		return nil, err
	}
	av, ok := admitted.(*view)
	if !ok {
		return nil, fmt.Errorf("patch %s %s/%s: unreadable response", v.Kind.Kind, v.Namespace, v.Name)
	}
	return av, nil
}

// dynamic is the client of a workload of a kind without Go types.
func (w *Watcher) dynamic(v *view) dynamic.ResourceInterface {
	return w.cfg.Dynamic.Resource(v.Kind.GroupVersion().WithResource(v.Kind.Resource)).Namespace(v.Namespace)
}

func objectRef(v *view) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		Kind: v.Kind.Kind, APIVersion: v.Kind.GroupVersion().String(),
		Namespace: v.Namespace, Name: v.Name, UID: v.UID, ResourceVersion: v.ResourceVersion,
	}
}
