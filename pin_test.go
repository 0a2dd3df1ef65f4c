package confighash

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestSnapshotNameIsAValidNameThatSaysTheSourceAndTheDigest(t *testing.T) {
	d := Digest{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}
	if got := SnapshotName("app-config", d); got != "app-config-0123456789abcdef" {
		t.Errorf("SnapshotName(app-config) = %q", got)
	}
	long := strings.Repeat("a", 200) + "." + strings.Repeat("b", 52) // 253 characters
	for _, source := range []string{long, strings.Repeat("c", 235) + ".d-e" + strings.Repeat("f", 14)} {
		got := SnapshotName(source, d)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 || !strings.HasSuffix(got, "-0123456789abcdef") {
			t.Errorf("SnapshotName(%d characters) = %q (%d): %v", len(source), got, len(got), errs)
		}
	}
}

func TestSnapshotOfIsAValidLabelValueForEveryName(t *testing.T) {
	long := strings.Repeat("a", 60) + ".b-" + strings.Repeat("c", 190)
	other := long[:len(long)-1] + "d"
	for _, name := range []string{"app-config", strings.Repeat("x", 63), long, other} {
		v := SnapshotOf(name)
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("SnapshotOf(%d characters) = %q: %v", len(name), v, errs)
		}
		if len(name) <= 63 && v != name {
			t.Errorf("SnapshotOf(%q) = %q, want the name itself", name, v)
		}
	}
	if SnapshotOf(long) == SnapshotOf(other) {
		t.Errorf("two long names that differ only at their end share %q", SnapshotOf(long))
	}
}

func TestPinsReadBackAsWritten(t *testing.T) {
	text := "configmap/app=0123456789abcdef secret/db=fedcba9876543210"
	pins, err := ParsePins("secret/db=fedcba9876543210  configmap/app=0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	if pins.String() != text {
		t.Errorf("String() = %q, want %q", pins.String(), text)
	}
	if pin, ok := pins.Get(SourceRef{Secret, "db"}); !ok || pin.Snapshot() != "db-fedcba9876543210" {
		t.Errorf("Get(Secret/db) = %v, %v", pin, ok)
	}
	for _, bad := range []string{
		"configmap/app=absent",
		"configmap/app=0123456789abcdef,baseline",
		"secretproviderclass/vault=0123456789abcdef",
		"configmap/app=0123456789abcdef configmap/app=fedcba9876543210",
		"configmap/app=0123",
		"app=0123456789abcdef",
	} {
		if _, err := ParsePins(bad); !errors.Is(err, ErrBadPins) {
			t.Errorf("ParsePins(%q) = %v, want ErrBadPins", bad, err)
		}
	}
}

// pinnedTemplate uses app-config by envFrom, env and a projected volume, db by a
// volume and env, and other by envFrom.
func pinnedTemplate(pins string) *corev1.PodTemplateSpec {
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "other"}}}}}},
		Containers: []corev1.Container{{Name: "app",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}},
			Env: []corev1.EnvVar{
				{Name: "PLAIN", Value: "x"},
				{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}},
				{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}, Key: "mode"}}},
			}}},
		Volumes: []corev1.Volume{
			{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db"}}},
			{Name: "all", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}},
			}}}},
		},
	}}
	if pins != "" {
		tmpl.Annotations = map[string]string{AnnotationPinned: pins}
	}
	return tmpl
}

