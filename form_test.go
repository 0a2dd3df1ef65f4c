package confighash

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestNamespacedDigestGolden(t *testing.T) {
	// As TestSourceDigestGolden, for FormNamespaced; computed apart from this code:
	//   HMAC-SHA256(key, "confighash.dev/source/v2\x00" 0x04 "prod" 0x09 "ConfigMap" 0x03 "app"
	//     0x02 'd' 0x01 "a" SHA256("1")  'd' 0x01 "b" SHA256("2"))[:8]
	got := NamespacedDigest(testKey, "prod", wholeCM, SourceOfConfigMap(configMap("app", map[string]string{"a": "1", "b": "2"}, nil)))
	if want := "4640e98c62c988e4"; got.String() != want {
		t.Fatalf("NamespacedDigest() = %s, want %s", got, want)
	}
	//   HMAC-SHA256(key, "confighash.dev/snapshot/v1\x00" 0x04 "prod" 0x09 "ConfigMap" 0x03 "app"
	//     0x01 'd' 0x01 "a" SHA256("1"))[:8]: the absent key "x" is not copied.
	keys := Reference{SourceRef: wholeCM.SourceRef, Keys: []string{"a", "x"}}
	snapshot := SnapshotDigest(testKey, "prod", keys, SourceOfConfigMap(configMap("app", map[string]string{"a": "1", "b": "2"}, nil)))
	if want := "82c963d600982e3f"; snapshot.String() != want {
		t.Fatalf("SnapshotDigest() = %s, want %s", snapshot, want)
	}
}

func TestEqualSecretsInTwoNamespacesHaveUnrelatedDigestsAndHashes(t *testing.T) {
	db := SourceRef{Secret, "db"}
	sources := listedSources{db: SourceOfSecret(secret("db", map[string][]byte{"password": []byte("hunter2")}))}
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", EnvFrom: []corev1.EnvFromSource{
		{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}}}}}}
	decide := func(namespace string) Decision {
		d, err := Decide(Input{Key: testKey, Namespace: namespace, State: injected(tmpl), Mode: ModeOptedIn, Pods: Pods{Fresh: true}}, sources)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	prod, dev := decide("prod"), decide("dev")
	if prod.Record[0].Digest == dev.Record[0].Digest || prod.Hash == dev.Hash {
		t.Fatalf("prod %s %s, dev %s %s: equal data in two namespaces must not have equal digests or hashes",
			prod.Record.Text(prod.Form), prod.Hash, dev.Record.Text(dev.Form), dev.Hash)
	}
	if prod.Form != FormNamespaced || prod.Record.Text(prod.Form)[:3] != "v2 " {
		t.Fatalf("a new workload's record %q: want it in FormNamespaced", prod.Record.Text(prod.Form))
	}
}

// TestAWorkloadRecordedInTheSharedFormKeepsItUntilARolloutIsDue: the previous
// release's record and hash stay, pins included, through admissions that roll
// nothing; the next change writes the namespaced form, and rolls once.
func TestAWorkloadRecordedInTheSharedFormKeepsItUntilARolloutIsDue(t *testing.T) {
	cfg := SourceRef{ConfigMap, "cfg"}
	whole := Reference{SourceRef: cfg, AllKeys: true}
	sources := listedSources{cfg: cmSource("cfg", "1")}
	before := Record{{SourceRef: cfg, Digest: SourceDigest(testKey, whole, sources[cfg]), Seen: true}}
	pins := Pins{{SourceRef: cfg, Digest: before[0].Digest}}
	tmpl := envFrom(pins[0].Snapshot())
	tmpl.Annotations = map[string]string{AnnotationHash: before.Hash(testKey), AnnotationPinned: pins.String()}
	state := Vocabulary{}.Read(&Workload{Annotations: map[string]string{AnnotationInject: "true", AnnotationPin: "true", AnnotationSources: before.Text(FormShared)},
		Template: tmpl})
	in := Input{Key: testKey, Namespace: "prod", State: state, Mode: ModeOptedIn}
	if state.Form != FormShared {
		t.Fatalf("a v1 record is read in form %d, want FormShared", state.Form)
	}

	d, err := Decide(in, sources)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Converged || d.Form != FormShared || d.Hash != state.Hash || !slices.Equal(d.Pins, pins) || len(d.Snapshots) > 0 {
		t.Fatalf("nothing changed: converged %v, form %d, hash %s, pins %s; want the previous release's record, hash and pins kept", d.Converged, d.Form, d.Hash, d.Pins)
	}

	sources[cfg] = cmSource("cfg", "2")
	d, err = Decide(in, sources)
	if err != nil {
		t.Fatal(err)
	}
	want := NamespacedDigest(testKey, "prod", whole, sources[cfg])
	if d.Form != FormNamespaced || d.Record[0].Digest != want || d.Hash == state.Hash || len(d.Snapshots) != 1 || !d.Pins[0].ByData {
		t.Fatalf("cfg changed: form %d, record %s, pins %s; want a rollout in FormNamespaced, pinned by data", d.Form, d.Record.Text(d.Form), d.Pins)
	}
}

