package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
	"github.com/confighash/confighash/tests/ledger"
	"github.com/confighash/confighash/tests/rollouts"
)

// faultSet is the workloads a fault test runs over, in a new labelled namespace:
// ConfigMaps cm-i and Secrets secret-i, each used whole by one Deployment (web-i,
// api-i), and the ConfigMap shared, used by the fan-out Deployments fan-i. Every
// Deployment keeps its whole history, so that the ledger reads its rollouts from its
// ReplicaSets: the API server's own state, which outlives a watch. They run no pods:
// the controller-manager's 20 requests a second would go to pods, and fall behind.
type faultSet struct {
	c       *cluster.Cluster
	ns      string
	l       *ledger.Ledger
	sources []ledger.Source // each used by one Deployment: what the stream changes
	shared  ledger.Source
	fanOut  int
}

// newFaultSet creates n ConfigMap users, n Secret users and fanOut users of shared.
// The webhook must be running.
func newFaultSet(t testing.TB, c *cluster.Cluster, n, fanOut int) *faultSet {
	t.Helper()
	ns := labeledNamespace(t, c)
	f := &faultSet{c: c, ns: ns, l: ledger.New(t, c, hashKey(t, c)), shared: ledger.ConfigMapIn(ns, "shared"), fanOut: fanOut}
	f.l.FromReplicaSets(t, c, ns)
	for i := range n {
		cm, secret := fmt.Sprintf("cm-%d", i), fmt.Sprintf("secret-%d", i)
		f.l.RecordUpdate(createConfigMap(t, c, ns, cm, map[string]string{"k": "initial"}), time.Now())
		f.l.RecordSecretUpdate(createSecret(t, c, ns, secret, map[string]string{"k": "initial"}), time.Now())
		f.sources = append(f.sources, ledger.ConfigMapIn(ns, cm), ledger.SecretIn(ns, secret))
		f.create(t, fmt.Sprintf("web-%d", i), ledger.ConfigMapIn(ns, cm))
		f.create(t, fmt.Sprintf("api-%d", i), ledger.SecretIn(ns, secret))
	}
	f.l.RecordUpdate(createConfigMap(t, c, ns, "shared", map[string]string{"k": "initial"}), time.Now())
	for i := range fanOut {
		f.create(t, fmt.Sprintf("fan-%d", i), f.shared)
	}
	// Each Deployment's first ReplicaSet is its birth: a change before the controller
	// made it would make it the rollout.
	waitFor(t, 2*time.Minute, "every Deployment's first ReplicaSet", func() bool {
		all, err := rollouts.AllReplicaSets(t.Context(), c.Client, ns)
		return err == nil && all == f.l.Workloads()
	})
	return f
}

// create makes a Deployment that uses src whole and keeps its whole history.
func (f *faultSet) create(t testing.TB, name string, src ledger.Source) {
	t.Helper()
	createDeployment(t, f.c, f.ns, f.deployment(name, src))
}

// deployment returns a Deployment of no pods that uses src whole and keeps its whole
// history, and declares the use to the ledger.
func (f *faultSet) deployment(name string, src ledger.Source) *appsv1.Deployment {
	tmpl := fixtures.PlainTemplate()
	if src.Ref.Kind == confighash.Secret {
		tmpl.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: src.Ref.Name}}}}
	} else {
		tmpl = fixtures.EnvFromTemplate(src.Ref.Name)
	}
	d := fixtures.Deployment(name, 0, tmpl)
	d.Spec.RevisionHistoryLimit = ptr.To[int32](1000)
	f.l.Use(confighash.Deployment, f.ns, name, src)
	return d
}

// faultValues makes every value a fault test writes new, so that no template ever
// returns to an earlier one (which would reuse its ReplicaSet).
var faultValues atomic.Int64

func nextValue() string { return fmt.Sprintf("v%d", faultValues.Add(1)) }

// changeShared updates the ConfigMap of the fan-out.
func (f *faultSet) changeShared(t testing.TB) {
	t.Helper()
	if err := f.l.Update(t.Context(), f.c, f.shared, nextValue()); err != nil {
		t.Fatal(err)
	}
}

