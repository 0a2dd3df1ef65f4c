package watcher

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
)

func TestAChangeIsCheckedOnceQuietAndAtMostTheDebounceAfterTheFirst(t *testing.T) {
	c := newTracking(100*time.Millisecond, time.Second, 0)
	key := workloadKey{"Deployment", "ns", "web"}
	t0 := time.Unix(1000, 0)
	if wait := c.changeReached(key, t0, false); wait != 100*time.Millisecond {
		t.Fatalf("a lone change waits %v, want the quiet period", wait)
	}
	// A second change 10 ms later, as helm writes a release's next object: the check
	// that comes out of the queue at 100 ms waits 10 ms more.
	c.changeReached(key, t0.Add(10*time.Millisecond), false)
	if wait := c.untilQuiet(key, t0.Add(100*time.Millisecond)); wait != 10*time.Millisecond {
		t.Fatalf("wait at 100 ms = %v, want 10 ms more", wait)
	}
	if wait := c.untilQuiet(key, t0.Add(110*time.Millisecond)); wait != 0 {
		t.Fatalf("wait at 110 ms = %v, want now", wait)
	}
	if wait := c.untilQuiet(key, t0.Add(120*time.Millisecond)); wait != 0 {
		t.Fatalf("a check not from a change waits %v, want none", wait)
	}
	// Changes every 50 ms go on: checked at the debounce after the first, not later.
	for i := range 30 {
		c.changeReached(key, t0.Add(time.Duration(i)*50*time.Millisecond), false)
	}
	if wait := c.untilQuiet(key, t0.Add(time.Second)); wait != 0 {
		t.Fatalf("changes that go on: wait at 1 s = %v, want now", wait)
	}
}

// A change of a source nothing wrote for the burst gap, by no apply, is checked at
// once; one an apply wrote, or of a source in a burst, waits the quiet period; and a
// change alone that another follows before its check waits for the quiet too.
func TestAChangeAloneIsCheckedAtOnceAndOnlyABurstOrAnApplyWaits(t *testing.T) {
	c := newTracking(100*time.Millisecond, time.Second, 0)
	now := time.Unix(1000, 0)
	digest := func(written time.Time, annotations map[string]string, managed ...metav1.ManagedFieldsEntry) *sourcecache.Digested {
		meta := &metav1.ObjectMeta{Namespace: "ns", Name: "cfg", Annotations: annotations, ManagedFields: managed,
			CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))}
		if !written.IsZero() {
			meta.ManagedFields = append(meta.ManagedFields, metav1.ManagedFieldsEntry{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: written}})
		}
		return sourcecache.NewDigested(meta, confighash.Source{SourceRef: confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}})
	}
	plain := digest(now, nil)
	for _, tc := range []struct {
		name      string
		prev, now *sourcecache.Digested
		alone     bool
	}{
		{"an edit of a source last written a minute before", digest(now.Add(-time.Minute), nil), plain, true},
		{"an edit of a source last written 1.5 s before, in a burst", digest(now.Add(-1500*time.Millisecond), nil), plain, false},
		{"an edit of a source last written 5.5 s before, within the burst gap and its second", digest(now.Add(-5500*time.Millisecond), nil), plain, false},
		{"an edit of a source last written 6.5 s before", digest(now.Add(-6500*time.Millisecond), nil), plain, true},
		{"an edit of a source just created", nil, plain, false},
		{"a write of a Helm release's source", digest(now.Add(-time.Minute), nil), digest(now, map[string]string{"meta.helm.sh/release-name": "app"}), false},
		{"a write by kubectl apply", digest(now.Add(-time.Minute), nil), digest(now, map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}), false},
		{"a write of a source a server-side apply wrote", digest(now.Add(-time.Minute), nil),
			digest(now, nil, metav1.ManagedFieldsEntry{Manager: "kustomize-controller", Operation: metav1.ManagedFieldsOperationApply, Time: &metav1.Time{Time: now}}), false},
		{"new versions of a SecretProviderClass", digest(now.Add(-time.Minute), nil), &sourcecache.Digested{Source: confighash.Source{SourceRef: confighash.SourceRef{Kind: confighash.SecretProviderClass, Name: "vault"}}}, false},
	} {
		if got := c.alone(tc.prev, tc.now, now); got != tc.alone {
			t.Errorf("%s: alone = %v, want %v", tc.name, got, tc.alone)
		}
	}

	key := workloadKey{"Deployment", "ns", "web"}
	if wait := c.changeReached(key, now, true); wait != 0 {
		t.Fatalf("a change alone waits %v, want none", wait)
	}
	if wait := c.untilQuiet(key, now.Add(2*time.Millisecond)); wait != 0 {
		t.Fatalf("a change alone, checked 2 ms later, waits %v more, want none", wait)
	}
	// One alone, another 5 ms later before the check: both wait the quiet period
	// after the second.
	c.changeReached(key, now, true)
	c.changeReached(key, now.Add(5*time.Millisecond), true)
	if wait := c.untilQuiet(key, now.Add(6*time.Millisecond)); wait != 99*time.Millisecond {
		t.Fatalf("two changes 5 ms apart, checked at 6 ms, wait %v more, want 99 ms", wait)
	}
}

// The first touches of a fan-out go at once, the rest at the touch rate.
func TestAFanOutsFirstTouchesGoAtOnceAndTheRestAtTheTouchRate(t *testing.T) {
	c := newTracking(100*time.Millisecond, time.Second, 20*time.Millisecond)
	for i, want := range map[int]time.Duration{0: 0, 9: 0, 10: 20 * time.Millisecond, 59: 1000 * time.Millisecond} {
		if got := c.spread(i); got != want {
			t.Errorf("workload %d touched %v after the first, want %v", i, got, want)
		}
	}
}