// TestASnapshotIsNamedByTheDataItCopies: a pinned workload that references one more
// absent key of an unchanged Secret at each update rolls each time (an optional key
// appearing would change its pods' data), but every pin names the same snapshot.
func TestASnapshotIsNamedByTheDataItCopies(t *testing.T) {
	big := SourceRef{Secret, "big"}
	sources := listedSources{big: SourceOfSecret(secret("big", map[string][]byte{"k": []byte("v")}))}
	snapshots := map[string]bool{}
	for i := range 20 {
		env := []corev1.EnvVar{{Name: "K", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "big"}, Key: "k"}}}}
		for j := range i {
			env = append(env, corev1.EnvVar{Name: fmt.Sprint("X", j), ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "big"}, Key: fmt.Sprint("x", j), Optional: ptr.To(true)}}})
		}
		tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Env: env}}}}
		state := Vocabulary{}.Read(&Workload{Annotations: map[string]string{AnnotationInject: "true", AnnotationPin: "true"}, Template: tmpl})
		d, err := Decide(Input{Key: testKey, Namespace: "prod", State: state, Mode: ModeOptedIn, Pods: Pods{Fresh: true}}, sources)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range d.Snapshots {
			snapshots[s.Pin.Snapshot()] = true
		}
	}
	if len(snapshots) != 1 {
		t.Fatalf("20 references to one unchanged Secret made %d snapshots, want 1", len(snapshots))
	}
}

