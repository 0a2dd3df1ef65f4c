package watcher

import (
	"errors"
	"fmt"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
)

// A recreated Job is the same Job without what the API server derived from the old
// one's identity, which it would refuse to take again, and with the decided hash.
func TestRemadeJobDropsTheOldIdentity(t *testing.T) {
	identity := map[string]string{"controller-uid": "u1", batchv1.ControllerUidLabel: "u1", "job-name": "j", batchv1.JobNameLabel: "j", "app": "batch"}
	old := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns", UID: "u1", ResourceVersion: "7", Labels: identity,
			Annotations: map[string]string{"team": "a", confighash.AnnotationHeld: "x", confighash.AnnotationHash: "old"}},
		Spec: batchv1.JobSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{batchv1.ControllerUidLabel: "u1"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: identity, Annotations: map[string]string{confighash.AnnotationHash: "old"}}},
		},
		Status: batchv1.JobStatus{Succeeded: 1},
	}
	d := confighash.Decision{Hash: "new"}
	n := remade(old, d, nil)
	if n.UID != "" || n.ResourceVersion != "" || n.Spec.Selector != nil || n.Status.Succeeded != 0 {
		t.Errorf("remade keeps the old identity: uid %q, rv %q, selector %v, status %+v", n.UID, n.ResourceVersion, n.Spec.Selector, n.Status)
	}
	for _, labels := range []map[string]string{n.Labels, n.Spec.Template.Labels} {
		if len(labels) != 1 || labels["app"] != "batch" {
			t.Errorf("labels = %v, want only app=batch", labels)
		}
	}
	if n.Spec.Template.Annotations[confighash.AnnotationHash] != "new" || n.Annotations[confighash.AnnotationRecreatedFrom] != "u1" ||
		n.Annotations["team"] != "a" || n.Annotations[confighash.AnnotationHeld] != "" {
		t.Errorf("annotations = %v, template's = %v; want the new hash, recreated-from u1, the user's kept, the wave's marker gone", n.Annotations, n.Spec.Template.Annotations)
	}
	if old.Spec.Template.Annotations[confighash.AnnotationHash] != "old" || old.Labels["job-name"] != "j" {
		t.Error("remade changed the Job it copies")
	}
	old.Spec.ManualSelector = ptr.To(true)
	if n := remade(old, d, nil); n.Spec.Selector == nil {
		t.Error("a manual selector is the user's: it must be kept")
	}
}

// A recreation is given up only where the API server refused it, and for that Job and
// data alone: another Job of the name, or a change of its data, tries again.
func TestARecreationIsGivenUpOnlyOnRefusalsAndForItsJobAndData(t *testing.T) {
	job := schema.GroupResource{Group: "batch", Resource: "jobs"}
	for err, want := range map[error]bool{
		fmt.Errorf("recreate: %w", errStillDeleting):                                  true,
		apierrors.NewInvalid(schema.GroupKind{Group: "batch", Kind: "Job"}, "j", nil): true,
		apierrors.NewForbidden(job, "j", errors.New("quota")):                         true,
		apierrors.NewConflict(job, "j", errors.New("uid")):                            true,
		apierrors.NewServiceUnavailable("restarting"):                                 false,
		apierrors.NewTimeoutError("slow", 1):                                          false,
		apierrors.NewInternalError(errors.New("etcd")):                                false,
		errors.New("connection refused"):                                              false,
	} {
		if got := refusal(err); got != want {
			t.Errorf("refusal(%v) = %v, want %v", err, got, want)
		}
	}
	r := newRecreations()
	key := workloadKey{"Job", "ns", "j"}
	for i := 1; i <= recreationAttempts; i++ {
		if n := r.failed(key); n != i {
			t.Fatalf("attempt %d counted as %d", i, n)
		}
	}
	r.giveUp(key, "u1", "v1:a")
	switch {
	case !r.givenUp(key, "u1", "v1:a"):
		t.Error("the Job given up is tried again for the same data")
	case r.givenUp(key, "u1", "v1:b"):
		t.Error("the Job given up is not tried again for other data")
	case r.givenUp(key, "u1", "v1:a"):
		t.Error("other data tried once forgets what was given up")
	}
	if n := r.failed(key); n != 1 {
		t.Errorf("a new recreation starts at %d attempts, want 1", n)
	}
}
