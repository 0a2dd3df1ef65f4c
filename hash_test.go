package confighash

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var testKey = mustKey(bytes.Repeat([]byte{7}, MinKeySize))

func mustKey(secret []byte) Key {
	k, err := NewKey(secret)
	if err != nil {
		panic(err)
	}
	return k
}

func configMap(name string, data map[string]string, binary map[string][]byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data, BinaryData: binary}
}

func secret(name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
}

var (
	wholeCM = Reference{SourceRef: SourceRef{ConfigMap, "app"}, AllKeys: true}
	keyA    = Reference{SourceRef: SourceRef{ConfigMap, "app"}, Keys: []string{"a"}}
)

func TestSourceDigestGolden(t *testing.T) {
	// Changing the encoding changes every hash, and so rolls every workload once on
	// upgrade: it needs a new version prefix, not a silent change. The expected value was
	// computed apart from this code, from the documented encoding:
	//   HMAC-SHA256(key, "confighash.dev/source/v1\x00" 0x09 "ConfigMap" 0x03 "app" 0x02
	//     'd' 0x01 "a" SHA256("1")  'd' 0x01 "b" SHA256("2"))[:8]
	got := SourceDigest(testKey, wholeCM, SourceOfConfigMap(configMap("app", map[string]string{"a": "1", "b": "2"}, nil)))
	if want := "3aa98b3843c74cb7"; got.String() != want {
		t.Fatalf("SourceDigest() = %s, want %s", got, want)
	}
}

func TestSourceDigest(t *testing.T) {
	tests := []struct {
		name     string
		ref      Reference
		a, b     Source
		wantSame bool
	}{
		{
			"an entry boundary cannot be forged by a value",
			wholeCM,
			SourceOfConfigMap(configMap("app", map[string]string{"a": "b;c=d"}, nil)),
			SourceOfConfigMap(configMap("app", map[string]string{"a": "b", "c": "d"}, nil)),
			false,
		},
		{
			"data and binaryData with the same key and value differ",
			wholeCM,
			SourceOfConfigMap(configMap("app", map[string]string{"a": "1"}, nil)),
			SourceOfConfigMap(configMap("app", nil, map[string][]byte{"a": []byte("1")})),
			false,
		},
		{
			"a changed value of a used key changes the digest",
			keyA,
			SourceOfConfigMap(configMap("app", map[string]string{"a": "1", "b": "x"}, nil)),
			SourceOfConfigMap(configMap("app", map[string]string{"a": "2", "b": "x"}, nil)),
			false,
		},
		{
			"a changed value of an unused key leaves the digest",
			keyA,
			SourceOfConfigMap(configMap("app", map[string]string{"a": "1", "b": "x"}, nil)),
			SourceOfConfigMap(configMap("app", map[string]string{"a": "1", "b": "y", "c": "new"}, nil)),
			true,
		},
		{
			"a whole-object use sees every key",
			wholeCM,
			SourceOfConfigMap(configMap("app", map[string]string{"a": "1", "b": "x"}, nil)),
			SourceOfConfigMap(configMap("app", map[string]string{"a": "1", "b": "y"}, nil)),
			false,
		},
		{
			"a used key that is absent differs from an empty value",
			keyA,
			SourceOfConfigMap(configMap("app", map[string]string{}, nil)),
			SourceOfConfigMap(configMap("app", map[string]string{"a": ""}, nil)),
			false,
		},
		{
			"a used key moving from data to binaryData changes the digest",
			keyA,
			SourceOfConfigMap(configMap("app", map[string]string{"a": "1"}, nil)),
			SourceOfConfigMap(configMap("app", nil, map[string][]byte{"a": []byte("1")})),
			false,
		},
		{
			"labels and annotations never enter the digest",
			wholeCM,
			SourceOfConfigMap(configMap("app", map[string]string{"a": "1"}, nil)),
			SourceOfConfigMap(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", ResourceVersion: "99",
				Labels: map[string]string{"l": "v"}, Annotations: map[string]string{AnnotationMatch: "true"}}, Data: map[string]string{"a": "1"}}),
			true,
		},
		{
			"an empty ConfigMap and one with an empty key differ",
			wholeCM,
			SourceOfConfigMap(configMap("app", nil, nil)),
			SourceOfConfigMap(configMap("app", map[string]string{"": ""}, nil)),
			false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := SourceDigest(testKey, tt.ref, tt.a), SourceDigest(testKey, tt.ref, tt.b)
			if (a == b) != tt.wantSame {
				t.Fatalf("digests %s and %s: same = %v, want %v", a, b, a == b, tt.wantSame)
			}
		})
	}
}

