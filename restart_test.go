package confighash

import (
	"errors"
	"slices"
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
	if d := w.admit(Pods{Fresh: true}); !d.Acts || d.InPlace || d.Hash == "" || !strings.Contains(d.RollsInstead, "restarts no pod in place") {
		t.Errorf("not in place here: acts %v, in place %v, hash %q, rolls instead %q; want it hashed, and why", d.Acts, d.InPlace, d.Hash, d.RollsInstead)
	}
	w.inPlace = true
	w.annotations[AnnotationPin] = "true"
	if d := w.admit(Pods{Fresh: true}); !d.Acts || d.InPlace || d.Hash == "" || !strings.Contains(d.RollsInstead, "pinned") {
		t.Errorf("pinned: acts %v, in place %v, hash %q, rolls instead %q; want it hashed, and why", d.Acts, d.InPlace, d.Hash, d.RollsInstead)
	}
}

func TestParseRestartMode(t *testing.T) {
	for text, want := range map[string]struct {
		mode   RestartMode
		reload Reload
	}{
		"": {RestartRollout, Reload{}}, "rollout": {RestartRollout, Reload{}}, " in-place ": {RestartInPlace, Reload{}},
		"signal:SIGHUP": {RestartReload, Reload{Signal: "SIGHUP"}}, "signal:usr1": {RestartReload, Reload{Signal: "SIGUSR1"}},
		"http:8080/-/reload": {RestartReload, Reload{Port: 8080, Path: "/-/reload"}}, "http:9090": {RestartReload, Reload{Port: 9090, Path: "/"}},
	} {
		mode, reload, err := ParseRestartMode(text)
		if err != nil || mode != want.mode || reload != want.reload {
			t.Errorf("%q: %v %+v, %v; want %v %+v", text, mode, reload, err, want.mode, want.reload)
		}
		if mode == RestartReload && reload.String() != strings.TrimSpace(strings.Replace(text, "usr1", "SIGUSR1", 1)) && text != "http:9090" {
			t.Errorf("%q spelt back as %q", text, reload.String())
		}
	}
	for _, bad := range []string{"inplace", "signal:SIGKILL", "signal:TERM", "http:0/x", "http:80/a b", "http:80/../x", "http:http/x", "http:80/" + strings.Repeat("a", 300)} {
		if _, _, err := ParseRestartMode(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	_, problems := Vocabulary{}.ParsePolicy(nil, map[string]string{AnnotationRestart: "inplace"})
	if len(problems) != 1 || !strings.HasPrefix(problems[0].Reason, "want in-place, rollout, signal:SIGHUP or http:8080/-/reload") {
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
	// Where the watcher said the install restarts no pod in place, it rolls, and why.
	e = Explain(ExplainInput{Workload: w, Mode: ModeOptedIn, Sources: sources, Key: testKey, HaveKey: true, InPlaceOff: true})
	if e.Verdict == VerdictInPlace || !slices.ContainsFunc(e.Problems, func(p string) bool { return strings.Contains(p, "it rolls instead") }) {
		t.Errorf("with in place off: %s (%s), problems %v", e.Verdict, e.Why, e.Problems)
	}
}

// TestAReloadReachesOnlyWhatIsMountedWhole: a pod reloads when every source that
// counts reaches it through a volume mounted whole; a source through env or a subPath
// mount, which no reload updates, makes it restart in place instead, and says why.
func TestAReloadReachesOnlyWhatIsMountedWhole(t *testing.T) {
	counts := func(ref SourceRef) bool { return ref.Name != "ignored" }
	vol := func(name, cm string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}
	}
	files := corev1.PodSpec{
		Containers: []corev1.Container{{Name: "nginx", VolumeMounts: []corev1.VolumeMount{{Name: "conf", MountPath: "/etc/nginx"}, {Name: "other", MountPath: "/x", SubPath: "a"}}}},
		Volumes:    []corev1.Volume{vol("conf", "nginx"), vol("other", "ignored"), {Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
	}
	if volumes, why := ReloadVolumes(&files, counts); why != "" || !slices.Equal(volumes, []string{"conf"}) {
		t.Errorf("files: %v, %q; want [conf]", volumes, why)
	}
	env := *files.DeepCopy()
	env.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "nginx"}}}}
	if _, why := ReloadVolumes(&env, counts); !strings.Contains(why, "ConfigMap/nginx reaches container nginx through envFrom") {
		t.Errorf("env: %q", why)
	}
	sub := *files.DeepCopy()
	sub.Containers[0].VolumeMounts[0].SubPath = "nginx.conf"
	if _, why := ReloadVolumes(&sub, counts); !strings.Contains(why, "volume conf reaches container nginx through a subPath") {
		t.Errorf("subPath: %q", why)
	}
}

// TestARestartGoesInTheWavesOfTheSourcesThatCountForIt: the wave size of a pod
// restarted in place is the smallest of its sources' that count.
func TestARestartGoesInTheWavesOfTheSourcesThatCountForIt(t *testing.T) {
	app, db := cmSource("app", "1"), cmSource("db", "1")
	pod := inPlacePod(nil, "app", "db")
	state := Vocabulary{}.Read(PodWorkload(pod))
	for _, tt := range []struct{ app, db, want int }{{0, 0, 0}, {0, 3, 3}, {2, 3, 2}} {
		app.WaveSize, db.WaveSize = tt.app, tt.db
		r, err := RestartOf(Input{Key: testKey, Namespace: pod.Namespace, State: state, Mode: ModeOptedIn}, listedSources(map[SourceRef]Source{app.SourceRef: app, db.SourceRef: db}))
		if err != nil || r.WaveSize != tt.want {
			t.Errorf("sources in waves of %d and %d: %d, %v; want %d", tt.app, tt.db, r.WaveSize, err, tt.want)
		}
	}
}

// BenchmarkRestartOf: the token of one pod restarted in place, which the watcher
// decides for each pod of a group at each look at it.
func BenchmarkRestartOf(b *testing.B) {
	app, db := cmSource("app", "1"), cmSource("db", "1")
	pod := inPlacePod(nil, "app", "db")
	state := Vocabulary{}.Read(PodWorkload(pod))
	sources := listedSources(map[SourceRef]Source{app.SourceRef: app, db.SourceRef: db})
	for b.Loop() {
		if _, err := RestartOf(Input{Key: testKey, Namespace: pod.Namespace, State: state, Mode: ModeOptedIn}, sources); err != nil {
			b.Fatal(err)
		}
	}
}
