package confighash

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// inPlacePod is a pod made from a pod template that asks for restart in place, with
// its other annotations.
func inPlacePod(annotations map[string]string, names ...string) *corev1.Pod {
	tmpl := envFrom(names...)
	a := map[string]string{AnnotationRestart: "in-place"}
	for k, v := range annotations {
		a[k] = v
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", Annotations: a}, Spec: tmpl.Spec}
}

func tokenOf(t *testing.T, pod *corev1.Pod, sources ...Source) (string, error) {
	t.Helper()
	listed := map[SourceRef]Source{}
	for _, s := range sources {
		listed[s.SourceRef] = s
	}
	state := Vocabulary{}.Read(PodWorkload(pod))
	r, err := RestartOf(Input{Key: testKey, Namespace: pod.Namespace, State: state, Mode: ModeOptedIn}, listedSources(listed))
	return r.Token, err
}

// TestARestartTokenMovesWithTheDataThatCounts: the token of a pod restarted in place
// changes when, and only when, the data of a source that counts for it changes; it is
// the hash its pod template would carry.
func TestARestartTokenMovesWithTheDataThatCounts(t *testing.T) {
	pod := inPlacePod(map[string]string{AnnotationExcludeConfigMaps: "noise"}, "app", "noise")
	v1, err := tokenOf(t, pod, cmSource("app", "1"), cmSource("noise", "1"))
	if err != nil || v1 == "" {
		t.Fatalf("token: %q, %v", v1, err)
	}
	if again, _ := tokenOf(t, pod, cmSource("app", "1"), cmSource("noise", "2")); again != v1 {
		t.Errorf("an excluded source's change moved the token: %q, want %q", again, v1)
	}
	v2, _ := tokenOf(t, pod, cmSource("app", "2"), cmSource("noise", "1"))
	if v2 == v1 {
		t.Errorf("the data of app changed and the token did not: %q", v2)
	}
	if want := created(envFrom("app", "noise"), map[SourceRef]Source{{ConfigMap, "app"}: cmSource("app", "2"), {ConfigMap, "noise"}: cmSource("noise", "1")}); want.Hash == v2 {
		t.Errorf("the token counts the excluded source: %q is the hash of both", v2)
	}

	// The ServiceAccount's volume, which the API server adds, does not count.
	withToken := inPlacePod(map[string]string{AnnotationExcludeConfigMaps: "noise"}, "app", "noise")
	withToken.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access-x1y2z", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}},
	}}}}}
	if token, _ := tokenOf(t, withToken, cmSource("app", "2"), cmSource("noise", "1"), cmSource("kube-root-ca.crt", "ca")); token != v2 {
		t.Errorf("with the ServiceAccount's volume: %q, want %q", token, v2)
	}

	for name, pod := range map[string]*corev1.Pod{
		"rollout":   inPlacePod(map[string]string{AnnotationRestart: "rollout"}, "app"),
		"opted out": inPlacePod(map[string]string{AnnotationInject: "false"}, "app"),
		"pinned":    inPlacePod(map[string]string{AnnotationPinned: Pins{{SourceRef: SourceRef{ConfigMap, "app"}, Digest: Digest{1}}}.String()}, "app"),
	} {
		if token, err := tokenOf(t, pod, cmSource("app", "1")); !errors.Is(err, ErrNotInPlace) {
			t.Errorf("%s: token %q, error %v; want ErrNotInPlace", name, token, err)
		}
	}
}

// TestAnInPlaceWorkloadsTemplateRollsForNothing: a workload whose pod template asks for
// restart in place is opted in by it, and its template is left as it is for a change
// of its data; pinned, or where pods cannot be restarted in place, it rolls as before.
func TestAnInPlaceWorkloadsTemplateRollsForNothing(t *testing.T) {
	tmpl := envFrom("app")
	tmpl.Annotations = map[string]string{AnnotationRestart: "in-place"}
	w := newWorld(t, map[string]string{}, tmpl, cmSource("app", "1"))
	w.inPlace = true
	if d := w.admit(Pods{Fresh: true}); d.Acts || !d.InPlace || d.Hash != "" {
		t.Fatalf("decision: acts %v, in place %v, hash %q; want in place, no hash", d.Acts, d.InPlace, d.Hash)
	}
	w.sources[SourceRef{ConfigMap, "app"}] = cmSource("app", "2")
	w.settle()
	if w.rollouts != 0 {
		t.Errorf("%d rollouts, want none", w.rollouts)
	}

	w.inPlace = false
	if d := w.admit(Pods{Fresh: true}); !d.Acts || d.InPlace || d.Hash == "" {
		t.Errorf("not in place here: acts %v, in place %v, hash %q; want it hashed", d.Acts, d.InPlace, d.Hash)
	}
	w.inPlace = true
	w.annotations[AnnotationPin] = "true"
	if d := w.admit(Pods{Fresh: true}); !d.Acts || d.InPlace || d.Hash == "" {
		t.Errorf("pinned: acts %v, in place %v, hash %q; want it hashed", d.Acts, d.InPlace, d.Hash)
	}
}

func TestParseRestartMode(t *testing.T) {
	for text, want := range map[string]RestartMode{"": RestartRollout, "rollout": RestartRollout, " in-place ": RestartInPlace} {
		if got, err := ParseRestartMode(text); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", text, got, err, want)
		}
	}
	_, problems := Vocabulary{}.ParsePolicy(nil, map[string]string{AnnotationRestart: "inplace"})
	if len(problems) != 1 || problems[0].Reason != "want in-place or rollout" {
		t.Errorf("problems: %v", problems)
	}
	// On a workload's metadata its pods would not carry it: ignored, and told.
	p, problems := Vocabulary{}.ParsePolicy(map[string]string{AnnotationRestart: "in-place"}, nil)
	if p.Restart != RestartRollout || len(problems) != 1 || !strings.Contains(problems[0].Reason, "put it there") {
		t.Errorf("on the metadata: %v, problems %v", p.Restart, problems)
	}
}

// TestExplainSaysAWorkloadIsRestartedInPlace: explain tells a workload restarted in
// place by what opts it in, and that its pods, not it, are restarted for a change.
func TestExplainSaysAWorkloadIsRestartedInPlace(t *testing.T) {
	tmpl := envFrom("app")
	tmpl.Annotations = map[string]string{AnnotationRestart: "in-place"}
	w := &Workload{Kind: StatefulSet, Namespace: "shop", Name: "db", Annotations: map[string]string{}, Template: tmpl}
	sources := map[SourceRef]Source{{ConfigMap, "app"}: cmSource("app", "2")}
	e := Explain(ExplainInput{Workload: w, Mode: ModeOptedIn, Sources: sources, Key: testKey, HaveKey: true})
	if e.Verdict != VerdictInPlace || !e.OptedIn || !strings.Contains(e.OptIn, AnnotationRestart+"=in-place (pod template)") || !strings.Contains(e.Why, "restarted where it runs") {
		t.Errorf("explained: %s, opted in %v (%s): %s", e.Verdict, e.OptedIn, e.OptIn, e.Why)
	}
}
