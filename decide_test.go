package confighash

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// injected is the state of a workload opted in with AnnotationInject, never hashed.
func injected(tmpl *corev1.PodTemplateSpec) State {
	return Vocabulary{Reloader: true}.Read(&Workload{Annotations: map[string]string{AnnotationInject: "true"}, Template: tmpl})
}

// created is the decision at the creation of an injected workload.
func created(tmpl *corev1.PodTemplateSpec, sources map[SourceRef]Source) Decision {
	d, err := Decide(Input{Key: testKey, State: injected(tmpl), Mode: ModeOptedIn, Pods: Pods{Fresh: true}}, listedSources(sources))
	if err != nil {
		panic(err)
	}
	return d
}

// world is a workload and its namespace's sources, admitted as the webhook would.
type world struct {
	t           *testing.T
	annotations map[string]string
	tmpl        *corev1.PodTemplateSpec
	sources     map[SourceRef]Source
	mode        Mode
	pacing      Pacing
	state       State
	rollouts    int
	inPlace     bool
}

func newWorld(t *testing.T, annotations map[string]string, tmpl *corev1.PodTemplateSpec, sources ...Source) *world {
	w := &world{t: t, annotations: annotations, tmpl: tmpl, sources: map[SourceRef]Source{}, mode: ModeOptedIn}
	for _, s := range sources {
		w.sources[s.SourceRef] = s
	}
	return w
}

// admit admits the workload as it is now and writes what the decision says.
func (w *world) admit(pods Pods) Decision {
	w.t.Helper()
	state := Vocabulary{Reloader: true}.Read(&Workload{Annotations: w.annotations, Template: w.tmpl})
	state.Record, state.RecordErr, state.Hash, state.Adopted = w.state.Record, w.state.RecordErr, w.state.Hash, w.state.Adopted
	state.Release = w.state.Release
	d, err := Decide(Input{Key: testKey, State: state, Mode: w.mode, Pods: pods, Pacing: w.pacing, InPlace: w.inPlace}, listedSources(w.sources))
	if err != nil {
		w.t.Fatal(err)
	}
	if !d.Acts || d.Record == nil {
		return d
	}
	if d.Hash != w.state.Hash {
		w.rollouts++
	}
	w.state.Record, w.state.Hash, w.state.Adopted = d.Record, d.Hash, d.Adopted
	return d
}

// settle admits the workload, and when sources started to count, admits it again
// with the pods holding their current data, as the watcher finds.
func (w *world) settle() {
	w.t.Helper()
	d := w.admit(Pods{})
	if len(d.Unproven) > 0 {
		held := map[SourceRef]bool{}
		for _, ref := range d.Unproven {
			held[ref] = true
		}
		w.admit(Pods{Proven: held})
	}
}

func envFrom(names ...string) *corev1.PodTemplateSpec {
	ctr := corev1.Container{Name: "app"}
	for _, n := range names {
		ctr.EnvFrom = append(ctr.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}}})
	}
	return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{ctr}}}
}

func cmSource(name, value string) Source {
	return SourceOfConfigMap(configMap(name, map[string]string{"k": value}, nil))
}

// TestWhatCountsChangingRollsNothing: each change of what counts, in either
// vocabulary, made and undone, rolls nothing, also at a later unrelated admission;
// then a change of the data rolls once (rule 1).
func TestWhatCountsChangingRollsNothing(t *testing.T) {
	cfg, other := SourceRef{ConfigMap, "cfg"}, SourceRef{ConfigMap, "other"}
	onSource := func(set func(*Source)) func(*world) {
		return func(w *world) { s := w.sources[cfg]; set(&s); w.sources[cfg] = s }
	}
	onWorkload := func(name, value string) func(*world) {
		return func(w *world) { w.annotations[name] = value }
	}
	tests := []struct {
		name        string
		annotations map[string]string
		change      func(*world)
		// counts: other counts before and after, so that its change rolls once.
		counts bool
	}{
		{"ignore on the source", map[string]string{AnnotationInject: "true"}, onSource(func(s *Source) { s.Ignore = true }), true},
		{"Reloader's ignore on the source", map[string]string{ReloaderAuto: "true"}, onSource(func(s *Source) { s.ReloaderIgnore = true }), true},
		{"match on the source, in search mode", map[string]string{AnnotationInject: "true", AnnotationSearch: "true"}, onSource(func(s *Source) { s.Match = true }), false},
		{"Reloader's match on the source, in Reloader's search mode", map[string]string{ReloaderSearch: "true"}, onSource(func(s *Source) { s.ReloaderMatch = true }), false},
		{"exclude on the workload", map[string]string{AnnotationInject: "true"}, onWorkload(AnnotationExcludeConfigMaps, "cfg"), true},
		{"Reloader's exclude on the workload", map[string]string{ReloaderAuto: "true"}, onWorkload(ReloaderConfigMapExclude, "cfg"), true},
		{"include on the workload of a source it does not use", map[string]string{AnnotationInject: "true"}, onWorkload(AnnotationIncludeConfigMaps, "extra"), true},
		{"Reloader's reload list on the workload", map[string]string{ReloaderConfigMapAuto: "true"}, onWorkload(ReloaderConfigMapReload, "extra"), true},
		{"only secrets on the workload", map[string]string{AnnotationInject: "true"}, onWorkload(AnnotationOnly, "secrets"), true},
		{"search on the workload", map[string]string{AnnotationInject: "true"}, onWorkload(AnnotationSearch, "true"), true},
		{"Reloader's search on the workload", map[string]string{ReloaderAuto: "true"}, onWorkload(ReloaderSearch, "true"), true},
		{"Reloader's typed auto for Secrets only", map[string]string{}, onWorkload(ReloaderSecretAuto, "true"), false},
		{"the namespace opting every workload in", map[string]string{}, func(w *world) { w.mode = ModeEvery }, false},
		{"the workload opting in", map[string]string{AnnotationInject: "false"}, onWorkload(AnnotationInject, "true"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, tt.annotations, envFrom("cfg", "other"), cmSource("cfg", "1"), cmSource("other", "1"), cmSource("extra", "1"))
			w.admit(Pods{Fresh: true})
			before := w.rollouts
			annotations, sources, mode := maps.Clone(w.annotations), maps.Clone(w.sources), w.mode
			tt.change(w)
			w.settle()
			w.settle() // an unrelated admission
			w.annotations, w.sources, w.mode = annotations, sources, mode
			w.settle()
			w.settle()
			if w.rollouts != before {
				t.Fatalf("%d rollouts after the change and its undoing, want none", w.rollouts-before)
			}
			w.sources[other] = cmSource("other", "2")
			w.settle()
			w.settle()
			want := 0
			if tt.counts {
				want = 1
			}
			if got := w.rollouts - before; got != want {
				t.Fatalf("a data change of a source that counts: %v rolled %d times, want %d (record %s)", tt.counts, got, want, w.state.Record)
			}
		})
	}
}

