package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/certs"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
	"github.com/confighash/confighash/webhook"
)

var testCluster *cluster.Cluster

// defaultScope is the webhook configuration's scope as installed by default.
func defaultScope() webhook.Scope {
	return webhook.Scope{InstallNamespace: installNamespace, Vocabulary: confighash.Vocabulary{Reloader: true}}
}

func TestMain(m *testing.M) {
	flag.Parse()
	if run := flag.Lookup("test.run"); !testing.Short() && (run == nil || run.Value.String() == "") {
		go prebuildPrevious()
	}
	// The lanes bound how many tests run at once; every test waiting for its turn
	// counts as running to -parallel.
	if err := flag.Set("test.parallel", "1000"); err != nil {
		panic(err)
	}
	cluster.Main(removingBuilds{m}, &testCluster)
}

// The tests run in two lanes, each one test at a time in the order they are declared:
// one on the shared control plane, one on control planes of their own (the flood, the
// churn and the faults that kill or compact theirs). The package takes about as long as
// the longer lane, not as both together. A test joins a lane through sharedCluster or
// isolatedCluster, or after both through quietCluster.
var sharedLane, ownLane = newLane(), newLane()

// lane runs its tests one at a time, each in its turn: the order they took tickets in,
// which is the order the tests are declared, as each takes one before t.Parallel.
type lane struct {
	mu            sync.Mutex
	turn          *sync.Cond
	next, serving int
	in            map[*testing.T]bool // the tests that entered and are not done
}

func newLane() *lane {
	l := &lane{in: map[*testing.T]bool{}}
	l.turn = sync.NewCond(&l.mu)
	return l
}

// enter has a top-level test run in parallel with the other lane's, once this lane's
// earlier tests are done; the lane goes on when the test's cleanups ran. A test may
// enter again, through another helper: it is in already.
func (l *lane) enter(t *testing.T) {
	if ticket, ok := l.take(t); ok {
		t.Parallel()
		l.await(ticket)
	}
}

// take gives the test the lane's next ticket, before it calls t.Parallel, and hands
// the turn on when its cleanups ran; false when it has one already.
func (l *lane) take(t *testing.T) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.in[t] {
		return 0, false
	}
	l.in[t] = true
	ticket := l.next
	l.next++
	t.Cleanup(func() {
		l.mu.Lock()
		delete(l.in, t)
		l.serving++
		l.turn.Broadcast()
		l.mu.Unlock()
	})
	return ticket, true
}

// await returns when it is the ticket's turn.
func (l *lane) await(ticket int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.serving != ticket {
		l.turn.Wait()
	}
}

// drain returns once the lane has run every test that took a ticket: after
// t.Parallel, every test has.
func (l *lane) drain() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.serving != l.next {
		l.turn.Wait()
	}
}

// quietLane runs the tests of quietCluster, after the two others.
var quietLane = newLane()

// quietCluster returns the shared control plane for a test that times a window of
// milliseconds against a client's pace: it runs once both lanes are done, alone on
// the machine (the other packages of go test ./... take minutes, and are done too).
func quietCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	c := cluster.Require(t, testCluster)
	ticket, _ := quietLane.take(t)
	t.Parallel()
	sharedLane.drain()
	ownLane.drain()
	quietLane.await(ticket)
	return c
}

// sharedCluster returns the shared control plane, once the test has it to itself.
func sharedCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	c := cluster.Require(t, testCluster)
	sharedLane.enter(t)
	return c
}

// removingBuilds runs the tests, then removes the build of confighashBinary.
type removingBuilds struct{ *testing.M }

func (m removingBuilds) Run() int {
	defer func() {
		if binary != "" {
			_ = os.RemoveAll(filepath.Dir(binary))
		}
	}()
	return m.M.Run()
}

