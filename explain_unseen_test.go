package confighash

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// unseenWorkload uses ConfigMap/app and Secret/db, as created: hashed with the sources
// of that time, or never admitted.
func unseenWorkload(t *testing.T, annotations map[string]string, admitted bool) (*Workload, map[SourceRef]Source) {
	t.Helper()
	envFrom := []corev1.EnvFromSource{
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}},
		{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}},
	}
	w := &Workload{Kind: Deployment, Namespace: "shop", Name: "web", Annotations: annotations,
		Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", EnvFrom: envFrom}}}}}
	app := SourceOfConfigMap(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app"}, Data: map[string]string{"greeting": "v1"}})
	db := SourceOfSecret(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Data: map[string][]byte{"password": []byte("s3cret")}})
	sources := map[SourceRef]Source{app.SourceRef: app, db.SourceRef: db}
	if admitted {
		key, _ := NewKey([]byte(strings.Repeat("k", 32)))
		d, err := Decide(Input{Key: key, Namespace: "shop", State: Vocabulary{}.Read(w), Mode: ModeOptedIn, Pods: Pods{Fresh: true}}, listedSources(sources))
		if err != nil || d.Hash == "" {
			t.Fatalf("admission: %+v, %v", d, err)
		}
		w.Annotations[AnnotationSources] = d.Record.Text(d.Form)
		w.Template.Annotations = map[string]string{AnnotationHash: d.Hash}
	}
	return w, sources
}

// With a namespace's view rights alone (no Secrets, no hash key, maybe not the
// namespace), explain says what it can from when the sources were written and what the
// watcher wrote on the workload, and never claims what it could not see.
func TestExplainWithViewRightsSaysWhatItSaw(t *testing.T) {
	now := time.Date(2026, 5, 1, 10, 30, 0, 0, time.UTC)
	admitted := now.Add(-time.Hour)
	before := Written{Time: admitted.Add(-time.Minute), ResourceVersion: "100"}
	after := Written{Time: now.Add(-time.Minute), ResourceVersion: "130"}
	rolled := map[string]string{AnnotationInject: "true", AnnotationTrigger: "ConfigMap/app@123",
		AnnotationStatus: "rolled 2026-05-01T10:00:00Z until 2026-05-01T11:00:00Z: ConfigMap/app@123 changed; further changes wait for its pause period"}
	tests := []struct {
		name        string
		annotations map[string]string
		admitted    bool
		written     Written
		hidden      SourceKinds
		modeUnseen  bool
		verdict     string
		why         []string
	}{
		{"sources written before the last admission are up to date", map[string]string{AnnotationInject: "true"}, true, before, 0, false,
			VerdictUpToDate, []string{"before the workload's last admission", "without the hash key"}},
		{"a Secret that could not be read leaves it unknown", map[string]string{AnnotationInject: "true"}, true, before, SourceKindsOf(Secret), false,
			VerdictUnknown, []string{"Secret/db could not be read", "whether a rollout is due is not known"}},
		{"a ConfigMap written after the last rollout, in the pause period, is held until it ends", rolled, true, after, SourceKindsOf(Secret), false,
			VerdictHeld, []string{"ConfigMap/app was written after the last rollout (resourceVersion 130 > 123)", "pause period, until 2026-05-01T11:00:00Z"}},
		{"a ConfigMap written at the version the last rollout named is not a change", rolled, true, Written{Time: now, ResourceVersion: "123"}, 0, false,
			VerdictUpToDate, nil},
		{"a ConfigMap written after the workload, with nothing holding it, may be pending", map[string]string{AnnotationInject: "true"}, true, after, 0, false,
			VerdictUnknown, []string{"ConfigMap/app was last written at 2026-05-01T10:29:00Z, after the workload was last written", "the watcher has not rolled it since"}},
		{"a paced workload's later write is not taken to have hashed a ConfigMap", map[string]string{AnnotationInject: "true", AnnotationRolloutWindow: "Mon-Fri 17:00-18:00 UTC"}, true, before, 0, false,
			VerdictUnknown, []string{"ConfigMap/app was last written at 2026-05-01T09:29:00Z, and no admission is known to have hashed it since"}},
		{"a hold the watcher wrote is shown as the reason", map[string]string{AnnotationInject: "true",
			AnnotationStatus: "held 2026-05-01T10:00:00Z until 2026-05-01T17:00:00Z: ConfigMap/app changed: outside its rollout window (Mon-Fri 17:00-18:00 UTC)"}, true, after, 0, false,
			VerdictHeld, []string{"the watcher holds it: ConfigMap/app changed: outside its rollout window"}},
		{"a workload never admitted, in a namespace that could not be read, names the injection label", map[string]string{AnnotationInject: "true"}, false, before, SourceKindsOf(Secret), true,
			VerdictNoRollout, []string{"never admitted by confighash", "lacks the label confighash.dev/injection=enabled"}},
		{"one never admitted that does not opt in names both causes", map[string]string{}, false, before, 0, true,
			VerdictNoRollout, []string{"never admitted by confighash", "it does not opt in (no opt-in annotation)", "lacks the label"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, sources := unseenWorkload(t, tt.annotations, tt.admitted)
			if tt.hidden.Has(Secret) {
				delete(sources, SourceRef{Secret, "db"})
			}
			e := Explain(ExplainInput{Workload: w, Mode: ModeOptedIn, ModeUnseen: tt.modeUnseen, Sources: sources, Hidden: tt.hidden, Now: now,
				Written: map[SourceRef]Written{{ConfigMap, "app"}: tt.written, {Secret, "db"}: before}, Admitted: admitted, Unseen: []string{"the hash key: get refused"}})
			if e.Verdict != tt.verdict {
				t.Errorf("verdict %q (%s), want %q", e.Verdict, e.Why, tt.verdict)
			}
			for _, want := range tt.why {
				if !strings.Contains(e.Why, want) {
					t.Errorf("why %q, want it to say %q", e.Why, want)
				}
			}
			if e.Hash != "" || e.TemplateHash != "" || len(e.Unseen) != 1 {
				t.Errorf("hashes %q %q and unseen %q; want no hash shown and what was not seen", e.Hash, e.TemplateHash, e.Unseen)
			}
			for _, s := range e.Sources {
				if s.Kind == string(Secret) && tt.hidden.Has(Secret) && (!s.Counts || s.Why != "could not be read" || s.Now != "") {
					t.Errorf("Secret/db: %+v; want it counted, unread, not absent", s)
				}
			}
		})
	}
}

