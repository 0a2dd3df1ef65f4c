package sourcecache

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
)

func TestDigestKeepsNoValues(t *testing.T) {
	big := bytes.Repeat([]byte("s"), 1<<20)
	obj, err := toDigested(&corev1.Secret{
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
		t.Fatalf("toDigested() returned %T", obj)
	}
	if d.Name() != "db" || d.Namespace() != "ns" || d.Source.Name != "db" || d.ResourceVersion != "7" {
		t.Fatalf("kept %s/%s (%s) at %s, want ns/db at 7", d.Namespace(), d.Name(), d.Source.Name, d.ResourceVersion)
	}
	if !d.Source.Ignore || !d.Source.Present || len(d.Source.Data) != 1 {
		t.Fatalf("source = %+v", d.Source)
	}
	if sum, ok := d.Source.Data.Get("password"); !ok || sum != sha256.Sum256(big) {
		t.Fatal("the value is not replaced by its digest")
	}
}

func TestDigestPassesOtherObjectsThrough(t *testing.T) {
	in := "a tombstone"
	if out, err := toDigested(in); err != nil || out != in {
		t.Fatalf("toDigested(%v) = %v, %v", in, out, err)
	}
}

func TestProviderClassTakesEachObjectFromItsLatestReport(t *testing.T) {
	report := func(rv string, versions map[string]string) *Digested {
		u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"secretProviderClassName": "vault-db"}}}
		var objects []any
		for id, v := range versions {
			objects = append(objects, map[string]any{"id": id, "version": v})
		}
		_ = unstructured.SetNestedSlice(u.Object, objects, "status", "objects")
		u.SetResourceVersion(rv)
		u.SetNamespace("ns")
		return PodStatus(u)
	}
	old := report("10", map[string]string{"db-password": "1", "api-key": "7"})
	rotated := report("12", map[string]string{"db-password": "2", "api-key": "7"})
	d := ProviderClass([]*Digested{rotated, old})
	if d.Source.SourceRef != (confighash.SourceRef{Kind: confighash.SecretProviderClass, Name: "vault-db"}) || d.ResourceVersion != "12" || d.Name() != "vault-db" {
		t.Fatalf("ProviderClass() = %s (%s) at %s, want SecretProviderClass/vault-db at 12", d.Source.SourceRef, d.Name(), d.ResourceVersion)
	}
	if !slices.Equal(d.Source.Data, rotated.Source.Data) || d.Uniform {
		t.Fatalf("one pod rotated: data %v uniform %v, want the rotated versions, not uniform", d.Source.Data, d.Uniform)
	}
	both := ProviderClass([]*Digested{rotated, report("13", map[string]string{"db-password": "2", "api-key": "7"})})
	if !slices.Equal(both.Source.Data, d.Source.Data) || !both.Uniform {
		t.Fatalf("the rotation seen on a second pod: data %v uniform %v, want the same data, uniform", both.Source.Data, both.Uniform)
	}
	if ProviderClass(nil) != nil {
		t.Fatal("no report: want nil, absent")
	}
}

func TestDigestKeepsWhenCreatedAndLastWritten(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	written := created.Add(90 * 24 * time.Hour)
	obj, _ := toDigested(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "ns",
		CreationTimestamp: metav1.NewTime(created),
		ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: "kubectl", Time: ptr.To(metav1.NewTime(written))},
			{Manager: "helm", Time: ptr.To(metav1.NewTime(created.Add(time.Hour)))},
		}}})
	d := obj.(*Digested)
	if !d.Created().Equal(created) || !d.Written().Equal(written) {
		t.Fatalf("created %v, written %v; want %v, %v", d.Created(), d.Written(), created, written)
	}
}

// TestASourceOfMoreKeysThanItsBoundKeepsNoDigests (issue 52): a tenant's ConfigMap of
// 1 MiB may hold 50,000 keys, each a digest of 48 bytes in both components' caches; one
// over confighash.MaxSourceKeys is kept as TooLarge with no digests, and its users are
// left unhashed.
func TestASourceOfMoreKeysThanItsBoundKeepsNoDigests(t *testing.T) {
	data := map[string]string{}
	for i := range 50_000 {
		data[fmt.Sprintf("key-%010d", i)] = "v"
	}
	obj, err := toDigested(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "flood", Namespace: "ns"}, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	d := obj.(*Digested)
	if !d.Source.TooLarge || !d.Source.Present || d.Source.Data != nil {
		t.Fatalf("a ConfigMap of 50,000 keys kept as %+v, want present, too large, no digests", d.Source)
	}
	_, err = confighash.Decide(confighash.Input{Key: testKey(t), Namespace: "ns", Mode: confighash.ModeEvery,
		State: confighash.Vocabulary{}.Read(confighash.PodWorkload(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "flood"}}}}}}}}))},
		sourcesOf{d.Source})
	if !errors.Is(err, confighash.ErrSourceTooLarge) {
		t.Errorf("a workload using it: %v, want ErrSourceTooLarge", err)
	}
}

// sourcesOf serves the sources given.
type sourcesOf []confighash.Source

func (s sourcesOf) Names(confighash.SourceKind) ([]string, error) { return nil, nil }
func (s sourcesOf) Read(refs []confighash.SourceRef) (map[confighash.SourceRef]confighash.Source, error) {
	out := map[confighash.SourceRef]confighash.Source{}
	for _, src := range s {
		out[src.SourceRef] = src
	}
	return out, nil
}

func testKey(t *testing.T) confighash.Key {
	key, err := confighash.NewKey(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return key
}
