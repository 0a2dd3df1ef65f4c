package confighash

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAWriteThatWouldPassTheAnnotationBoundIsRefused(t *testing.T) {
	record := Record{{SourceRef: SourceRef{ConfigMap, "app"}, Seen: true}}
	hashed := Decision{Record: record, Hash: "v1:" + strings.Repeat("0", 64)}
	for _, tc := range []struct {
		name           string
		metadata, tmpl int // bytes of other annotations
		wantErr        bool
	}{
		{"small annotations leave room for any record", 1000, 1000, false},
		{"metadata a record short of the bound does not take it", MaxAnnotationBytes - 50, 0, true},
		{"metadata within the watcher's reserve does not take it", MaxAnnotationBytes - 600, 0, true},
		{"metadata with room for the record and the reserve takes it", MaxAnnotationBytes - 2000, 0, false},
		{"a pod template a hash short of the bound does not take it", 0, MaxAnnotationBytes - 50, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &Workload{Annotations: map[string]string{"notes": strings.Repeat("x", max(0, tc.metadata-len("notes")))},
				Template: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"notes": strings.Repeat("x", max(0, tc.tmpl-len("notes")))}}}}
			err := hashed.fits(annotationBytesOf(w))
			if got := errors.Is(err, ErrAnnotationsTooLarge); got != tc.wantErr {
				t.Fatalf("fits: %v, want too large %v", err, tc.wantErr)
			}
		})
	}
}

func TestTheAnnotationsConfighashWritesAreNotCountedTwice(t *testing.T) {
	big := strings.Repeat("x", MaxAnnotationBytes/2)
	w := &Workload{Annotations: map[string]string{"notes": big, AnnotationSources: big},
		Template: &corev1.PodTemplateSpec{}}
	if got := annotationBytesOf(w).Metadata; got != len("notes")+len(big) {
		t.Fatalf("other annotations = %d bytes, want %d: the record it replaces is not among them", got, len("notes")+len(big))
	}
}
