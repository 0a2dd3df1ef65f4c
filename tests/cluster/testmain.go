package cluster

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// LargeEnv, set to "true", makes Main start a control plane for thousands of workloads
// (Options.Large).
const LargeEnv = "CONFIGHASH_CLUSTER_LARGE"

// SharedDirEnv names a directory holding a cluster started by `make cluster-up`; when
// set, test packages use that cluster instead of starting their own.
const SharedDirEnv = "CONFIGHASH_CLUSTER_DIR"

// Main runs a test package against a control plane, for use from TestMain:
//
//	var testCluster *cluster.Cluster
//	func TestMain(m *testing.M) { cluster.Main(m, &testCluster) }
//
// It starts a cluster (or attaches to the shared one), stores it in *c, runs the tests,
// stops what it started, and exits. In -short mode it starts nothing and leaves *c nil,
// so end-to-end tests skip themselves. Ctrl-C and SIGTERM stop the cluster too. m is a
// *testing.M, or one that wraps its Run with what the package cleans up.
func Main(m interface{ Run() int }, c **Cluster) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		cl      *Cluster
		owned   bool
		started = make(chan struct{})
	)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-signals
		fmt.Fprintf(os.Stderr, "%v: stopping the local control plane\n", sig)
		cancel() // a Start in progress stops what it started
		<-started
		if owned && cl != nil {
			_ = cl.Stop()
		}
		os.Exit(1)
	}()

	var err error
	cl, owned, err = startForTests(ctx)
	close(started)
	if err != nil {
		fmt.Fprintf(os.Stderr, "local control plane: %v\n", err)
		os.Exit(1)
	}
	*c = cl
	code := m.Run()
	if owned {
		signal.Stop(signals)
		if err := cl.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop local control plane: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func startForTests(ctx context.Context) (c *Cluster, owned bool, err error) {
	if dir := os.Getenv(SharedDirEnv); dir != "" {
		c, err := Attach(dir)
		if err != nil {
			return nil, false, fmt.Errorf("%s=%s: %w", SharedDirEnv, dir, err)
		}
		if !c.Running() {
			return nil, false, fmt.Errorf("%s=%s: the cluster there is not running; run make cluster-up", SharedDirEnv, dir)
		}
		return c, false, nil
	}
	c, err = Start(ctx, Options{Large: os.Getenv(LargeEnv) == "true"})
	return c, true, err
}

// Require returns the test cluster, or skips the test when none runs (-short mode).
func Require(t testing.TB, c *Cluster) *Cluster {
	t.Helper()
	if c == nil {
		t.Skip("needs the local control plane, which -short mode does not start")
	}
	return c
}
