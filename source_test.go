package confighash

import (
	"crypto/sha256"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestSumsAreSortedAndFoundByKey(t *testing.T) {
	s := SourceOfConfigMap(&corev1.ConfigMap{
		Data:       map[string]string{"b": "2", "c": "3", "a": "1"},
		BinaryData: map[string][]byte{"bin": {0}},
	})
	if len(s.Data) != 3 || s.Data[0].Key != "a" || s.Data[1].Key != "b" || s.Data[2].Key != "c" {
		t.Fatalf("Data = %v, want a, b, c in order", s.Data)
	}
	for k, v := range map[string]string{"a": "1", "b": "2", "c": "3"} {
		if sum, ok := s.Data.Get(k); !ok || sum != sha256.Sum256([]byte(v)) {
			t.Errorf("Data.Get(%q) = %x, %v; want the digest of %q", k, sum, ok, v)
		}
	}
	if _, ok := s.Data.Get("bin"); ok {
		t.Error("a binaryData key is found in Data")
	}
	if sum, ok := s.BinaryData.Get("bin"); !ok || sum != sha256.Sum256([]byte{0}) {
		t.Errorf("BinaryData.Get(bin) = %x, %v", sum, ok)
	}
}
