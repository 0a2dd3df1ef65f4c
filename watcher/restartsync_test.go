package watcher

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/watches"
)

// restartablePod is a Ready pod of the controller, labelled for restart in place and
// carrying the token.
func restartablePod(name string, controller types.UID, token string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(name),
			Labels:          map[string]string{confighash.LabelRestart: confighash.RestartInPlace.String()},
			Annotations:     map[string]string{confighash.AnnotationRestartToken: token},
			OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: string(controller), UID: controller, Controller: ptr.To(true)}}},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// started runs the restarts newRestarts made, once their pods are listed.
func started(t *testing.T) func(*restarts, error) *restarts {
	return func(r *restarts, err error) *restarts {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		r.run(t.Context())
		for !r.synced() {
			time.Sleep(10 * time.Millisecond)
		}
		return r
	}
}

// TestAControllerHeldTakesNoPlaceInItsWave: in a namespace restarted in waves of one
// controller, one whose restart its rollout window holds, or its rollout lets no pod
// down, takes no place in the wave: the next controller is restarted. The first, once
// its window opens, waits for the wave the second holds.
func TestAControllerHeldTakesNoPlaceInItsWave(t *testing.T) {
	closed, err := confighash.ParseWindows("daily 00:00-00:01 UTC")
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(restartablePod("db-0", "db", "v1:old"), restartablePod("cache-0", "cache", "v1:old"), restartablePod("web-0", "web", "v1:old"))
	windowOpen := false
	rules := podRules{
		restartOf: func(p *podView) (confighash.Restart, error) {
			want := confighash.Restart{Token: "v1:new", WaveSize: 1}
			if p.Group == "db" && !windowOpen {
				want.Windows = closed
			}
			return want, nil
		},
		covered: func(string) bool { return true },
		rollout: func(p *podView) podRollout {
			if p.Group == "cache" {
				return podRollout{maxUnavailable: 0} // maxUnavailable: 0
			}
			return podRollout{maxUnavailable: 1}
		},
	}
	r := started(t)(newRestarts(client, watches.Door{Namespaces: []string{"shop"}, Gate: modes{}}, confighash.Vocabulary{}, rules, 0, time.Minute, 0, newReporter(record.NewFakeRecorder(100), nil, nil, zerolog.Nop()), NoopRecorder{}, zerolog.Nop()))
	restarted := func() []string {
		var names []string
		for _, a := range client.Actions() {
			if p, ok := a.(k8stesting.PatchAction); ok && strings.Contains(string(p.GetPatch()), "v1:new") {
				names = append(names, p.GetName())
			}
		}
		return names
	}
	for _, g := range []podGroup{{"shop", "db"}, {"shop", "cache"}, {"shop", "web"}} {
		if _, err := r.sync(t.Context(), g); err != nil {
			t.Fatal(err)
		}
	}
	if got := restarted(); !slices.Equal(got, []string{"web-0"}) {
		t.Fatalf("restarted %v, want web-0 alone: db's window is closed, cache's rollout lets none down, and neither holds the wave", got)
	}
	windowOpen = true
	if _, err := r.sync(t.Context(), podGroup{"shop", "db"}); err != nil {
		t.Fatal(err)
	}
	if got := restarted(); !slices.Equal(got, []string{"web-0"}) {
		t.Fatalf("restarted %v once db's window opened, want db-0 to wait for the wave web holds", got)
	}
	if under, waiting := r.slots.counts(); under != 1 || waiting != 1 {
		t.Fatalf("%d controllers under way and %d waiting, want 1 and 1", under, waiting)
	}
}