// TestASourceThatChangedWhileItDidNotCountRollsOnceWhenItCounts: the pods still hold
// the data it had when it stopped counting.
func TestASourceThatChangedWhileItDidNotCountRollsOnceWhenItCounts(t *testing.T) {
	cfg := SourceRef{ConfigMap, "cfg"}
	w := newWorld(t, map[string]string{AnnotationInject: "true"}, envFrom("cfg"), cmSource("cfg", "1"))
	w.admit(Pods{Fresh: true})
	s := w.sources[cfg]
	s.Ignore = true
	w.sources[cfg] = s
	w.settle()
	w.sources[cfg] = cmSource("cfg", "2")
	s = w.sources[cfg]
	s.Ignore = true
	w.sources[cfg] = s
	w.settle()
	if w.rollouts != 1 {
		t.Fatalf("%d rollouts while it was ignored, want only the creation", w.rollouts)
	}
	w.sources[cfg] = cmSource("cfg", "2")
	w.settle()
	w.settle()
	if w.rollouts != 2 {
		t.Fatalf("%d rollouts, want the creation and one when it counted again", w.rollouts)
	}
}

// TestASourceThatStartsToCountRollsAtItsNextChange: matched in search mode, then
// changed: one rollout, at the change.
func TestASourceThatStartsToCountRollsAtItsNextChange(t *testing.T) {
	cfg := SourceRef{ConfigMap, "cfg"}
	matched := func(value string) Source { s := cmSource("cfg", value); s.ReloaderMatch = true; return s }
	w := newWorld(t, map[string]string{ReloaderSearch: "true"}, envFrom("cfg"), cmSource("cfg", "1"))
	w.admit(Pods{Fresh: true})
	w.sources[cfg] = matched("1")
	w.settle()
	w.settle()
	if w.rollouts != 1 {
		t.Fatalf("%d rollouts after the match, want only the creation", w.rollouts)
	}
	w.sources[cfg] = matched("2")
	w.settle()
	w.settle()
	if w.rollouts != 2 {
		t.Fatalf("%d rollouts after its change, want 2", w.rollouts)
	}
}