// With the key, a change due while the watcher's pause period runs is held until it
// ends, as the watcher wrote, not rolled at "the next touch".
func TestExplainHoldsAChangeDueForThePausePeriodTheWatcherWrote(t *testing.T) {
	key, _ := NewKey([]byte(strings.Repeat("k", 32)))
	w, sources := unseenWorkload(t, map[string]string{AnnotationInject: "true", AnnotationPausePeriod: "1h",
		AnnotationStatus: "rolled 2026-05-01T10:00:00Z until 2026-05-01T11:00:00Z: ConfigMap/app@123 changed; further changes wait for its pause period"}, true)
	app := SourceOfConfigMap(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app"}, Data: map[string]string{"greeting": "v2"}})
	sources[app.SourceRef] = app
	in := ExplainInput{Workload: w, Mode: ModeOptedIn, Sources: sources, Key: key, HaveKey: true, Now: time.Date(2026, 5, 1, 10, 30, 0, 0, time.UTC)}
	e := Explain(in)
	if e.Verdict != VerdictHeld || !strings.Contains(e.Why, "until 2026-05-01T11:00:00Z") || e.Watcher != "rolled at 2026-05-01T10:00:00Z, until 2026-05-01T11:00:00Z: ConfigMap/app@123 changed; further changes wait for its pause period" {
		t.Errorf("in the pause period: %s: %s; the watcher: %s", e.Verdict, e.Why, e.Watcher)
	}
	in.Now = time.Date(2026, 5, 1, 11, 30, 0, 0, time.UTC)
	if e := Explain(in); e.Verdict != VerdictRollout || !strings.Contains(e.Why, "the next touch") {
		t.Errorf("after the pause period: %s: %s", e.Verdict, e.Why)
	}
}

// An opt-in annotation whose value is not a boolean is said to be ignored, with the
// values it takes, not read as opting in to no source kind.
func TestExplainSaysANonBooleanOptInIsIgnored(t *testing.T) {
	w, sources := unseenWorkload(t, map[string]string{AnnotationInject: "yes"}, false)
	for mode, want := range map[Mode]string{
		ModeOptedIn: `confighash.dev/inject=yes is not a boolean and is ignored: want "true" or "false"`,
		ModeEvery:   `its namespace opts every workload in; confighash.dev/inject=yes is not a boolean and is ignored`,
	} {
		e := Explain(ExplainInput{Workload: w, Mode: mode, Sources: sources})
		if !strings.Contains(e.OptIn, want) || strings.Contains(e.OptIn, "opts in to no source kind") {
			t.Errorf("mode %v: opt-in %q, want %q", mode, e.OptIn, want)
		}
	}
}