// installNamespace holds the hash key Secret, as the install namespace does.
const installNamespace = "confighash-system"

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// confighashBinary builds bin/confighash once per test run.
func confighashBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "confighash-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "confighash")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/confighash/confighash/cmd/confighash").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// component is a running confighash process.
type component struct {
	cmd      *exec.Cmd
	ops      string // ops server, http://127.0.0.1:port
	logPath  string
	stopOnce sync.Once
}

// startComponent runs `confighash args...` against the test cluster (as admin, with
// the test install namespace, unless args say otherwise) with an ops port of its own,
// waits until it is ready, and stops it at the end of the test.
func startComponent(t testing.TB, c *cluster.Cluster, args ...string) *component {
	t.Helper()
	return startBinary(t, c, confighashBinary(t), args...)
}

// startBinary is startComponent with another build of confighash.
func startBinary(t testing.TB, c *cluster.Cluster, binary string, args ...string) *component {
	t.Helper()
	ensureNamespaces(t, c, installNamespace)
	p, err := spawnComponent(binary, c, filepath.Join(t.TempDir(), args[0]+".log"), envOf(t), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("%s log:\n%s", args[0], cluster.LogTail(p.logPath, 40))
		}
	})
	// A minute: a watcher started after the flood test's floods lists a GiB first.
	ready, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := cluster.WaitHTTP(ready, p.ops+"/readyz"); err != nil {
		t.Fatalf("%s not ready: %v", args[0], err)
	}
	return p
}

// componentEnv holds, by test, what the components it starts find in their environment
// besides the process's: t.Setenv cannot serve tests that run in parallel.
var componentEnv sync.Map

// setComponentEnv gives the components the test starts from now on these variables,
// each "NAME=value".
func setComponentEnv(t *testing.T, vars ...string) {
	componentEnv.Store(t, vars)
	t.Cleanup(func() { componentEnv.Delete(t) })
}

// envOf is what setComponentEnv gave the test's components.
func envOf(t testing.TB) []string {
	vars, _ := componentEnv.Load(t)
	env, _ := vars.([]string)
	return env
}

// spawnComponent starts `binary args...` with the test defaults and env besides the
// process's environment, logging to logPath; it neither waits until the process is
// ready nor stops it.
func spawnComponent(binary string, c *cluster.Cluster, logPath string, env []string, args ...string) (*component, error) {
	ports, err := cluster.FreePorts(1)
	if err != nil {
		return nil, err
	}
	p := &component{ops: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), logPath: logPath}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	// Defaults first: a flag the caller gives again wins.
	defaults := []string{args[0], "--kubeconfig=" + c.Kubeconfig, "--namespace=" + installNamespace,
		fmt.Sprintf("--ops-address=127.0.0.1:%d", ports[0]), "--log-level=debug"}
	p.cmd = exec.Command(binary, append(defaults, args[1:]...)...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// The local API server calls the webhook from 127.0.0.1, which no Endpoints may
	// list; in the environment, which a release without the flag ignores.
	p.cmd.Env = append(append(os.Environ(), "CONFIGHASH_ADMISSION_CALLERS=127.0.0.1"), env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

// supervised is a component that starts again whenever it exits.
type supervised struct {
	mu      sync.Mutex
	current *component
	starts  int
}

// supervise runs `confighash args...` as kubelet runs a container that must keep
// running: whenever it exits (a watcher that cannot renew its lease exits), it starts
// again a second later, until the test ends.
func supervise(t testing.TB, c *cluster.Cluster, args ...string) *supervised {
	t.Helper()
	ensureNamespaces(t, c, installNamespace)
	binary, dir := confighashBinary(t), t.TempDir()
	s := &supervised{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			s.mu.Lock()
			s.starts++
			logPath := filepath.Join(dir, fmt.Sprintf("%s-%d.log", args[0], s.starts))
			p, err := spawnComponent(binary, c, logPath, envOf(t), args...)
			s.current = p
			s.mu.Unlock()
			if err != nil {
				t.Errorf("start %s: %v", args[0], err)
				return
			}
			exited := make(chan struct{})
			go func() {
				_ = p.cmd.Wait()
				close(exited)
			}()
			select {
			case <-exited:
				t.Logf("%s exited: %s", args[0], cluster.LogTail(logPath, 1))
			case <-ctx.Done():
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
				<-exited
				return
			}
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("%s log (start %d):\n%s", args[0], s.starts, cluster.LogTail(filepath.Join(dir, fmt.Sprintf("%s-%d.log", args[0], s.starts)), 400))
		}
	})
	return s
}