func TestSourceDigestSeparatesKindsNamesAndKeys(t *testing.T) {
	data := map[string][]byte{"a": []byte("1")}
	cm := SourceDigest(testKey, Reference{SourceRef: SourceRef{ConfigMap, "x"}, AllKeys: true}, SourceOfConfigMap(configMap("x", map[string]string{"a": "1"}, nil)))
	sec := SourceDigest(testKey, Reference{SourceRef: SourceRef{Secret, "x"}, AllKeys: true}, SourceOfSecret(secret("x", data)))
	other := SourceDigest(testKey, Reference{SourceRef: SourceRef{Secret, "y"}, AllKeys: true}, SourceOfSecret(secret("y", data)))
	otherKey := SourceDigest(mustKey(bytes.Repeat([]byte{8}, MinKeySize)), Reference{SourceRef: SourceRef{Secret, "x"}, AllKeys: true}, SourceOfSecret(secret("x", data)))
	if cm == sec || sec == other || sec == otherKey {
		t.Fatalf("digests collide: configmap %s, secret %s, other name %s, other key %s", cm, sec, other, otherKey)
	}
}

func TestSourceDigestIsStable(t *testing.T) {
	data := map[string]string{}
	for i := range 50 {
		data[fmt.Sprintf("k%d", i)] = fmt.Sprintf("v%d", i)
	}
	first := SourceDigest(testKey, wholeCM, SourceOfConfigMap(configMap("app", data, nil)))
	for range 20 {
		// Map iteration order differs between calls; the digest must not.
		if got := SourceDigest(testKey, wholeCM, SourceOfConfigMap(configMap("app", data, nil))); got != first {
			t.Fatalf("digest changed between runs: %s then %s", first, got)
		}
	}
}

func TestNewKeyRejectsShortKeys(t *testing.T) {
	if _, err := NewKey(make([]byte, MinKeySize-1)); err == nil {
		t.Fatal("a 31-byte key is accepted")
	}
}

func TestKeyCopiesItsSecret(t *testing.T) {
	secret := bytes.Repeat([]byte{7}, MinKeySize)
	k := mustKey(secret)
	before := Record{{SourceRef: SourceRef{ConfigMap, "a"}, Seen: true}}.Hash(k)
	secret[0] = 9
	if after := (Record{{SourceRef: SourceRef{ConfigMap, "a"}, Seen: true}}).Hash(k); after != before {
		t.Fatal("changing the caller's bytes changed the key")
	}
}

var hashFormat = regexp.MustCompile(`^v1:[0-9a-f]{64}$`)

func TestRecordHash(t *testing.T) {
	d1, d2 := Digest{1}, Digest{2}
	base := Record{{SourceRef: SourceRef{ConfigMap, "a"}, Digest: d1, Seen: true}}
	h := base.Hash(testKey)
	if !hashFormat.MatchString(h) {
		t.Fatalf("hash %q is not v1: and 64 hex digits", h)
	}
	same := []Record{
		append(Record{}, base...),
		append(append(Record{}, base...), RecordEntry{SourceRef: SourceRef{Secret, "late"}, Digest: d2, Seen: true, Baseline: true}),
		append(append(Record{}, base...), RecordEntry{SourceRef: SourceRef{Secret, "missing"}, Absent: true}),
		{{SourceRef: SourceRef{ConfigMap, "a"}, Digest: d1, Seen: true, Absent: true}},
	}
	for i, r := range same {
		if got := r.Hash(testKey); got != h {
			t.Errorf("record %d (%s): hash changed; baselines, never-seen and absent marks must not enter it", i, r)
		}
	}
	differ := []Record{
		{{SourceRef: SourceRef{ConfigMap, "a"}, Digest: d2, Seen: true}},
		{{SourceRef: SourceRef{ConfigMap, "b"}, Digest: d1, Seen: true}},
		{{SourceRef: SourceRef{Secret, "a"}, Digest: d1, Seen: true}},
		append(append(Record{}, base...), RecordEntry{SourceRef: SourceRef{Secret, "opt"}, Digest: d2, Seen: true}),
		nil,
	}
	for i, r := range differ {
		if got := r.Hash(testKey); got == h {
			t.Errorf("record %d (%s): hash unchanged", i, r)
		}
	}
}