func TestAWorkloadMetForTheFirstTime(t *testing.T) {
	cfg := SourceRef{ConfigMap, "cfg"}
	state := func() State {
		return Vocabulary{}.Read(&Workload{Annotations: map[string]string{AnnotationInject: "true"}, Template: envFrom("cfg")})
	}
	sources := listedSources{cfg: cmSource("cfg", "1")}
	decide := func(pods Pods) Decision {
		d, err := Decide(Input{Key: testKey, State: state(), Mode: ModeOptedIn, Pods: pods}, sources)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := decide(Pods{}); d.Record != nil || !slices.Equal(d.Unproven, []SourceRef{cfg}) || d.Converged {
		t.Fatalf("unknown pods: record %v, unproven %v; want nothing written, cfg unproven", d.Record, d.Unproven)
	}
	if d := decide(Pods{Proven: map[SourceRef]bool{cfg: true}}); d.Hash != "" || d.Adopted != d.Record.Hash(testKey) || len(d.Unproven) > 0 {
		t.Fatalf("pods with the current data: hash %q, adopted %q; want adopted at the record's hash, no template hash", d.Hash, d.Adopted)
	}
	if d := decide(Pods{Proven: map[SourceRef]bool{cfg: false}}); d.Hash == "" || d.Adopted != "" {
		t.Fatalf("pods that may hold older data: hash %q, adopted %q; want a hash, a rollout", d.Hash, d.Adopted)
	}
	if d := decide(Pods{Fresh: true}); d.Hash == "" || d.Hash != d.Record.Hash(testKey) {
		t.Fatalf("a new pod template: hash %q; want it hashed", d.Hash)
	}
}

func TestDecideRefusesMoreThanMaxSources(t *testing.T) {
	names := make([]string, MaxSources+1)
	for i := range names {
		names[i] = "cm-" + string(rune('a'+i/26)) + string(rune('a'+i%26))
	}
	decide := func(tmpl *corev1.PodTemplateSpec) error {
		_, err := Decide(Input{Key: testKey, State: injected(tmpl), Mode: ModeOptedIn}, listedSources{})
		return err
	}
	if err := decide(envFrom(names[:MaxSources]...)); err != nil {
		t.Fatalf("%d sources refused: %v", MaxSources, err)
	}
	if err := decide(envFrom(names...)); !errors.Is(err, ErrTooManySources) {
		t.Fatalf("%d sources: error %v, want ErrTooManySources", len(names), err)
	}
}

// TestAnArgoRolloutThatRestartsIsRestartedForEachChangeNeverRolled: an Argo Rollout
// with Reloader's restart strategy keeps the hash its pod template was created with;
// each change of its data asks for its pods to be restarted for the new hash, once the
// watcher's mark says so it is converged, and a return to earlier data asks again. A
// Deployment with the annotation is told it rolls, and rolls.
func TestAnArgoRolloutThatRestartsIsRestartedForEachChangeNeverRolled(t *testing.T) {
	cfg := SourceRef{ConfigMap, "cfg"}
	sources := map[SourceRef]Source{cfg: cmSource("cfg", "1")}
	annotations := map[string]string{ReloaderAuto: "true", ReloaderRolloutStrategy: "restart"}
	tmpl := envFrom("cfg")
	decide := func(kind Kind, fresh bool) (Decision, State) {
		t.Helper()
		state := Vocabulary{Reloader: true}.Read(&Workload{Kind: kind, Annotations: annotations, Template: tmpl})
		d, err := Decide(Input{Key: testKey, State: state, Mode: ModeOptedIn, Pods: Pods{Fresh: fresh}}, listedSources(sources))
		if err != nil {
			t.Fatal(err)
		}
		return d, state
	}
	write := func(d Decision) {
		annotations[AnnotationSources] = d.Record.Text(d.Form)
		tmpl.Annotations = map[string]string{AnnotationHash: d.Hash}
	}
	created, _ := decide(Rollout, true)
	write(created)
	first := created.Hash
	for i, value := range []string{"2", "1"} {
		sources[cfg] = cmSource("cfg", value)
		d, _ := decide(Rollout, false)
		if d.Hash != first || d.Restart == "" || d.Restart == d.Hash && i == 0 || d.Converged {
			t.Fatalf("change %d: hash %s, restart %s, converged %v; want the template's hash kept, a restart due", i+1, d.Hash, d.Restart, d.Converged)
		}
		write(d)
		if again, _ := decide(Rollout, false); again.Converged {
			t.Fatalf("change %d: converged with its record written but its pods not restarted", i+1)
		}
		e := Explain(ExplainInput{Vocabulary: Vocabulary{Reloader: true}, Workload: &Workload{Kind: Rollout, Annotations: annotations, Template: tmpl},
			Mode: ModeOptedIn, Sources: sources, Key: testKey, HaveKey: true})
		if e.Verdict != VerdictRollout || !strings.Contains(e.Why, "restarts its pods") {
			t.Fatalf("change %d: explain says %s: %s; want its pods to be restarted", i+1, e.Verdict, e.Why)
		}
		annotations[AnnotationRestartedHash] = RestartedMark(d.Restart, first)
		if again, state := decide(Rollout, false); !again.Converged || state.Runs() != d.Restart {
			t.Fatalf("change %d: not converged once restarted for %s (runs %s)", i+1, d.Restart, state.Runs())
		}
	}
	if _, state := decide(Rollout, false); state.Restarted == "" {
		t.Fatal("the mark of the last restart was not read")
	}
	tmpl.Annotations[AnnotationHash] = "v1:" + strings.Repeat("0", 64)
	if _, state := decide(Rollout, false); state.Restarted != "" {
		t.Fatal("a mark from another pod template was read: a rollout since restarted every pod")
	}

	delete(annotations, AnnotationRestartedHash)
	write(created)
	sources[cfg] = cmSource("cfg", "3")
	d, state := decide(Deployment, false)
	if d.Restart != "" || d.Hash == first || len(state.Problems) != 1 {
		t.Fatalf("a Deployment: restart %q, hash %s, problems %v; want it rolled, and told why", d.Restart, d.Hash, state.Problems)
	}
}
