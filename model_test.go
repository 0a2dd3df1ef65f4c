package confighash

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// The model: one workload and four ConfigMaps, and what its running pods hold. The
// pod template uses a (required), b (optional) and, while useC, c (one key,
// required); d is used by nothing and counts only when the workload names it.
// Random events change data, delete and recreate sources, change what counts in
// both vocabularies, change the pod template, or admit the workload for nothing;
// after each, the webhook and the watcher converge as they do in a cluster. The
// hash must change exactly when the model says a rollout is due: when a source that
// counts exists with data other than what the running pods hold (rule 1).
// The pod template changes only while confighash acts on the workload; what the pods
// hold of a source the workload did not use or name when they started is unknown.
// The workload may also be found as the previous release wrote it, its digests in
// FormShared: that rolls nothing, and it keeps that form until a rollout is due.

var modelNames = [4]string{"a", "b", "c", "d"}

const (
	absentValue  = -1 // the pods started without the source
	pendingValue = -2 // the pods wait for a required source, and read it when it appears
	unknownValue = -3 // the workload neither used nor named the source when its pods started
)

type modelSource struct {
	exists                 bool
	value                  int
	ignore, match          bool
	reloaderIgnore, reload bool // Reloader's ignore and match
}

type modelWorkload struct {
	opt         int // 0 none, 1 inject, 2 Reloader's auto, 3 Reloader's ConfigMap auto, 4 inject "false"
	search      int // 0 none, 1 confighash's, 2 Reloader's
	exclude     [4]bool
	reloaderEx  bool // exclusions in Reloader's annotation rather than confighash's
	includeD    bool
	only        string
	useC        bool
	image       int
	everyInMode bool // the namespace opts every workload in
}

type model struct {
	t        testing.TB
	sources  [4]modelSource
	workload modelWorkload
	held     [4]int // what the running pods hold of each source
	state    State  // what confighash wrote on the workload
	events   int
	history  []string
}

func (m *model) annotations() map[string]string {
	a := map[string]string{}
	switch m.workload.opt {
	case 1:
		a[AnnotationInject] = "true"
	case 2:
		a[ReloaderAuto] = "true"
	case 3:
		a[ReloaderConfigMapAuto] = "true"
	case 4:
		a[AnnotationInject] = "false"
	}
	switch m.workload.search {
	case 1:
		a[AnnotationSearch] = "true"
	case 2:
		a[ReloaderSearch] = "true"
	}
	var excluded []string
	for i, ex := range m.workload.exclude {
		if ex {
			excluded = append(excluded, modelNames[i])
		}
	}
	if len(excluded) > 0 {
		name := AnnotationExcludeConfigMaps
		if m.workload.reloaderEx {
			name = ReloaderConfigMapExclude
		}
		a[name] = strings.Join(excluded, ",")
	}
	if m.workload.includeD {
		a[AnnotationIncludeConfigMaps] = "d"
	}
	if m.workload.only != "" {
		a[AnnotationOnly] = m.workload.only
	}
	return a
}

func (m *model) template() *corev1.PodTemplateSpec {
	ref := func(n string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: n} }
	ctr := corev1.Container{Name: "app", Image: "app:" + strconv.Itoa(m.workload.image), EnvFrom: []corev1.EnvFromSource{
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref("a")}},
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref("b"), Optional: ptr.To(true)}},
	}}
	if m.workload.useC {
		ctr.Env = []corev1.EnvVar{{Name: "K", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref("c"), Key: "k"}}}}
	}
	return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{ctr}}}
}

func (m *model) mode() Mode {
	if m.workload.everyInMode {
		return ModeEvery
	}
	return ModeOptedIn
}

// counts says, apart from the code under test, whether a source counts now.
func (m *model) counts(i int) bool {
	w, s := m.workload, m.sources[i]
	optOut := w.opt == 4
	decided := w.opt == 1 || w.opt == 4 || w.opt == 2 || w.search != 0
	discoverCM := w.opt == 1 || w.opt == 2 || w.opt == 3 || w.search == 2 || w.includeD || m.workload.everyInMode && !decided && w.opt != 3
	discoverSecret := w.opt == 1 || w.opt == 2 || w.search == 2 || w.includeD || m.workload.everyInMode && !decided
	discoverCM = discoverCM && w.only != "secrets"
	discoverSecret = discoverSecret && w.only != "configmaps"
	if optOut || !(discoverCM || discoverSecret || w.includeD) || w.exclude[i] {
		return false
	}
	named := i == 3
	switch {
	case i == 3 && !w.includeD, i == 2 && !w.useC, i < 3 && !discoverCM:
		return false
	case !s.exists:
		return true
	}
	match := s.match || s.reload
	// Reloader's auto wins over Reloader's search, as in Reloader.
	searching := w.search == 1 || w.search == 2 && w.opt != 2
	return !s.ignore && !s.reloaderIgnore && (!searching || match || named)
}

