package confighash

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestAnIgnoredKindNeverCounts: with Secrets ignored install-wide, a workload that
// uses a ConfigMap and a Secret is hashed from the ConfigMap alone: a change of the
// Secret leaves its hash, a change of the ConfigMap changes it.
func TestAnIgnoredKindNeverCounts(t *testing.T) {
	tmpl := envFrom("cfg")
	tmpl.Spec.Containers[0].EnvFrom = append(tmpl.Spec.Containers[0].EnvFrom,
		corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}})
	vocabulary := Vocabulary{Reloader: true, Ignored: SourceKindsOf(Secret)}
	state := vocabulary.Read(&Workload{Annotations: map[string]string{AnnotationInject: "true"}, Template: tmpl})
	decide := func(cfg, db string) Decision {
		t.Helper()
		sources := map[SourceRef]Source{}
		for _, s := range []Source{cmSource("cfg", cfg), SourceOfSecret(secret("db", map[string][]byte{"k": []byte(db)}))} {
			sources[s.SourceRef] = s
		}
		d, err := Decide(Input{Key: testKey, State: state, Mode: ModeOptedIn, Pods: Pods{Fresh: true}}, listedSources(sources))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := decide("a", "x")
	for _, e := range first.Record {
		if e.Kind == Secret && !e.Uncounted {
			t.Fatalf("record %s: the ignored Secret counts", first.Record.Text(first.Form))
		}
	}
	if d := decide("a", "y"); d.Hash != first.Hash {
		t.Fatalf("a change of the ignored Secret changed the hash: %s, then %s", first.Hash, d.Hash)
	}
	if d := decide("b", "x"); d.Hash == first.Hash {
		t.Fatal("a change of the ConfigMap left the hash")
	}
}
