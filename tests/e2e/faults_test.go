package e2e

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/ledger"
	"github.com/confighash/confighash/webhook"
)

// TestFaultConcurrentWriterLosesNothingAndRollsNothingExtra: while ConfigMaps change
// every 200 ms, another controller scales and relabels the same Deployments every
// 50 ms (read, modify, update, as controllers do). The ledger, built from the API
// server's own state, finds every change rolled each workload once and no rollout
// without a change; the other writer's last writes all stand.
func TestFaultConcurrentWriterLosesNothingAndRollsNothingExtra(t *testing.T) {
	c := sharedCluster(t)
	const n = 10
	ns, l, _ := oneToOne(t, c, n)

	type write struct {
		replicas int32
		label    string
	}
	last := map[string]write{}
	// The writer stops between writes, never inside one: a write cut short may or may
	// not have landed.
	var stopping atomic.Bool
	writer := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(7, 7))
		for i := 0; !stopping.Load(); i++ {
			name := fmt.Sprintf("web-%d", rng.IntN(n))
			want := write{replicas: int32(1 + i%2), label: fmt.Sprint(i)}
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				d.Spec.Replicas = ptr.To(want.replicas)
				d.Labels = map[string]string{"writer": want.label}
				_, err = c.Client.AppsV1().Deployments(ns).Update(t.Context(), d, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				writer <- fmt.Errorf("the other writer's update of %s: %w", name, err)
				return
			}
			last[name] = want
			time.Sleep(50 * time.Millisecond)
		}
		writer <- nil
	}()
	rng := rand.New(rand.NewPCG(8, 8))
	mustDrive(t, c, l, 200*time.Millisecond, 20*time.Second, func() ledger.Source { return ledger.ConfigMapIn(ns, fmt.Sprintf("cm-%d", rng.IntN(n))) })
	stopping.Store(true)
	if err := <-writer; err != nil {
		t.Fatal(err)
	}
	l.Settle(t, 2*time.Minute, quietPeriod)
	o := l.Outcome(time.Time{})
	t.Logf("updates %d, rollouts %d, coalesced %d, lost %d, spurious %d; the other writer wrote %d Deployments",
		o.Updates, o.Rollouts, o.Coalesced, o.Lost, o.Spurious, len(last))
	if o.Lost != 0 || o.Spurious != 0 || o.Rollouts == 0 {
		t.Fatalf("lost %d, spurious %d, rollouts %d: want every change rolled once and nothing else", o.Lost, o.Spurious, o.Rollouts)
	}
	for name, want := range last {
		d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *d.Spec.Replicas != want.replicas || d.Labels["writer"] != want.label {
			t.Errorf("%s: replicas %d, label %q; the other writer last wrote %d, %q", name, *d.Spec.Replicas, d.Labels["writer"], want.replicas, want.label)
		}
	}
}

// faultControllers are the controllers of the control plane of its own that a fault
// test kills or compacts: the ReplicaSets it counts rollouts by.
var faultControllers = []string{"deployment", "replicaset"}

// startFaultRun starts the webhook, a fault set of 10 ConfigMap and 10 Secret users
// and fanOut users of shared, the watcher with its default settings, restarted
// whenever it exits (it exits when it cannot renew its lease), and a stream of changes
// every 500 ms from seed.
func startFaultRun(t testing.TB, c *cluster.Cluster, fanOut int, seed uint64) (*faultSet, *supervised, *stream) {
	t.Helper()
	startWebhook(t, c, benchLogLevel)
	f := newFaultSet(t, c, 10, fanOut)
	w := supervise(t, c, "watcher", benchLogLevel)
	waitFor(t, time.Minute, "the watcher to lead", func() bool { return w.metric("confighash_watcher_leader") == 1 })
	return f, w, f.stream(t, 500*time.Millisecond, seed)
}

// TestFaultAPIServerKilledMidFanOut: while Secrets and ConfigMaps change every 500 ms,
// a ConfigMap used by 100 Deployments changes, and when a third of them have rolled the
// API server is killed (SIGKILL) and started again 3 s later; etcd keeps its data. The
// fan-out finishes, every change rolls each workload that uses it once, and nothing
// rolls without a change.
func TestFaultAPIServerKilledMidFanOut(t *testing.T) {
	c := isolatedCluster(t, faultControllers...)
	f, w, s := startFaultRun(t, c, 100, 11)
	time.Sleep(3 * time.Second)

	f.changeShared(t)
	f.awaitFanOut(t, 2, f.fanOut/3, 2*time.Minute)
	s.hold.Lock()
	before := f.fannedOut(t, 2)
	killed := time.Now()
	if err := c.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if err := c.StartAPIServer(t.Context()); err != nil {
		t.Fatal(err)
	}
	down := time.Since(killed)
	s.hold.Unlock()
	t.Logf("API server killed with %d of %d fan-out Deployments rolled, back after %v", before, f.fanOut, down.Round(100*time.Millisecond))
	rest := f.awaitFanOut(t, 2, f.fanOut, 3*time.Minute)
	time.Sleep(5 * time.Second)
	s.stop(t)
	f.check(t)
	t.Logf("the rest of the fan-out rolled %v after the API server was back; the watcher restarted %d times", rest.Round(100*time.Millisecond), w.restarts())
}