func TestIsSnapshotTakesOnlyImmutableLabelledCopiesNamedByTheirData(t *testing.T) {
	cfg := SourceRef{ConfigMap, "cfg"}
	source := configMap("cfg", map[string]string{"a": "1", "b": "2"}, nil)
	ref := Reference{SourceRef: cfg, Keys: []string{"a", "absent"}}
	name := SnapshotName("cfg", SnapshotDigest(testKey, "prod", ref, SourceOfConfigMap(source)))
	snapshot := func(name string, data map[string]string, immutable bool, label string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: name, Labels: map[string]string{LabelSnapshotOf: label}},
			Immutable: ptr.To(immutable), Data: data}
	}
	oldName := SnapshotName("cfg", SourceDigest(testKey, Reference{SourceRef: cfg, Keys: []string{"a"}}, SourceOfConfigMap(source)))
	for _, tc := range []struct {
		name string
		obj  *corev1.ConfigMap
		want bool
	}{
		{"the copy the webhook makes is the snapshot", snapshot(name, map[string]string{"a": "1"}, true, "cfg"), true},
		{"a copy named as the previous release named it is a snapshot", snapshot(oldName, map[string]string{"a": "1"}, true, "cfg"), true},
		{"a mutable object is not", snapshot(name, map[string]string{"a": "1"}, false, "cfg"), false},
		{"an object holding other data is not", snapshot(name, map[string]string{"a": "2"}, true, "cfg"), false},
		{"an object holding more data is not", snapshot(name, map[string]string{"a": "1", "b": "2"}, true, "cfg"), false},
		{"an object labelled as another source's snapshot is not", snapshot(name, map[string]string{"a": "1"}, true, "other"), false},
		{"the same copy in another namespace is not", func() *corev1.ConfigMap {
			s := snapshot(name, map[string]string{"a": "1"}, true, "cfg")
			s.Namespace = "dev"
			return s
		}(), false},
	} {
		if got := IsSnapshot(testKey, cfg, tc.obj, *tc.obj.Immutable, SourceOfConfigMap(tc.obj)); got != tc.want {
			t.Errorf("%s: IsSnapshot() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestARecordIsWrittenInTheNewFormOnlyWhereItMayBe: while only FormShared may be
// written, a due rollout keeps a v1 record in its form and a new workload starts in
// it; a v2 record is never switched back.
func TestARecordIsWrittenInTheNewFormOnlyWhereItMayBe(t *testing.T) {
	cfg := SourceRef{ConfigMap, "cfg"}
	whole := Reference{SourceRef: cfg, AllKeys: true}
	sources := listedSources{cfg: cmSource("cfg", "2")}
	for _, tc := range []struct {
		name     string
		record   string // "" for none
		writes   Form
		wantForm Form
	}{
		{"v1 record, a rollout due, v2 may be written", Record{{SourceRef: cfg, Digest: SourceDigest(testKey, whole, cmSource("cfg", "1")), Seen: true}}.Text(FormShared), FormNamespaced, FormNamespaced},
		{"v1 record, a rollout due, v1 only", Record{{SourceRef: cfg, Digest: SourceDigest(testKey, whole, cmSource("cfg", "1")), Seen: true}}.Text(FormShared), FormShared, FormShared},
		{"v2 record, a rollout due, v1 only", Record{{SourceRef: cfg, Digest: NamespacedDigest(testKey, "prod", whole, cmSource("cfg", "1")), Seen: true}}.Text(FormNamespaced), FormShared, FormNamespaced},
		{"new workload, v1 only", "", FormShared, FormShared},
		{"new workload, v2 may be written", "", FormNamespaced, FormNamespaced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			annotations := map[string]string{AnnotationInject: "true"}
			if tc.record != "" {
				annotations[AnnotationSources] = tc.record
			}
			state := Vocabulary{}.Read(&Workload{Annotations: annotations, Template: envFrom(cfg.Name)})
			d, err := Decide(Input{Key: testKey, Namespace: "prod", State: state, Mode: ModeOptedIn, Pods: Pods{Fresh: tc.record == ""}, Writes: tc.writes}, sources)
			if err != nil {
				t.Fatal(err)
			}
			digest := SourceDigest(testKey, whole, sources[cfg])
			if tc.wantForm == FormNamespaced {
				digest = NamespacedDigest(testKey, "prod", whole, sources[cfg])
			}
			if d.Form != tc.wantForm || len(d.Record) != 1 || d.Record[0].Digest != digest || d.Hash == "" {
				t.Fatalf("form %d, record %q, hash %q; want a rollout in form %d", d.Form, d.Record.Text(d.Form), d.Hash, tc.wantForm)
			}
		})
	}
}

// TestTheWebhookWritesTheNewFormOnlyUnderAWatcherThatSaysItReadsIt: the leader
// Lease's labels count only for the holder that wrote them, and only while it holds
// the Lease.
func TestTheWebhookWritesTheNewFormOnlyUnderAWatcherThatSaysItReadsIt(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	lease := func(holder string, renewed time.Duration, labels map[string]string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: now.Add(-renewed)}}}
	}
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		want  Form
	}{
		{"no Lease: no watcher elects a leader", nil, FormNamespaced},
		{"held by a watcher that reads v2", lease("w-1", time.Second, ReaderLabels("w-1")), FormNamespaced},
		{"held by a watcher of an earlier release", lease("w-0", time.Second, nil), FormShared},
		{"taken over by one of an earlier release, the labels kept", lease("w-0", time.Second, ReaderLabels("w-1")), FormShared},
		{"expired, no watcher leads", lease("w-0", 20*time.Second, nil), FormNamespaced},
		{"released, no watcher leads", lease("", time.Second, nil), FormNamespaced},
		{"reads v1 alone", lease("w-1", time.Second, map[string]string{LabelReads: "v1", LabelReader: ReaderLabels("w-1")[LabelReader]}), FormShared},
	} {
		if got := LeaderWrites(tc.lease, now); got != tc.want {
			t.Errorf("%s: LeaderWrites() = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestARecordOfALaterReleaseIsLeftAloneUntilASourceItUsesChanges: a record in a form
// this release does not read is neither healed nor rewritten at a write that changes
// no source it uses; a touch naming one of its sources, or a new pod template,
// rewrites it in this release's form.
func TestARecordOfALaterReleaseIsLeftAloneUntilASourceItUsesChanges(t *testing.T) {
	cfg := SourceRef{ConfigMap, "cfg"}
	sources := listedSources{cfg: cmSource("cfg", "2")}
	tmpl := envFrom(cfg.Name)
	tmpl.Annotations = map[string]string{AnnotationHash: "v1:later"}
	state := Vocabulary{}.Read(&Workload{Annotations: map[string]string{AnnotationInject: "true", AnnotationSources: "v3 configmap/cfg=0123456789abcdef,later"}, Template: tmpl})
	if state.Form != FormLater || !errors.Is(state.RecordErr, ErrLaterForm) {
		t.Fatalf("a v3 record read as form %d, %v; want FormLater, ErrLaterForm", state.Form, state.RecordErr)
	}
	for _, tc := range []struct {
		name    string
		touched []SourceRef
		fresh   bool
		left    bool
	}{
		{"an unrelated write", nil, false, true},
		{"a touch for another source", []SourceRef{{Secret, "other"}}, false, true},
		{"a touch for a source it uses", []SourceRef{cfg}, false, false},
		{"a new pod template", nil, true, false},
	} {
		d, err := Decide(Input{Key: testKey, Namespace: "prod", State: state, Mode: ModeOptedIn, Touched: tc.touched, Pods: Pods{Fresh: tc.fresh}}, sources)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case tc.left && (!d.Converged || d.Record != nil || d.Hash != ""):
			t.Errorf("%s: converged %v, record %q, hash %q; want it left alone", tc.name, d.Converged, d.Record.Text(d.Form), d.Hash)
		case !tc.left && (d.Converged || d.Form != FormNamespaced || d.Hash == "" || d.Hash == state.Hash):
			t.Errorf("%s: converged %v, form %d, hash %q; want it rewritten in this release's form and rolled", tc.name, d.Converged, d.Form, d.Hash)
		}
	}
}
