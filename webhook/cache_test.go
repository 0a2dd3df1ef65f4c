package webhook

import (
	"bytes"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
)

func TestDigestKeepsNoValues(t *testing.T) {
	big := bytes.Repeat([]byte("s"), 1<<20)
	obj, err := Digest(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", ResourceVersion: "7",
			Labels: map[string]string{"l": "v"}, Annotations: map[string]string{confighash.AnnotationIgnore: "true", "big": string(big)},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Data: map[string][]byte{"password": big},
	})
	if err != nil {
		t.Fatal(err)
	}
	d, ok := obj.(*Digested)
	if !ok {
		t.Fatalf("Digest() returned %T", obj)
	}
	want := Digested{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", ResourceVersion: "7"}}
	if d.Name != want.Name || d.Namespace != want.Namespace || d.ResourceVersion != want.ResourceVersion ||
		d.Labels != nil || d.Annotations != nil || d.ManagedFields != nil {
		t.Fatalf("kept metadata %+v, want only name, namespace and resourceVersion", d.ObjectMeta)
	}
	if !d.Source.Ignore || !d.Source.Present || len(d.Source.Data) != 1 {
		t.Fatalf("source = %+v", d.Source)
	}
	if _, isSum := any(d.Source.Data["password"]).(confighash.Sum); !isSum {
		t.Fatal("the value is not replaced by its digest")
	}
}

func TestDigestPassesOtherObjectsThrough(t *testing.T) {
	in := "a tombstone"
	if out, err := Digest(in); err != nil || out != in {
		t.Fatalf("Digest(%v) = %v, %v", in, out, err)
	}
}

func TestAtLeast(t *testing.T) {
	tests := []struct {
		have, want string
		ok         bool
	}{
		{"10", "9", true}, {"10", "10", true}, {"9", "10", false},
		{"", "1", false}, {"abc", "1", false}, {"5", "", false},
	}
	for _, tt := range tests {
		if got := atLeast(tt.have, tt.want); got != tt.ok {
			t.Errorf("atLeast(%q, %q) = %v, want %v", tt.have, tt.want, got, tt.ok)
		}
	}
}