// fannedOut is how many fan-out Deployments have rolled out revision rev or later
// (their first is 1), as the ledger reads them from the ReplicaSets.
func (f *faultSet) fannedOut(t testing.TB, rev int) int {
	t.Helper()
	if err := f.l.Read(t.Context()); err != nil {
		return -1 // the API server may be away; the caller polls again
	}
	rolled := 0
	for i := range f.fanOut {
		if f.l.Rollouts(ledger.WorkloadID(confighash.Deployment, f.ns, fmt.Sprintf("fan-%d", i))) >= rev-1 {
			rolled++
		}
	}
	return rolled
}

// awaitFanOut waits until n of the fan-out Deployments have rolled out revision rev,
// and returns how long that took.
func (f *faultSet) awaitFanOut(t testing.TB, rev, n int, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for f.fannedOut(t, rev) < n {
		if time.Since(start) > timeout {
			f.describeFanOut(t)
			t.Fatalf("after %v, %d of %d fan-out Deployments have rolled out revision %d, want %d", timeout, f.fannedOut(t, rev), f.fanOut, rev, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start)
}

// describeFanOut logs how far the controller got with each fan-out Deployment and
// what its sources record says, for a failed test.
func (f *faultSet) describeFanOut(t testing.TB) {
	t.Helper()
	list, err := f.c.Client.AppsV1().Deployments(f.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Logf("list Deployments: %v", err)
		return
	}
	for _, d := range list.Items {
		if strings.HasPrefix(d.Name, "fan-") {
			t.Logf("%s: generation %d, observed %d, revision %s, hash %s, record %s", d.Name, d.Generation, d.Status.ObservedGeneration,
				d.Annotations["deployment.kubernetes.io/revision"], d.Spec.Template.Annotations[confighash.AnnotationHash], d.Annotations[confighash.AnnotationSources])
		}
	}
}

// stream is a steady stream of changes to the set's sources.
type stream struct {
	// hold is held while an update is written: a fault that takes the API server away
	// takes it first, so that no update is left half-known to the ledger.
	hold   sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

// stream updates a random one of the set's sources every interval until stop.
func (f *faultSet) stream(t testing.TB, interval time.Duration, seed uint64) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	s := &stream{cancel: cancel, done: make(chan error, 1)}
	rng := rand.New(rand.NewPCG(seed, seed))
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				s.done <- nil
				return
			case <-tick.C:
			}
			// A write once begun ends, even when stop comes meanwhile: one the API server
			// made but the ledger never heard of would roll as a change of no update.
			wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			s.hold.Lock()
			err := f.l.Update(wctx, f.c, f.sources[rng.IntN(len(f.sources))], nextValue())
			s.hold.Unlock()
			wcancel()
			if err != nil {
				s.done <- err
				return
			}
		}
	}()
	t.Cleanup(cancel)
	return s
}

// stop ends the stream and fails the test if an update failed.
func (s *stream) stop(t testing.TB) {
	t.Helper()
	s.cancel()
	if err := <-s.done; err != nil {
		t.Fatalf("the stream of changes: %v", err)
	}
}

// check settles the ledger and fails the test unless every change rolled each
// workload that uses it exactly once and nothing rolled without a change.
func (f *faultSet) check(t testing.TB) ledger.Outcome {
	t.Helper()
	f.l.Settle(t, 3*time.Minute, quietPeriod)
	o := f.l.Outcome(time.Time{})
	t.Logf("ledger: %d updates to roll, %d rollouts, %d coalesced, %d lost, %d spurious", o.Updates, o.Rollouts, o.Coalesced, o.Lost, o.Spurious)
	if o.Lost != 0 || o.Spurious != 0 || o.Rollouts == 0 {
		for _, h := range o.SpuriousIn {
			t.Logf("spurious: %s", h)
		}
		t.Fatalf("lost %d, spurious %d, rollouts %d: want every change rolled once and nothing else", o.Lost, o.Spurious, o.Rollouts)
	}
	return o
}
