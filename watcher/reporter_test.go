package watcher

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// TestBadSettingsAreToldOncePerSetOfProblems: the owner hears of each new set of
// problems once, not at every decision that reads them; fixed and broken again, again.
func TestBadSettingsAreToldOncePerSetOfProblems(t *testing.T) {
	events := record.NewFakeRecorder(10)
	r := newReporter(events, nil, nil, zerolog.Nop())
	ns := namespaceRef("shop")
	for _, problems := range []string{"", `wave size "five"`, `wave size "five"`, `wave size "five"; pin "yes"`, "", "", `wave size "five"`} {
		r.badSetting(ns, problems)
	}
	close(events.Events)
	var got []string
	for e := range events.Events {
		got = append(got, e)
	}
	want := []string{
		`Warning BadSetting ignored, the rest stands: wave size "five"`,
		`Warning BadSetting ignored, the rest stands: wave size "five"; pin "yes"`,
		`Warning BadSetting ignored, the rest stands: wave size "five"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := r.said.subjects.Load(); n != 1 {
		t.Errorf("%d objects remembered, want 1", n)
	}
}

// TestEachEventIsALogLine: every act the watcher tells in an Event is in its log at
// info, a warning at warn, with the object.
func TestEachEventIsALogLine(t *testing.T) {
	var out bytes.Buffer
	l := newReporter(record.NewFakeRecorder(3), nil, nil, zerolog.New(&out))
	ref := &corev1.ObjectReference{Kind: "Deployment", Namespace: "shop", Name: "web"}
	l.Event(ref, corev1.EventTypeNormal, "ConfigChanged", "rolling: ConfigMap/app changed (touched for ConfigMap/app@12)")
	l.Event(ref, corev1.EventTypeWarning, "Healed", "the watcher wrote it")
	l.Eventf(ref, corev1.EventTypeNormal, "RestartedInPlace", "its containers restart in place (restart token %s)", "v1:ab")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "restart token v1:ab") ||
		!strings.Contains(lines[0], `"level":"info"`) || !strings.Contains(lines[0], `"name":"web"`) || !strings.Contains(lines[0], "ConfigMap/app@12") ||
		!strings.Contains(lines[1], `"level":"warn"`) || !strings.Contains(lines[1], `"reason":"Healed"`) {
		t.Fatalf("log:\n%s", out.String())
	}
}
