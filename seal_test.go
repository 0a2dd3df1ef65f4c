package confighash

import "testing"

func TestASealHoldsForItsObjectAlone(t *testing.T) {
	key, err := NewKey([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewKey([]byte("fedcba9876543210fedcba9876543210"))
	sealed := map[string]string{AnnotationSeal: SnapshotSeal(key, ConfigMap, "prod", "app-0123456789abcdef")}
	if !Sealed(key, ConfigMap, "prod", "app-0123456789abcdef", sealed) {
		t.Fatal("the seal the webhook wrote does not hold for its own object")
	}
	for _, tc := range []struct {
		name              string
		key               Key
		kind              SourceKind
		namespace, object string
		annotations       map[string]string
	}{
		{"a copy under another name is not sealed", key, ConfigMap, "prod", "restored", sealed},
		{"a copy in another namespace is not sealed", key, ConfigMap, "dev", "app-0123456789abcdef", sealed},
		{"a Secret of the same name is not sealed", key, Secret, "prod", "app-0123456789abcdef", sealed},
		{"another install's key does not hold it", other, ConfigMap, "prod", "app-0123456789abcdef", sealed},
		{"an object without the annotation is not sealed", key, ConfigMap, "prod", "app-0123456789abcdef", nil},
		{"a namespace and name split elsewhere are not sealed", key, ConfigMap, "prodapp-", "0123456789abcdef", sealed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if Sealed(tc.key, tc.kind, tc.namespace, tc.object, tc.annotations) {
				t.Error("sealed")
			}
		})
	}
}
