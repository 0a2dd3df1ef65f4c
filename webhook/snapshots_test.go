package webhook

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/confighash/confighash"
)

// observed is the snapshot a decision in namespace ns wants of the source, using ref's
// keys.
func observed(key confighash.Key, ref confighash.Reference, src confighash.Source) confighash.Snapshot {
	o := confighash.Observation{Reference: ref, Present: true, Counts: true, Digest: confighash.NamespacedDigest(key, "ns", ref, src)}
	return confighash.Snapshot{Source: o, Pin: confighash.Pin{SourceRef: ref.SourceRef, Digest: o.Digest, Data: confighash.SnapshotDigest(key, "ns", ref, src), ByData: true}}
}

func TestASnapshotCopiesTheKeysUsedOnceAndNeverOnADryRun(t *testing.T) {
	key, _ := confighash.NewKey(bytes.Repeat([]byte{1}, 32))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app"}, Data: map[string]string{"used": "1", "other": "2"}}
	tls := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tls"}, Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k")}}
	client := fake.NewClientset(cm, tls)
	s := NewSnapshots(client, key, nil)
	ctx := t.Context()
	owner := &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "u1"}

	usedKey := observed(key, confighash.Reference{SourceRef: confighash.SourceRef{Kind: confighash.ConfigMap, Name: "app"}, Keys: []string{"used"}}, confighash.SourceOfConfigMap(cm))
	if err := s.Ensure(ctx, "ns", []confighash.Snapshot{usedKey}, owner, true); err != nil {
		t.Fatal(err)
	}
	if list, _ := client.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{}); len(list.Items) != 1 {
		t.Fatalf("a dry run made a snapshot: %d ConfigMaps", len(list.Items))
	}
	for range 2 {
		if err := s.Ensure(ctx, "ns", []confighash.Snapshot{usedKey}, owner, false); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := client.CoreV1().ConfigMaps("ns").Get(ctx, usedKey.Pin.Snapshot(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Data) != 1 || snap.Data["used"] != "1" || !*snap.Immutable || snap.Labels[confighash.LabelSnapshotOf] != "app" || len(snap.OwnerReferences) != 1 {
		t.Fatalf("snapshot %+v: want the used key alone, immutable, labelled, owned by the workload", snap)
	}

	cert := observed(key, confighash.Reference{SourceRef: confighash.SourceRef{Kind: confighash.Secret, Name: "tls"}, Keys: []string{"tls.crt"}}, confighash.SourceOfSecret(tls))
	if err := s.Ensure(ctx, "ns", []confighash.Snapshot{cert}, nil, false); err != nil {
		t.Fatal(err)
	}
	sec, err := client.CoreV1().Secrets("ns").Get(ctx, cert.Pin.Snapshot(), metav1.GetOptions{})
	if err != nil || sec.Type != corev1.SecretTypeTLS || len(sec.Data) != 2 {
		t.Fatalf("TLS snapshot %+v, %v: want the same type, whole", sec, err)
	}

	decided := observed(key, confighash.Reference{SourceRef: confighash.SourceRef{Kind: confighash.ConfigMap, Name: "app"}, AllKeys: true}, confighash.SourceOfConfigMap(cm))
	cm = cm.DeepCopy()
	cm.Data["used"] = "changed"
	if _, err := client.CoreV1().ConfigMaps("ns").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Ensure(ctx, "ns", []confighash.Snapshot{decided}, nil, false); err == nil || !strings.Contains(err.Error(), "changed while it was admitted") {
		t.Fatalf("data changed since it was decided on: %v", err)
	}
}

func TestAPanicInAParallelReadIsAnErrorNotACrash(t *testing.T) {
	err := inParallel(t.Context(), make(chan struct{}, 2), 5, func(_ context.Context, i int) error {
		if i == 3 {
			panic("a bug in a read")
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "internal error") {
		t.Fatalf("err = %v, want the panic as an internal error", err)
	}
}