// TestAPodDownLongAfterItsRestartHoldsNoWave: a pod the watcher restarted is not back
// while its restart is pending, or while it has not been Ready since; one that came
// back and went down later, as on a dead node, is down for another cause.
func TestAPodDownLongAfterItsRestartHoldsNoWave(t *testing.T) {
	written := time.Now().Add(-time.Hour)
	r := &restarts{timeout: 5 * time.Minute, reloads: reloadWaits{}}
	for _, tt := range []struct {
		name string
		pod  podView
		want bool
	}{
		{"its restart pending", podView{RestartsAt: 2, Restarts: 2, TokenWritten: written, ReadyChanged: written.Add(-time.Hour)}, true},
		{"restarted, never Ready since", podView{RestartsAt: 2, Restarts: 3, TokenWritten: written, ReadyChanged: written.Add(time.Second)}, true},
		{"restarted, Ready, down a day later", podView{RestartsAt: 2, Restarts: 3, TokenWritten: written, ReadyChanged: written.Add(24 * time.Hour)}, false},
		{"never restarted by a watcher", podView{RestartsAt: -1, ReadyChanged: written}, false},
	} {
		if got := r.notBack(&tt.pod, r.reloads.pending(&tt.pod, time.Now())); got != tt.want {
			t.Errorf("%s: not back %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestForgedPodFieldsHoldNoSlot (issue 52): whether the watcher restarted a pod, and
// when, was read from fields the pod's tenant writes. A token of the current data at
// the pod's restarts so far ("<token> 0") on a pod that is not Ready, with no
// managedFields entry of the watcher's, made its controller look under way forever:
// it never halted and held its --max-rolling slot, and every other namespace waited;
// two such controllers, found by a new leader, took slots past --max-rolling. Now a
// controller found under way takes a slot within the caps, and one that makes no
// progress for the restart timeout halts and gives its slot up.
func TestForgedPodFieldsHoldNoSlot(t *testing.T) {
	forged := func(ns, name string, controller types.UID) *corev1.Pod {
		p := restartablePod(name, controller, "v1:new 0")
		p.Namespace = ns
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", RestartCount: 0}}
		return p
	}
	victim := restartablePod("web-0", "web", "v1:old")
	victim.Namespace = "victim"
	client := fake.NewClientset(forged("tenant", "evil-0", "evil"), forged("tenant", "evil2-0", "evil2"), victim)
	rules := podRules{
		restartOf: func(*podView) (confighash.Restart, error) { return confighash.Restart{Token: "v1:new"}, nil },
		covered:   func(string) bool { return true },
		rollout:   func(*podView) podRollout { return podRollout{maxUnavailable: 1} },
	}
	const timeout = 300 * time.Millisecond
	r := started(t)(newRestarts(client, watches.Door{Gate: modes{}}, confighash.Vocabulary{}, rules, 0, timeout, 1, newReporter(record.NewFakeRecorder(100), nil, nil, zerolog.Nop()), NoopRecorder{}, zerolog.Nop()))
	r.holdUnderWay()
	if under, _ := r.slots.counts(); under != 1 {
		t.Fatalf("a new leader found %d controllers under way and gave them slots; want 1, --max-rolling", under)
	}
	restarted := func() bool {
		return slices.ContainsFunc(client.Actions(), func(a k8stesting.Action) bool {
			p, ok := a.(k8stesting.PatchAction)
			return ok && p.GetName() == "web-0"
		})
	}
	sync := func(g podGroup) {
		if _, err := r.sync(t.Context(), g); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []podGroup{{"tenant", "evil"}, {"tenant", "evil2"}, {"victim", "web"}} {
		sync(g)
	}
	if restarted() {
		t.Fatal("the victim's pod was restarted while the forged controller held the one slot")
	}
	time.Sleep(timeout + 50*time.Millisecond)
	for _, g := range []podGroup{{"tenant", "evil"}, {"tenant", "evil2"}, {"victim", "web"}} {
		sync(g)
	}
	if !restarted() {
		t.Fatalf("once the forged controller made no progress for %v, the victim's pod is still not restarted", timeout)
	}
}

// TestARestartTheKubeletMissedIsNudgedOnce: now and then the kubelet misses a pod's
// update in its downward API volume until its periodic sync, a minute by default, and
// the restarter never sees its token: on the real node, one pod in about thirty waited
// 13 to 15 s. A pod still Ready with no restart 4 s after its token is nudged, once:
// its restart-nudge annotation becomes the token, which has the kubelet look again and
// restarts nothing twice.
func TestARestartTheKubeletMissedIsNudgedOnce(t *testing.T) {
	written := func(ago time.Duration) []metav1.ManagedFieldsEntry {
		return []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: time.Now().Add(-ago)}}}
	}
	pod := func(name string, ago time.Duration, ready bool, restarts int32, nudge string) *corev1.Pod {
		p := restartablePod(name, types.UID(name), "v1:new 0")
		p.ManagedFields = written(ago)
		if nudge != "" {
			p.Annotations[confighash.AnnotationRestartNudge] = nudge
		}
		if !ready {
			p.Status.Conditions[0].Status = corev1.ConditionFalse
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", RestartCount: restarts}}
		return p
	}
	client := fake.NewClientset(
		pod("missed", 10*time.Second, true, 0, ""),
		pod("just-written", time.Second, true, 0, ""),
		pod("restarting", 10*time.Second, false, 0, ""),
		pod("restarted", 10*time.Second, true, 1, ""),
		pod("nudged", 10*time.Second, true, 0, "v1:new 0"),
		pod("nudged-for-an-older-token", 10*time.Second, true, 0, "v1:old 0"),
	)
	rules := podRules{
		restartOf: func(*podView) (confighash.Restart, error) { return confighash.Restart{Token: "v1:new"}, nil },
		covered:   func(string) bool { return true },
		rollout:   func(*podView) podRollout { return podRollout{maxUnavailable: 1} },
	}
	r := started(t)(newRestarts(client, watches.Door{Namespaces: []string{"shop"}, Gate: modes{}}, confighash.Vocabulary{}, rules, 0, 5*time.Minute, 0, newReporter(record.NewFakeRecorder(100), nil, nil, zerolog.Nop()), NoopRecorder{}, zerolog.Nop()))
	nudged := func() []string {
		var names []string
		for _, a := range client.Actions() {
			if p, ok := a.(k8stesting.PatchAction); ok && strings.Contains(string(p.GetPatch()), confighash.AnnotationRestartNudge) {
				if !strings.Contains(string(p.GetPatch()), `"v1:new 0"`) {
					t.Errorf("%s nudged with %s, want a copy of its token v1:new 0", p.GetName(), p.GetPatch())
				}
				names = append(names, p.GetName())
			}
		}
		slices.Sort(names)
		return names
	}
	var again []time.Duration
	for _, name := range []string{"missed", "just-written", "restarting", "restarted", "nudged", "nudged-for-an-older-token"} {
		after, err := r.sync(t.Context(), podGroup{"shop", types.UID(name)})
		if err != nil {
			t.Fatal(err)
		}
		if name == "just-written" {
			again = append(again, after)
		}
	}
	if got, want := nudged(), []string{"missed", "nudged-for-an-older-token"}; !slices.Equal(got, want) {
		t.Fatalf("nudged %v, want %v: the others are restarting, restarted, nudged for their token, or written a second ago", got, want)
	}
	if after := again[0]; after <= 0 || after > nudgeAfter {
		t.Fatalf("the pod written a second ago is looked at again in %v, want by its nudge, within %v", after, nudgeAfter)
	}
}

// TestANudgeIsDueOnlyForARestartOrAReloadNotBegun: the kubelet's miss holds a reload
// as it holds a restart, and the watcher would take the reload as done once it
// settled. A nudge is due 4 s after the token for a restart or a reload that has not
// begun, and never for one begun, done, nudged already, past the restart timeout, or
// a reload another watcher asked for.
func TestANudgeIsDueOnlyForARestartOrAReloadNotBegun(t *testing.T) {
	now := time.Now()
	r := &restarts{timeout: 5 * time.Minute, reloads: reloadWaits{
		"missed-reload": {token: "v1:new", since: now.Add(-5 * time.Second)},
		"begun-reload":  {token: "v1:new", since: now.Add(-5 * time.Second), sawUnready: true},
		"older-reload":  {token: "v1:old", since: now.Add(-5 * time.Second)},
	}}
	restart := func(ago time.Duration) podView {
		return podView{Token: "v1:new", RestartsAt: 0, Ready: true, TokenWritten: now.Add(-ago)}
	}
	reload := func(uid types.UID) podView {
		return podView{UID: uid, Reloads: true, Token: "v1:new", RestartsAt: 0, Ready: true, TokenWritten: now.Add(-5 * time.Second)}
	}
	for _, tt := range []struct {
		name string
		pod  podView
		want time.Duration
	}{
		{"a restart the kubelet missed", restart(5 * time.Second), 0},
		{"a restart written a second ago", restart(time.Second), 3 * time.Second},
		{"a restart under way", func() podView { p := restart(5 * time.Second); p.Ready = false; return p }(), -1},
		{"a restart done", func() podView { p := restart(5 * time.Second); p.Restarts = 1; return p }(), -1},
		{"a restart nudged for its token", func() podView { p := restart(5 * time.Second); p.Nudged = true; return p }(), -1},
		{"a restart past the restart timeout", restart(10 * time.Minute), -1},
		{"a reload the kubelet missed", reload("missed-reload"), 0},
		{"a reload begun", reload("begun-reload"), -1},
		{"a reload asked for another token", reload("older-reload"), -1},
		{"a reload another watcher asked for", reload("unknown"), -1},
	} {
		if got := r.nudgeDue(&tt.pod, now); got != tt.want {
			t.Errorf("%s: nudge due in %v, want %v", tt.name, got, tt.want)
		}
	}
}