// restarts is how many times the component has started again.
func (s *supervised) restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts - 1
}

// metric is the running process's metric, or -1 while none answers.
func (s *supervised) metric(prefix string) float64 {
	s.mu.Lock()
	p := s.current
	s.mu.Unlock()
	if p == nil {
		return -1
	}
	v, err := p.metricValue(prefix)
	if err != nil {
		return -1
	}
	return v
}

// ensureNamespaces creates the namespaces that are missing; a server-side dry run
// creates none, so the namespaced objects of an install need them.
func ensureNamespaces(t testing.TB, c *cluster.Cluster, names ...string) {
	t.Helper()
	for _, ns := range names {
		if _, err := c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// webhookProcess is a running `confighash webhook`, registered with the API server.
type webhookProcess struct {
	*component
	binary  string
	args    []string
	addr    string // admission server, 127.0.0.1:port
	certDir string
	probe   string // the namespace waitAdmitting probes, if not probeNamespace's
	ca      *certs.Authority
}

// startWebhook runs the webhook against the test cluster with a fresh self-signed
// certificate, and registers it for labelled namespaces. Both go at the end of the test.
func startWebhook(t testing.TB, c *cluster.Cluster, extra ...string) *webhookProcess {
	t.Helper()
	return startWebhookBinary(t, c, confighashBinary(t), extra...)
}

// startWebhookBinary is startWebhook with another build of confighash.
func startWebhookBinary(t testing.TB, c *cluster.Cluster, binary string, extra ...string) *webhookProcess {
	t.Helper()
	w := &webhookProcess{binary: binary, certDir: t.TempDir()}
	// A webhook of a namespaced install reads nothing elsewhere: probe one of its own.
	for _, arg := range extra {
		if list, ok := strings.CutPrefix(arg, "--namespaces="); ok {
			w.probe, _, _ = strings.Cut(list, ",")
		}
	}
	ports, err := cluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	w.addr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	if w.ca, err = certs.NewAuthority("confighash-test-ca", time.Hour); err != nil {
		t.Fatal(err)
	}
	w.issue(t)
	w.args = append([]string{"webhook",
		"--listen-address=" + w.addr,
		"--tls-cert-file=" + filepath.Join(w.certDir, "tls.crt"), "--tls-key-file=" + filepath.Join(w.certDir, "tls.key"),
		"--tls-poll-interval=200ms",
		// No Service routes to it: nothing to wait for at shutdown.
		"--shutdown-delay=0"}, extra...)
	w.component = startBinary(t, c, binary, w.args...)
	w.register(t, c)
	return w
}

// restart starts the webhook again, on the same address with the same certificate,
// once the running one has been killed.
func (w *webhookProcess) restart(t testing.TB, c *cluster.Cluster) {
	t.Helper()
	w.component = startBinary(t, c, w.binary, w.args...)
}

// issue writes a new serving certificate for 127.0.0.1, signed by the test CA.
func (w *webhookProcess) issue(t testing.TB) *certs.KeyPair {
	t.Helper()
	kp, err := w.ca.Issue(certs.Leaf{CommonName: "confighash-webhook", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Written aside and renamed into place, as kubelet swaps a Secret volume.
	tmp := t.TempDir()
	if err := kp.WriteFiles(tmp, "tls.crt", "tls.key"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tls.key", "tls.crt"} {
		if err := os.Rename(filepath.Join(tmp, f), filepath.Join(w.certDir, f)); err != nil {
			t.Fatal(err)
		}
	}
	return kp
}

const webhookConfigName = "confighash-e2e"

func (w *webhookProcess) register(t testing.TB, c *cluster.Cluster) {
	t.Helper()
	// Its rules and scope follow the flags it is given, as the chart's do.
	scope := defaultScope()
	var extra []string
	list := ""
	for _, arg := range w.args {
		name, value, _ := strings.Cut(arg, "=")
		switch name {
		case "--extra-kind":
			extra = append(extra, value)
		case "--kinds":
			list = value
		case "--namespaces":
			scope.Namespaces = strings.Split(value, ",")
		case "--namespace-selector":
			selector, err := metav1.ParseToLabelSelector(value)
			if err != nil {
				t.Fatal(err)
			}
			scope.NamespaceSelector = selector
		}
	}
	kinds, err := confighash.ParseKinds(list, extra)
	if err != nil {
		t.Fatal(err)
	}
	scope.Kinds = kinds
	cfg := webhook.Configuration(webhookConfigName, admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + w.addr), CABundle: w.ca.CertPEM}, scope)
	api := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	_ = api.Delete(t.Context(), webhookConfigName, metav1.DeleteOptions{})
	if _, err := api.Create(t.Context(), cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), webhookConfigName, metav1.DeleteOptions{}) })
	probe := w.probe
	if probe == "" {
		probe = probeNamespace(t, c)
		if scope.NamespaceSelector != nil {
			// It must be in scope: it takes the selector's labels too.
			body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": scope.NamespaceSelector.MatchLabels}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Client.CoreV1().Namespaces().Patch(t.Context(), probe, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitAdmitting(t, c, probe)
}

// probeNamespace returns a labelled namespace kept for waitAdmitting's dry runs.
func probeNamespace(t testing.TB, c *cluster.Cluster) string {
	t.Helper()
	const name = "confighash-e2e-probe"
	ensureNamespaces(t, c, name)
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, confighash.InjectionLabel, confighash.InjectionEnabled)
	if _, err := c.Client.CoreV1().Namespaces().Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// waitAdmitting waits until the API server calls the webhook for namespace ns, which
// must be labelled: it loads webhook configurations and caBundles asynchronously, in
// about a second. A server-side dry-run create of an opted-in Deployment shows it.
func waitAdmitting(t testing.TB, c *cluster.Cluster, ns string) {
	t.Helper()
	waitFor(t, 30*time.Second, "the API server to call the webhook in "+ns, func() bool {
		d, err := c.Client.AppsV1().Deployments(ns).Create(t.Context(), fixtures.Deployment("probe", 0, fixtures.PlainTemplate()), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && d.Spec.Template.Annotations[confighash.AnnotationHash] != ""
	})
}

// stop sends SIGTERM and waits for a graceful exit.
func (p *component) stop(t testing.TB) {
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s exited with %v after SIGTERM", p.cmd.Args[1], err)
			}
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			t.Errorf("%s did not stop within 30s of SIGTERM", p.cmd.Args[1])
		}
	})
}

