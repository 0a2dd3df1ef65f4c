package watcher

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/confighash/confighash"
)

// TestAPauseKeptAsReloaderPausesWithTheChangeAndResumesAsItsMarkSays: with
// PauseDeployments, the touch that rolls a Deployment with a pause period pauses it,
// marked with the time; one its owner paused is touched and left paused, unmarked; a
// pause whose period ended, or whose mark cannot be read, is resumed and unmarked, with
// a Resumed Event, and one under way is left.
func TestAPauseKeptAsReloaderPausesWithTheChangeAndResumesAsItsMarkSays(t *testing.T) {
	period := map[string]string{confighash.AnnotationPausePeriod: "1h"}
	paused := func(name, mark string) *appsv1.Deployment {
		d := harnessDeployment(name, period, "cfg")
		d.Spec.Paused = true
		if mark != "" {
			d.Annotations[confighash.ReloaderPausedAt] = mark
		}
		return d
	}
	now := time.Now().UTC()
	h := newHarness(t, Config{PauseDeployments: true}, harnessConfigMap("cfg", nil),
		harnessDeployment("web", period, "cfg"), paused("owners", ""),
		paused("ended", now.Add(-2*time.Hour).Format(time.RFC3339)), paused("unreadable", "soon"),
		paused("going", now.Add(-time.Minute).Format(time.RFC3339)))
	key := func(name string) workloadKey { return harnessKey(confighash.Deployment, name) }
	pausedNow := func(name string) (bool, string) {
		u := h.workload(key(name))
		p, _, _ := unstructured.NestedBool(u.Object, "spec", "paused")
		return p, u.GetAnnotations()[confighash.ReloaderPausedAt]
	}

	for _, name := range []string{"ended", "unreadable", "going"} {
		h.sync(key(name))
	}
	for name, want := range map[string]bool{"ended": false, "unreadable": false, "going": true} {
		if p, mark := pausedNow(name); p != want || (mark != "") != want {
			t.Errorf("%s: paused %v, mark %q; want paused and marked %v", name, p, mark, want)
		}
		if n := h.events.count(key(name), "Resumed"); n != map[bool]int{false: 1, true: 0}[want] {
			t.Errorf("%s: %d Resumed Events", name, n)
		}
	}

	h.change(confighash.ConfigMap, "cfg")
	for _, name := range []string{"web", "owners"} {
		before := h.hash(key(name))
		h.sync(key(name))
		if h.hash(key(name)) == before {
			t.Fatalf("%s: the change was not written into its pod template", name)
		}
	}
	if p, mark := pausedNow("web"); !p {
		t.Fatal("web was not paused by the touch that rolled it")
	} else if at, err := time.Parse(time.RFC3339, mark); err != nil || at.Before(now.Add(-time.Second)) {
		t.Fatalf("web's mark %q: want the time of its touch", mark)
	}
	if p, mark := pausedNow("owners"); !p || mark != "" {
		t.Fatalf("owners: paused %v, mark %q; want its owner's pause left as it was", p, mark)
	}
	if s := h.status(key("web")); s.Act != confighash.ActRolled || !s.Until.IsZero() {
		t.Fatalf("web's status %+v: want rolled, with no hold of the watcher's own", s)
	}
}