// required says whether the pod template requires the source: the pods cannot start
// without it.
func (m *model) required(i int) bool { return i == 0 || i == 2 && m.workload.useC }

// due says whether a rollout is due: a source that counts exists with data the
// running pods do not hold.
func (m *model) due() bool {
	for i, s := range m.sources {
		if m.counts(i) && s.exists && m.held[i] != pendingValue && m.held[i] != s.value {
			return true
		}
	}
	return false
}

// used says whether the workload uses or names the source.
func (m *model) used(i int) bool {
	return i < 2 || i == 2 && m.workload.useC || i == 3 && m.workload.includeD
}

// roll starts new pods: each reads the data the workload uses or names, waiting for a
// required source that is missing.
func (m *model) roll() {
	for i, s := range m.sources {
		switch {
		case !m.used(i):
			m.held[i] = unknownValue
		case s.exists:
			m.held[i] = s.value
		case m.required(i):
			m.held[i] = pendingValue
		default:
			m.held[i] = absentValue
		}
	}
}

func (m *model) sourceViews() listedSources {
	views := listedSources{}
	for i, s := range m.sources {
		if !s.exists {
			continue
		}
		v := SourceOfConfigMap(configMap(modelNames[i], map[string]string{"k": strconv.Itoa(s.value)}, nil))
		v.Ignore, v.Match, v.ReloaderIgnore, v.ReloaderMatch = s.ignore, s.match, s.reloaderIgnore, s.reload
		views[v.SourceRef] = v
	}
	return views
}

// decide decides as the webhook or the watcher does, on the workload as written.
func (m *model) decide(pods Pods) Decision {
	m.t.Helper()
	state := Vocabulary{Reloader: true}.Read(&Workload{Annotations: m.annotations(), Template: m.template()})
	state.Record, state.Form, state.Hash, state.Adopted = m.state.Record, m.state.Form, m.state.Hash, m.state.Adopted
	d, err := Decide(Input{Key: testKey, State: state, Mode: m.mode(), Pods: pods}, m.sourceViews())
	if err != nil {
		m.t.Fatal(err)
	}
	return d
}

// admit is the webhook's admission: it writes the decision, and reports whether the
// hash on the pod template changed.
func (m *model) admit(fresh bool) bool {
	d := m.decide(Pods{Fresh: fresh})
	if !d.Acts || d.Record == nil {
		return false
	}
	changed := d.Hash != m.state.Hash
	if form := m.state.Form; m.state.Record != nil && !changed && !fresh && d.Form != form {
		m.t.Fatalf("an admission that rolls nothing rewrote the record from form %d to %d: %s", form, d.Form, d.Record)
	}
	if changed && d.Form != FormNamespaced {
		m.t.Fatalf("a rollout wrote the record in form %d: %s", d.Form, d.Record)
	}
	m.state.Record, m.state.Form, m.state.Hash, m.state.Adopted = d.Record, d.Form, d.Hash, d.Adopted
	return changed
}

// writtenBefore rewrites what confighash wrote on the workload as the previous
// release wrote it: the same record with its digests in FormShared, and its hash.
func (m *model) writtenBefore() {
	if m.state.Record == nil || m.state.Form == FormShared {
		return
	}
	shared := map[Digest]Digest{}
	for _, name := range modelNames {
		for v := range 3 {
			src := SourceOfConfigMap(configMap(name, map[string]string{"k": strconv.Itoa(v)}, nil))
			ref := Reference{SourceRef: src.SourceRef, AllKeys: true}
			shared[NamespacedDigest(testKey, "", ref, src)] = SourceDigest(testKey, ref, src)
		}
	}
	before := slices.Clone(m.state.Record)
	for i, e := range before {
		if e.Seen {
			before[i].Digest = shared[e.Digest]
		}
	}
	hashes := map[string]string{"": "", m.state.Record.Hash(testKey): before.Hash(testKey)}
	hash, hashed := hashes[m.state.Hash]
	adopted, wasAdopted := hashes[m.state.Adopted]
	if !hashed || !wasAdopted {
		return // not as confighash wrote it: the workload no longer opts in
	}
	m.state.Record, m.state.Form, m.state.Hash, m.state.Adopted = before, FormShared, hash, adopted
}

// converge is the watcher: until the workload has converged, it records the sources
// that started to count, with what the pods hold, or touches the workload for the
// webhook. It returns how many times the hash changed.
func (m *model) converge() int {
	m.t.Helper()
	changes := 0
	for range 4 {
		d := m.decide(Pods{})
		if !d.Acts || d.Converged {
			return changes
		}
		if len(d.Unproven) > 0 {
			held := map[SourceRef]bool{}
			for _, o := range d.Observations {
				i := strings.Index("abcd", o.Name)
				held[o.SourceRef] = m.held[i] == pendingValue || o.Present && m.held[i] == m.sources[i].value
			}
			if d = m.decide(Pods{Proven: held}); d.Record == nil {
				m.t.Fatalf("with every source's pods known, nothing to record: unproven %v", d.Unproven)
			}
			m.state.Record, m.state.Form, m.state.Adopted = d.Record, d.Form, d.Adopted
		}
		if m.admit(false) {
			changes++
			m.roll()
		}
	}
	m.t.Fatalf("the workload did not converge: record %s, hash %q", m.state.Record, m.state.Hash)
	return 0
}

