package watcher

import (
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/watches"
)

// The maps the watcher keeps of a tenant's objects are pruned when the objects go
// (rule 13, issue 52): a tenant's create and delete loop grew every replica without end.

func TestWhatIsKeptOfAWorkloadGoesWithIt(t *testing.T) {
	report := newReporter(record.NewFakeRecorder(10), nil, nil, zerolog.Nop())
	tracking := newTracking(time.Second, time.Second, 0)
	w := &Watcher{decider: &decider{later: newLaterRecords()}, tracking: tracking, report: report,
		pacer: &pacer{waves: newWaves(), metrics: NoopRecorder{}, report: report, unreached: tracking.unreached}, snapshots: &snapshots{owned: map[workloadKey]ownership{}}}
	for i := range 10_000 {
		v := &view{Namespace: "churn", Name: fmt.Sprintf("web-%d", i), Kind: &confighash.Deployment}
		v.RecordErr = fmt.Errorf("record: %w", confighash.ErrLaterForm)
		w.decider.sourceChanged(v, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"})
		w.snapshots.noteOwned(v)
		w.report.said.news(keyOf(v), "warning", "1")
		w.pacer.hold(keyOf(v), confighash.HoldWindow, "v1:1")
		w.forget(keyOf(v)) // its sync, once the informers saw it deleted
	}
	if n := len(w.decider.later.changed); n != 0 {
		t.Errorf("10,000 workloads with a later record made and deleted: %d later records kept", n)
	}
	if n := len(w.snapshots.owned); n != 0 {
		t.Errorf("10,000 pinned workloads made and deleted: %d owners found kept", n)
	}
	if n := len(w.tracking.of); n != 0 {
		t.Errorf("10,000 workloads deleted: %d tracked", n)
	}
	if n := len(report.said.of); n != 0 {
		t.Errorf("10,000 workloads warned of, held and deleted: what was told of %d kept", n)
	}
}

func TestTheFlappingBreakerForgetsSourcesThatStopped(t *testing.T) {
	window := 5 * time.Minute
	b := newFlapBreaker(3, window, time.Second, 2*time.Minute)
	now := time.Unix(0, 0)
	most := 0
	for i := range 100_000 {
		src := sourceIn{"churn", confighash.SourceRef{Kind: confighash.ConfigMap, Name: fmt.Sprintf("cfg-%d", i)}}
		b.changed(src, now) // made, changed once, deleted
		most = max(most, len(b.sources))
		now = now.Add(100 * time.Millisecond)
	}
	// A window's worth of sources, 3,000, and as many again before the next prune.
	if limit := 2 * int(window/(100*time.Millisecond)); most > limit+1 {
		t.Errorf("100,000 sources changed once each, 10 a second: the breaker kept up to %d, want at most %d", most, limit+1)
	}
}

// TestTheFlappingBreakerForgetsADeletedSource: what it counted of a changed source
// goes when the source does, not a window later.
func TestTheFlappingBreakerForgetsADeletedSource(t *testing.T) {
	h := newHarness(t, Config{FlapLimit: DefaultFlapLimit, FlapWindow: DefaultFlapWindow, FlapQuiet: DefaultFlapQuiet},
		harnessConfigMap("cfg", nil), harnessDeployment("web", nil, "cfg"))
	src := sourceIn{harnessNamespace, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}}
	counted := func() bool {
		b := h.w.pacer.flapping
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.sources[src] != nil
	}
	h.change(confighash.ConfigMap, "cfg")
	if !counted() {
		t.Fatal("a change of a used ConfigMap was not counted by the breaker")
	}
	if err := h.client.CoreV1().ConfigMaps(harnessNamespace).Delete(h.ctx, "cfg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return !counted() })
}

func TestWhatIsKeptOfAGroupRestartedInPlaceGoesWithIt(t *testing.T) {
	client := fake.NewClientset()
	rules := podRules{
		restartOf: func(*podView) (confighash.Restart, error) { return confighash.Restart{Token: "v1:new"}, nil },
		covered:   func(string) bool { return true },
		rollout:   func(*podView) podRollout { return podRollout{maxUnavailable: 1} },
	}
	r, err := newRestarts(client, watches.Door{Gate: modes{}}, confighash.Vocabulary{}, rules, 0, time.Minute, 0, newReporter(record.NewFakeRecorder(1000), nil, nil, zerolog.Nop()), NoopRecorder{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	r.run(t.Context())
	for !r.synced() {
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 200 {
		g := podGroup{"shop", types.UID(fmt.Sprint("app-", i))}
		pod := restartablePod(fmt.Sprint("app-", i, "-0"), g.UID, "v1:old")
		pod.Labels[confighash.LabelRestart] = confighash.RestartReload.String()
		if _, err := client.CoreV1().Pods("shop").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, func() bool { return len(r.look(g, time.Now()).pods) == 1 })
		if _, err := r.sync(t.Context(), g); err != nil { // tells, and asks the reload
			t.Fatal(err)
		}
		r.tell(g, r.look(g, time.Now()).pods[0].ref(), "v1:new", "Normal", "RestartWaits", "waits")
		if err := client.CoreV1().Pods("shop").Delete(t.Context(), pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, func() bool { return len(r.look(g, time.Now()).pods) == 0 })
		if _, err := r.sync(t.Context(), g); err != nil { // the pods informer's delete wakes it
			t.Fatal(err)
		}
	}
	if len(r.report.said.of) != 0 || len(r.reloads) != 0 {
		t.Errorf("200 groups restarted in place, then deleted: %d Events told and %d reloads kept", len(r.report.said.of), len(r.reloads))
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}