// TestWebhookAndWatcherAgree: the webhook computes from values it reads; the watcher
// keeps only the digest view (here after a JSON round trip, as it would be stored) and
// the record written on the workload. Both must reach the same record and hash.
func TestWebhookAndWatcherAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		cms, secs, tmpl := randomWorld(rng)
		full := map[SourceRef]Source{}
		for _, cm := range cms {
			full[SourceRef{ConfigMap, cm.Name}] = SourceOfConfigMap(cm)
		}
		for _, s := range secs {
			full[SourceRef{Secret, s.Name}] = SourceOfSecret(s)
		}
		webhook := created(tmpl, full)
		webhookRecord := webhook.Record

		stored := map[SourceRef]Source{}
		for ref, src := range full {
			raw, err := json.Marshal(src)
			if err != nil {
				t.Fatal(err)
			}
			var back Source
			if err := json.Unmarshal(raw, &back); err != nil {
				t.Fatal(err)
			}
			stored[ref] = back
		}
		written, err := ParseRecord(webhookRecord.Text(webhook.Form))
		if err != nil {
			t.Fatalf("world %d: the record does not parse back: %v", i, err)
		}
		state := injected(tmpl)
		state.Record, state.Form, state.Hash = written, webhook.Form, webhook.Hash
		watcher, err := Decide(Input{Key: testKey, State: state, Mode: ModeOptedIn}, listedSources(stored))
		if err != nil {
			t.Fatal(err)
		}
		if !watcher.Converged || watcher.Record.Text(watcher.Form) != webhookRecord.Text(webhook.Form) {
			t.Fatalf("world %d: watcher record %s (converged %v), webhook record %s", i, watcher.Record, watcher.Converged, webhookRecord)
		}
		if w, h := written.Hash(testKey), webhook.Hash; w != h {
			t.Fatalf("world %d: hash from the written record %s, webhook hash %s", i, w, h)
		}
	}
}

// randomWorld returns random ConfigMaps and Secrets and a pod template using some of
// them, by every reference path, some missing.
func randomWorld(rng *rand.Rand) ([]*corev1.ConfigMap, []*corev1.Secret, *corev1.PodTemplateSpec) {
	randomKeys := func() map[string]string {
		m := map[string]string{}
		for range rng.IntN(5) {
			m[fmt.Sprintf("k%d", rng.IntN(6))] = fmt.Sprintf("v%d", rng.IntN(3))
		}
		return m
	}
	var cms []*corev1.ConfigMap
	var secs []*corev1.Secret
	for i := range 4 {
		if rng.IntN(4) == 0 {
			continue // missing
		}
		name := fmt.Sprintf("s%d", i)
		cm := configMap(name, randomKeys(), nil)
		if rng.IntN(3) == 0 {
			cm.BinaryData = map[string][]byte{"bin": {byte(rng.IntN(3))}}
		}
		cms = append(cms, cm)
		data := map[string][]byte{}
		for k, v := range randomKeys() {
			data[k] = []byte(v)
		}
		secs = append(secs, secret(name, data))
	}
	var ctr corev1.Container
	var vols []corev1.Volume
	for range rng.IntN(6) {
		name := fmt.Sprintf("s%d", rng.IntN(4))
		key := fmt.Sprintf("k%d", rng.IntN(6))
		switch rng.IntN(6) {
		case 0:
			ctr.Env = append(ctr.Env, cmKeyEnv(name, key, nil))
		case 1:
			ctr.Env = append(ctr.Env, secretKeyEnv(name, key, new(rng.IntN(2) == 0)))
		case 2:
			ctr.EnvFrom = append(ctr.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}})
		case 3:
			vols = append(vols, corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}})
		case 4:
			vols = append(vols, corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Items: items(key, "bin")}}})
		case 5:
			vols = append(vols, corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Items: items(key)}}}}}})
		}
	}
	ctr.Name = "app"
	return cms, secs, &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{ctr}, Volumes: vols}}
}