// exited waits for the process to end by itself and returns how it ended; past the
// timeout it kills it and fails the test.
func (p *component) exited(t testing.TB, timeout time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		p.stopOnce.Do(func() {})
		return err
	case <-time.After(timeout):
		p.stopOnce.Do(func() {
			_ = p.cmd.Process.Kill()
			<-done
		})
		t.Fatalf("%s still running after %v", p.cmd.Args[1], timeout)
		return nil
	}
}

// kill stops the process at once, as a crash or a node loss would.
func (p *component) kill() {
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	})
}

// metric returns the sum of the samples of a metric whose line starts with prefix
// (a name and optionally a label set start), from the component's /metrics.
func (p *component) metric(t testing.TB, prefix string) float64 {
	t.Helper()
	v, err := p.metricValue(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// liveHeap forces a collection in a component started with --profiling and returns
// its live heap, in bytes.
//
// It asks twice and keeps the second: what sync.Pools hold survives one collection.
func (p *component) liveHeap(t testing.TB) float64 {
	t.Helper()
	var heap float64
	for range 2 {
		resp, err := http.Get(p.ops + "/debug/pprof/heap?gc=1&debug=1")
		if err != nil {
			t.Fatal(err)
		}
		found := false
		forEachSample(resp.Body, "# HeapAlloc = ", func(_ string, v float64) { heap, found = v, true })
		resp.Body.Close()
		if !found {
			t.Fatalf("%s: no HeapAlloc in its heap profile: was it started with --profiling?", p.ops)
		}
	}
	return heap
}

func (p *component) metricValue(prefix string) (float64, error) {
	resp, err := http.Get(p.ops + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	forEachSample(resp.Body, prefix, func(_ string, v float64) { sum += v })
	return sum, nil
}

// forEachSample calls fn with each sample line of Prometheus text that starts with
// prefix, and its value.
func forEachSample(r io.Reader, prefix string, fn func(line string, value float64)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			fn(line, v)
		}
	}
}

// servedCertificateSerial returns the serial of the certificate a new TLS handshake
// with the webhook presents.
func (w *webhookProcess) servedCertificateSerial(t testing.TB) string {
	t.Helper()
	conn, err := tls.Dial("tcp", w.addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reading the served certificate only
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func certSerial(t testing.TB, certPEM []byte) string {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.SerialNumber.String()
}

// testDebounce keeps tests short; the default is 1s.
const testDebounce = "300ms"

// The watchers' leases in tests ride out an API server that answers slowly for a few
// seconds on a loaded machine: a renew deadline of 1.5 s once lost a lease mid-test.
// A test that kills a watcher and starts the next passes fastLease, so that the
// killed one's lease expires in 2 s.
var (
	testLease = []string{"--leader-elect-lease-duration=10s", "--leader-elect-renew-deadline=7s", "--leader-elect-retry-period=500ms"}
	fastLease = []string{"--leader-elect-lease-duration=2s", "--leader-elect-renew-deadline=1500ms", "--leader-elect-retry-period=300ms"}
)

// watcherArgs runs `confighash watcher` with a short debounce and testLease; extra
// flags win.
func watcherArgs(extra ...string) []string {
	args := append([]string{"watcher", "--debounce=" + testDebounce, "--touch-rate=1000", "--heal-after=2"}, testLease...)
	return append(args, extra...)
}

// startWatcher runs the watcher with watcherArgs and waits until it leads.
func startWatcher(t testing.TB, c *cluster.Cluster, extra ...string) *component {
	t.Helper()
	w := startComponent(t, c, watcherArgs(extra...)...)
	// Ready means synced; leading follows within a retry period.
	waitFor(t, 10*time.Second, "the watcher to lead", func() bool { return w.metric(t, "confighash_watcher_leader") == 1 })
	return w
}

// isolatedCluster starts a control plane of the test's own, in the own lane, stopped at
// the test's end, whose controller-manager runs only the controllers named, and those a
// start waits for (none named: every one). It serves a test that kills, compacts or
// floods its API server: a flood deleted from the shared one took 160 s, during which
// the tests after it would run; an API server killed or compacted under the shared one
// would be under the other lane's test; and each controller the test does not read the
// work of is load that measures nothing of confighash: a StatefulSet's or a DaemonSet's
// copies each 1 MiB template of the flood into a ControllerRevision. A few of the
// longest other tests take it too, so that the lanes take about as long.
func isolatedCluster(tb testing.TB, controllers ...string) *cluster.Cluster {
	tb.Helper()
	cluster.Require(tb, testCluster) // skipped where -short starts no control plane
	if t, ok := tb.(*testing.T); ok {
		ownLane.enter(t)
	}
	var opts cluster.Options // every controller, as the shared one
	if len(controllers) > 0 {
		opts.Controllers = slices.Concat(controllers, []string{"serviceaccount", "serviceaccount-token"})
	}
	c, err := cluster.Start(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Stop(); err != nil {
			tb.Error(err)
		}
	})
	return c
}