// event applies one random event and checks the outcome.
func (m *model) event(rng *rand.Rand) {
	m.t.Helper()
	m.events++
	i := rng.IntN(4)
	s := &m.sources[i]
	workloadChanged, templateChanged := false, false
	var what string
	switch rng.IntN(13) {
	case 0, 1:
		s.exists, s.value = true, rng.IntN(3)
		what = fmt.Sprintf("%s set to %d", modelNames[i], s.value)
	case 2:
		s.exists = false
		what = "deleted " + modelNames[i]
	case 3:
		switch rng.IntN(4) {
		case 0:
			s.ignore = !s.ignore
		case 1:
			s.match = !s.match
		case 2:
			s.reloaderIgnore = !s.reloaderIgnore
		case 3:
			s.reload = !s.reload
		}
		what = fmt.Sprintf("%s annotated %+v", modelNames[i], *s)
	case 4:
		m.workload.opt = rng.IntN(5)
		workloadChanged, what = true, fmt.Sprintf("opt-in %d", m.workload.opt)
	case 5:
		m.workload.search = rng.IntN(3)
		workloadChanged, what = true, fmt.Sprintf("search %d", m.workload.search)
	case 6:
		m.workload.exclude[i] = !m.workload.exclude[i]
		m.workload.reloaderEx = rng.IntN(2) == 0
		workloadChanged, what = true, fmt.Sprintf("exclude %v", m.workload.exclude)
	case 7:
		m.workload.includeD = !m.workload.includeD
		workloadChanged, what = true, fmt.Sprintf("include d %v", m.workload.includeD)
	case 8:
		m.workload.only = []string{"", "configmaps", "secrets"}[rng.IntN(3)]
		workloadChanged, what = true, "only "+m.workload.only
	case 9:
		m.workload.everyInMode = !m.workload.everyInMode
		what = fmt.Sprintf("namespace every %v", m.workload.everyInMode)
	case 10:
		if !m.decide(Pods{}).Acts {
			// The pods restart unseen: a source that changed meanwhile and counts
			// again later is not known to be held (docs/annotations.md).
			return
		}
		if rng.IntN(2) == 0 {
			m.workload.useC = !m.workload.useC
		}
		m.workload.image++
		workloadChanged, templateChanged, what = true, true, fmt.Sprintf("pod template changed, uses c %v", m.workload.useC)
	case 11:
		workloadChanged, what = true, "an unrelated admission"
	case 12:
		m.writtenBefore()
		what = "written by the previous release"
	}
	if s.exists && m.held[i] == pendingValue {
		m.held[i] = s.value // the waiting pods start
	}
	m.history = append(m.history, fmt.Sprintf("%s | record %s hash %.10q adopted %.10q pods %v", what, m.state.Record, m.state.Hash, m.state.Adopted, m.held))
	due := m.due()
	changes := 0
	switch {
	case templateChanged:
		m.admit(true)
		m.roll() // a changed pod template rolls the workload by itself
	case workloadChanged && m.admit(false):
		changes++
		m.roll()
	}
	changes += m.converge()
	if want := map[bool]int{true: 1, false: 0}[due && !templateChanged]; changes != want {
		m.t.Fatalf("event %d (%s): the hash changed %d times, want %d; record %s\n%s", m.events, what, changes, want, m.state.Record, strings.Join(m.history, "\n"))
	}
	if m.due() {
		m.t.Fatalf("event %d (%s): converged with a rollout still due; record %s, pods hold %v\n%s", m.events, what, m.state.Record, m.held, strings.Join(m.history, "\n"))
	}
}

// runModel creates the workload and applies events from rng.
func runModel(t testing.TB, rng *rand.Rand, events int) int {
	m := &model{t: t, workload: modelWorkload{opt: 1 + rng.IntN(3)}}
	for i := range m.sources {
		m.sources[i] = modelSource{exists: rng.IntN(4) > 0, value: rng.IntN(3)}
	}
	m.admit(true)
	m.roll()
	if rng.IntN(2) == 0 {
		m.writtenBefore()
	}
	for range events {
		m.event(rng)
	}
	return m.events
}

// TestModel runs random event sequences against the model.
func TestModel(t *testing.T) {
	total := 0
	for seed := range uint64(3000) {
		total += runModel(t, rand.New(rand.NewPCG(seed, 7)), 40)
	}
	t.Logf("%d events in 3000 sequences: the hash changed exactly when a rollout was due", total)
}

// FuzzModel drives the model from the fuzzer's bytes.
func FuzzModel(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		runModel(t, rand.New(rand.NewPCG(a, b)), 60)
	})
}