// renamed applies the renames as a JSON patch to the template's pod spec.
func renamed(t *testing.T, tmpl *corev1.PodTemplateSpec, renames []Rename) *corev1.PodTemplateSpec {
	t.Helper()
	var ops []map[string]string
	for _, r := range renames {
		ops = append(ops, map[string]string{"op": "replace", "path": "/spec" + r.Path, "value": r.Name})
	}
	doc, _ := json.Marshal(tmpl)
	raw, _ := json.Marshal(ops)
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		t.Fatal(err)
	}
	if doc, err = patch.Apply(doc); err != nil {
		t.Fatalf("the renames do not apply: %v", err)
	}
	out := &corev1.PodTemplateSpec{}
	if err := json.Unmarshal(doc, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// names lists the source names a template gives, in the order eachUse finds them.
func names(tmpl *corev1.PodTemplateSpec) string {
	var out []string
	eachUse(&tmpl.Spec, func(u use) { out = append(out, *u.name) })
	return strings.Join(out, " ")
}

func TestRepinNamesEachPinnedSourceBySnapshotAndTheRestByName(t *testing.T) {
	app1 := Pin{SourceRef: SourceRef{ConfigMap, "app-config"}, Digest: Digest{1}}
	app2 := Pin{SourceRef: SourceRef{ConfigMap, "app-config"}, Digest: Digest{2}, Data: Digest{4}, ByData: true}
	db1 := Pin{SourceRef: SourceRef{Secret, "db"}, Digest: Digest{3}}
	tmpl := pinnedTemplate("")

	pinned := renamed(t, tmpl, Repin(tmpl, Pins{app1, db1}))
	want := fmt.Sprintf("other %[1]s %[2]s %[1]s %[2]s %[1]s", app1.Snapshot(), db1.Snapshot())
	if got := names(pinned); got != want {
		t.Fatalf("pinned: names %q, want %q", got, want)
	}
	// What the webhook writes beside the names: each reads as its source.
	pinned.Annotations = map[string]string{AnnotationPinned: Pins{app1, db1}.String()}
	if refs := References(pinned); len(refs) != 3 || refs[0].Name != "app-config" || !refs[0].AllKeys || refs[1].Name != "other" || refs[2].Name != "db" || !refs[2].AllKeys {
		t.Fatalf("References(pinned) = %+v, want app-config, other and db", refs)
	}

	// A change of app-config: its snapshot moves, db's stays.
	moved := renamed(t, pinned, Repin(pinned, Pins{app2, db1}))
	want = fmt.Sprintf("other %[1]s %[2]s %[1]s %[2]s %[1]s", app2.Snapshot(), db1.Snapshot())
	if got := names(moved); got != want {
		t.Fatalf("app-config moved: names %q, want %q", got, want)
	}
	if len(Repin(pinned, Pins{app1, db1})) != 0 {
		t.Error("the same pins again: renames")
	}

	// Unpinned: every name back to its source's.
	if got, want := names(renamed(t, pinned, Repin(pinned, nil))), names(tmpl); got != want {
		t.Fatalf("unpinned: names %q, want %q", got, want)
	}
}

// pinnedWorld is a pinned workload whose admissions are written as the webhook
// writes them: the record, the hash, the pins and the renames.
type pinnedWorld struct {
	t         *testing.T
	tmpl      *corev1.PodTemplateSpec
	record    Record
	form      Form
	sources   map[SourceRef]Source
	revisions []*corev1.PodTemplateSpec
	snapshots map[string]bool
}

func (w *pinnedWorld) admit(fresh bool) Decision {
	w.t.Helper()
	annotations := map[string]string{AnnotationInject: "true", AnnotationPin: "true"}
	state := Vocabulary{}.Read(&Workload{Annotations: annotations, Template: w.tmpl})
	state.Record, state.Form = w.record, w.form
	d, err := Decide(Input{Key: testKey, State: state, Mode: ModeOptedIn, Pods: Pods{Fresh: fresh}}, listedSources(w.sources))
	if err != nil {
		w.t.Fatal(err)
	}
	for _, s := range d.Snapshots {
		w.snapshots[s.Pin.Snapshot()] = true
	}
	w.record, w.form = d.Record, d.Form
	tmpl := renamed(w.t, w.tmpl, Repin(w.tmpl, d.Pins))
	tmpl.Annotations = map[string]string{AnnotationHash: d.Hash}
	if len(d.Pins) > 0 {
		tmpl.Annotations[AnnotationPinned] = d.Pins.String()
	}
	if len(w.revisions) == 0 || !equalTemplates(tmpl, w.revisions[len(w.revisions)-1]) {
		w.revisions = append(w.revisions, tmpl)
	}
	w.tmpl = tmpl
	return d
}

func equalTemplates(a, b *corev1.PodTemplateSpec) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestAPinnedWorkloadReturnsToItsDataAndStaysUntilTheNextChange: a rollback of a
// pinned workload runs the snapshot it rolled out with, declines the data it returned
// from, and rolls forward once at the source's next change.
func TestAPinnedWorkloadReturnsToItsDataAndStaysUntilTheNextChange(t *testing.T) {
	cfg := SourceRef{ConfigMap, "cfg"}
	w := &pinnedWorld{t: t, tmpl: envFrom("cfg", "plain"), sources: map[SourceRef]Source{cfg: cmSource("cfg", "1")}, snapshots: map[string]bool{}}
	whole := Reference{SourceRef: cfg, AllKeys: true}
	digest := func() Digest { return NamespacedDigest(testKey, "", whole, w.sources[cfg]) }
	snapshot := func() string { return SnapshotName("cfg", SnapshotDigest(testKey, "", whole, w.sources[cfg])) }
	d1, s1 := digest(), snapshot()

	w.admit(true)
	if got := names(w.tmpl); got != s1+" plain" {
		t.Fatalf("created: the template names %q, want cfg's snapshot and plain", got)
	}
	if !w.snapshots[s1] {
		t.Fatal("created: no snapshot of cfg's data made")
	}
	if d := w.admit(false); !d.Converged || len(d.Snapshots) > 0 || len(w.revisions) != 1 {
		t.Fatalf("an admission that changes nothing: converged %v, snapshots %v, %d revisions", d.Converged, d.Snapshots, len(w.revisions))
	}

	w.sources[cfg] = cmSource("cfg", "2")
	d2, s2 := digest(), snapshot()
	w.admit(false)
	if len(w.revisions) != 2 || names(w.tmpl) != s2+" plain" || !w.snapshots[s2] {
		t.Fatalf("cfg changed: %d revisions, names %q, snapshots %v; want a rollout to cfg's new snapshot", len(w.revisions), names(w.tmpl), w.snapshots)
	}

	// kubectl rollout undo: the first revision's template comes back.
	w.tmpl = w.revisions[0]
	d := w.admit(false)
	if !equalTemplates(w.tmpl, w.revisions[0]) || len(d.Snapshots) > 0 {
		t.Fatalf("the return: template %v, snapshots %v; want the first revision as it was", w.tmpl.Annotations, d.Snapshots)
	}
	if e := w.record[0]; e.Digest != d1 || !e.Declining || e.Declined != d2 {
		t.Fatalf("the return: record %s, want cfg at its first data, declining its second", w.record)
	}
	if read, err := ParseRecord(w.record.Text(FormNamespaced)); err != nil || !slices.Equal(read, w.record) {
		t.Fatalf("the record %q reads back as %v, %v", w.record, read, err)
	}
	if d := w.admit(false); !d.Converged || !equalTemplates(w.tmpl, w.revisions[0]) {
		t.Fatalf("an unrelated admission after the return: converged %v, template %v; want it to stay", d.Converged, w.tmpl.Annotations)
	}

	w.sources[cfg] = cmSource("cfg", "3")
	s3 := snapshot()
	w.admit(false)
	if names(w.tmpl) != s3+" plain" || w.record[0].Declining {
		t.Fatalf("cfg's next change: names %q, record %s; want its new snapshot, nothing declined", names(w.tmpl), w.record)
	}
}

// TestAWorkloadNoLongerPinnedRunsItsSourcesData: without AnnotationPin, a declined
// entry no longer holds back the source's data.
func TestAWorkloadNoLongerPinnedRunsItsSourcesData(t *testing.T) {
	cfg := SourceRef{ConfigMap, "cfg"}
	src := cmSource("cfg", "2")
	d2 := NamespacedDigest(testKey, "", Reference{SourceRef: cfg, AllKeys: true}, src)
	record := Record{{SourceRef: cfg, Digest: Digest{1}, Seen: true, Declining: true, Declined: d2}}
	state := injected(envFrom("cfg"))
	state.Record, state.Hash = record, record.Hash(testKey)
	d, err := Decide(Input{Key: testKey, State: state, Mode: ModeOptedIn}, listedSources(map[SourceRef]Source{cfg: src}))
	if err != nil {
		t.Fatal(err)
	}
	if d.Converged || d.Record[0].Digest != d2 || d.Record[0].Declining || d.Pins != nil {
		t.Fatalf("unpinned: record %s, converged %v, pins %v; want cfg's current data, a rollout", d.Record, d.Converged, d.Pins)
	}
}

// TestPinningComesFromTheWorkloadThenItsNamespaceThenTheFlags: a namespace's label or
// the flag pins a workload that does not say; one that says false is not pinned.
func TestPinningComesFromTheWorkloadThenItsNamespaceThenTheFlags(t *testing.T) {
	cfg := SourceRef{ConfigMap, "cfg"}
	sources := listedSources(map[SourceRef]Source{cfg: cmSource("cfg", "1")})
	for _, tc := range []struct {
		annotation string
		wider      Pacing
		pinned     bool
	}{
		{"", Pacing{}, false},
		{"", Pacing{Pinning: PinOn}, true},
		{"true", Pacing{}, true},
		{"false", Pacing{Pinning: PinOn}, false},
		{"", Pacing{Pinning: PinOff}.Over(Pacing{Pinning: PinOn}), false},
	} {
		annotations := map[string]string{AnnotationInject: "true"}
		if tc.annotation != "" {
			annotations[AnnotationPin] = tc.annotation
		}
		state := Vocabulary{}.Read(&Workload{Annotations: annotations, Template: envFrom("cfg")})
		d, err := Decide(Input{Key: testKey, State: state, Mode: ModeOptedIn, Pods: Pods{Fresh: true}, Pacing: tc.wider}, sources)
		if err != nil {
			t.Fatal(err)
		}
		if pinned := len(d.Pins) > 0; pinned != tc.pinned {
			t.Errorf("annotation %q over %+v: pinned %v, want %v", tc.annotation, tc.wider, pinned, tc.pinned)
		}
	}
	if _, err := ParsePacing(PacingText{Pin: "yes please"}); err == nil {
		t.Error(`ParsePacing(pin "yes please") = nil error`)
	}
	state := Vocabulary{}.Read(&Workload{Annotations: map[string]string{AnnotationInject: "true", AnnotationPin: "sometimes"}, Template: envFrom("cfg")})
	if len(state.Problems) != 1 || !strings.Contains(state.Problems[0].Error(), AnnotationPin) {
		t.Errorf("a bad %s: problems %v", AnnotationPin, state.Problems)
	}
}

func TestARemakeAsksForTheSnapshotsOfKeptPinsWhoseDataIsCurrent(t *testing.T) {
	app, db := SourceRef{ConfigMap, "app"}, SourceRef{Secret, "db"}
	record := Record{{SourceRef: app, Digest: Digest{1}, Seen: true}, {SourceRef: db, Digest: Digest{2}, Seen: true}}
	have := Pins{{SourceRef: app, Digest: Digest{1}}, {SourceRef: db, Digest: Digest{2}}}
	// app still holds the pinned data; db moved on since (a return declined it).
	observations := []Observation{
		{Reference: Reference{SourceRef: app, AllKeys: true}, Present: true, Counts: true, Digest: Digest{1}},
		{Reference: Reference{SourceRef: db, AllKeys: true}, Present: true, Counts: true, Digest: Digest{9}},
	}
	for _, remake := range []bool{false, true} {
		pins, snapshots := pinsOf(record, have, observations, remake, func(o Observation) Pin { return Pin{SourceRef: o.SourceRef, Digest: o.Digest} })
		if !slices.Equal(pins, have) {
			t.Errorf("remake %v: pins %s, want those kept: %s", remake, pins, have)
		}
		var made []SourceRef
		for _, s := range snapshots {
			made = append(made, s.Pin.SourceRef)
		}
		if want := map[bool][]SourceRef{false: nil, true: {app}}[remake]; !slices.Equal(made, want) {
			t.Errorf("remake %v: snapshots of %v, want %v", remake, made, want)
		}
	}
}