// TestFaultExpiredWatchesRollNothingSpurious: twice while Secrets and ConfigMaps change
// every 500 ms, the API server is killed, etcd compacted and the API server started
// again, so that every watch resumes from a compacted resourceVersion, gets 410 Gone
// and lists again; a fan-out of 20 follows each time. The relists roll nothing, and
// every change rolls each workload that uses it once.
func TestFaultExpiredWatchesRollNothingSpurious(t *testing.T) {
	c := isolatedCluster(t, faultControllers...)
	f, w, s := startFaultRun(t, c, 20, 12)
	for round := range 2 {
		time.Sleep(5 * time.Second)
		list, err := c.Client.CoreV1().ConfigMaps(f.ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A write after the list, so that the compaction passes its resourceVersion.
		createConfigMap(t, c, f.ns, fmt.Sprintf("unused-%d", round), nil)
		s.hold.Lock()
		killed := time.Now()
		if err := c.KillAPIServer(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CompactEtcd(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := c.StartAPIServer(t.Context()); err != nil {
			t.Fatal(err)
		}
		down := time.Since(killed)
		s.hold.Unlock()
		expectExpired(t, c, f.ns, list.ResourceVersion)
		f.changeShared(t)
		took := f.awaitFanOut(t, 2+round, f.fanOut, 2*time.Minute)
		t.Logf("round %d: the API server was down %v; the fan-out then rolled in %v", round, down.Round(100*time.Millisecond), took.Round(100*time.Millisecond))
	}
	time.Sleep(5 * time.Second)
	s.stop(t)
	f.check(t)
	t.Logf("the watcher restarted %d times", w.restarts())
}

// expectExpired fails the test unless a watch of the namespace's ConfigMaps from
// resourceVersion rv gets 410 Gone, as every informer's resumed watch then does.
func expectExpired(t testing.TB, c *cluster.Cluster, ns, rv string) {
	t.Helper()
	w, err := c.Client.CoreV1().ConfigMaps(ns).Watch(t.Context(), metav1.ListOptions{ResourceVersion: rv})
	if err == nil {
		defer w.Stop()
		ev := <-w.ResultChan()
		if ev.Type != watch.Error {
			t.Fatalf("a watch from resourceVersion %s got %s, want 410 Gone", rv, ev.Type)
		}
		err = apierrors.FromObject(ev.Object)
	}
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("a watch from resourceVersion %s: %v, want 410 Gone", rv, err)
	}
}

// slowAPIServer serves the API server to one client through a plain-HTTP proxy on
// loopback that, while slow, holds every request but a watch for delay before passing
// it on, as an overloaded API server answers late.
type slowAPIServer struct {
	kubeconfig string
	delay      time.Duration
	slow       atomic.Bool
	held       atomic.Int64
}

func startSlowAPIServer(t testing.TB, c *cluster.Cluster, delay time.Duration) *slowAPIServer {
	t.Helper()
	p := &slowAPIServer{delay: delay}
	p.kubeconfig = proxyAPIServer(t, c, func(r *http.Request) bool {
		if !p.slow.Load() || r.URL.Query().Get("watch") == "true" {
			return true
		}
		p.held.Add(1)
		select {
		case <-time.After(p.delay):
			return true
		case <-r.Context().Done():
			return false
		}
	})
	return p
}

// proxyAPIServer serves the API server to one client through a plain-HTTP proxy on
// loopback, which passes on each request that pass, called first, lets through, and
// returns that client's kubeconfig.
func proxyAPIServer(t testing.TB, c *cluster.Cluster, pass func(*http.Request) bool) string {
	t.Helper()
	target, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = transport
	proxy.FlushInterval = -1 // watches stream
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if pass(r) {
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxied"] = &clientcmdapi.Cluster{Server: srv.URL}
	cfg.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["proxied"] = &clientcmdapi.Context{Cluster: "proxied", AuthInfo: "proxy"}
	cfg.CurrentContext = "proxied"
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// TestFaultSlowAPIServerWritesSucceedAndTheWatcherHeals: for about 25 s every read
// the webhook makes waits 6 s, past its 4 s budget, while Secrets and ConfigMaps change
// every 500 ms and five Deployments are created. Every write succeeds; the webhook
// answers within its budget, allowed and unchanged, with a warning; once the API
// server is fast again the watcher brings each workload that missed a change to it
// with one rollout, adopts the Deployments created unhashed without rolling them, and
// nothing rolls without a change.
func TestFaultSlowAPIServerWritesSucceedAndTheWatcherHeals(t *testing.T) {
	c := sharedCluster(t)
	slow := startSlowAPIServer(t, c, 6*time.Second)
	wh := startWebhook(t, c, benchLogLevel, "--kubeconfig="+slow.kubeconfig)
	f := newFaultSet(t, c, 10, 0)
	const late = 5
	for i := range late {
		f.l.RecordUpdate(createConfigMap(t, c, f.ns, fmt.Sprintf("late-%d", i), map[string]string{"k": "initial"}), time.Now())
	}
	w := startBenchWatcher(t, c)
	// The late ConfigMaps are written a second before the Deployments that use them,
	// so that the watcher can tell the Deployments' pods have their data.
	time.Sleep(time.Second)
	s := f.stream(t, 500*time.Millisecond, 13)

	slow.slow.Store(true)
	client, warned := warnedClient(t, c)
	for i := range late {
		name := fmt.Sprintf("late-%d", i)
		start := time.Now()
		created, err := client.AppsV1().Deployments(f.ns).Create(t.Context(), f.deployment(name, ledger.ConfigMapIn(f.ns, name)), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create %s while the API server is slow: %v", name, err)
		}
		if took := time.Since(start); took > webhook.Timeout {
			t.Errorf("create %s took %v, more than the webhook's timeout", name, took)
		}
		if h := created.Spec.Template.Annotations[confighash.AnnotationHash]; h != "" {
			t.Errorf("%s was hashed (%s) with reads held for %v", name, h, slow.delay)
		}
	}
	time.Sleep(5 * time.Second)
	slow.slow.Store(false)
	time.Sleep(5 * time.Second)
	s.stop(t)
	if !warned.has("the watcher will update it") {
		t.Errorf("creates answered with warnings %q, want one saying the watcher will update the hash", warned.all())
	}
	f.check(t)

	for i := range late {
		if err := f.l.Update(t.Context(), c, ledger.ConfigMapIn(f.ns, fmt.Sprintf("late-%d", i)), nextValue()); err != nil {
			t.Fatal(err)
		}
	}
	o := f.check(t)
	t.Logf("%d reads held; webhook answers allowed unchanged: %.0f; watcher touches: %.0f converged, %.0f not converged, %.0f healed, %.0f adopted; rollouts %d",
		slow.held.Load(), wh.metric(t, `confighash_webhook_mutations_total{kind="Deployment",result="error"}`),
		w.metric(t, `confighash_watcher_touches_total{result="converged"}`), w.metric(t, `confighash_watcher_touches_total{result="not_converged"}`),
		w.metric(t, `confighash_watcher_touches_total{result="healed"}`), w.metric(t, `confighash_watcher_touches_total{result="adopted"}`), o.Rollouts)
	if got := w.metric(t, `confighash_watcher_touches_total{result="adopted"}`); got != late {
		t.Errorf("%v Deployments adopted, want the %d created unhashed", got, late)
	}
}

// warnedClient returns a client whose warnings from the API server are collected,
// acting as the user impersonated, if any.
func warnedClient(t testing.TB, c *cluster.Cluster, as ...rest.ImpersonationConfig) (*kubernetes.Clientset, *warnings) {
	t.Helper()
	warned := &warnings{}
	cfg := rest.CopyConfig(c.Config)
	cfg.WarningHandler = warned
	if len(as) > 0 {
		cfg.Impersonate = as[0]
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client, warned
}

// warnings collects the API server's warnings to a client.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) has(part string) bool {
	return strings.Contains(w.all(), part)
}

func (w *warnings) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.list, "\n")
}

// TestFaultWebhookAndLeaderKilledMidFanOut: while Secrets and ConfigMaps change every
// 500 ms, a ConfigMap used by 100 Deployments changes three times; at a random point
// of each fan-out's touches the webhook is killed and started again 3 s later, the leading
// watcher is killed (a standby takes over when its lease expires), or both. Every
// change rolls each workload that uses it once, and nothing rolls without a change.
func TestFaultWebhookAndLeaderKilledMidFanOut(t *testing.T) {
	c := isolatedCluster(t, faultControllers...)
	wh := startWebhook(t, c, benchLogLevel)
	f := newFaultSet(t, c, 10, 100)
	leader := startBenchWatcher(t, c)
	standby := startComponent(t, c, "watcher", benchLogLevel)
	s := f.stream(t, 500*time.Millisecond, 14)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed))
	t.Logf("random points from seed %d", seed)

	killWebhook := func() {
		wh.kill()
		time.Sleep(3 * time.Second)
		wh.restart(t, c)
	}
	killLeader := func() {
		leader.kill()
		leader, standby = standby, startComponent(t, c, "watcher", benchLogLevel)
	}
	faults := []struct {
		name   string
		inject func()
	}{
		{"webhook killed", killWebhook},
		{"leading watcher killed", killLeader},
		{"both killed", func() { killLeader(); killWebhook() }},
	}
	for i, fault := range faults {
		f.changeShared(t)
		// The watcher touches the fan-out from 1 s after the change (its debounce), 50
		// a second: the fault lands while its touches are being admitted.
		at := time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		time.Sleep(at)
		rolled := f.fannedOut(t, 2+i)
		fault.inject()
		took := f.awaitFanOut(t, 2+i, f.fanOut, 3*time.Minute)
		t.Logf("%s %v after the change, with %d of %d rolled; all had rolled %v later", fault.name, at.Round(time.Millisecond), rolled, f.fanOut, took.Round(100*time.Millisecond))
	}
	time.Sleep(5 * time.Second)
	s.stop(t)
	f.check(t)
}
