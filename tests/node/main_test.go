package node

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/confighash/confighash/tests/cluster"
)

// The suite's control plane, node and images, shared by its tests; nil where the
// node cannot run (skipReason says why).
var (
	testCluster *cluster.Cluster
	testNode    *Node
	skipReason  string
)

// Images built by tests/image/build.sh and loaded into the node.
const (
	confighashImage = "ghcr.io/confighash/confighash:node-test"
	demoImage       = "ghcr.io/confighash/demoapp:node-test"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		skipReason = "-short mode starts no node"
		os.Exit(m.Run())
	}
	if skipReason = Unavailable(); skipReason != "" {
		fmt.Println("tests/node: skipped:", skipReason)
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

// run starts the network, the control plane and the node, runs the tests, stops
// everything and checks that the host is as it was.
func run(m *testing.M) (code int) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	dir, err := os.MkdirTemp("", "confighash-node-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	before, err := readHostState(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
		after, err := readHostState(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
			return
		}
		if left := before.diff(after); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "the node left the host changed:\n  %s\n", strings.Join(left, "\n  "))
			code = 1
		}
	}()

	start := time.Now()
	network, err := NewNetwork(fmt.Sprintf("%x", os.Getpid()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer closeAndReport(network.Close, &code)
	testCluster, err = cluster.Start(ctx, cluster.Options{Dir: filepath.Join(dir, "cluster"), RealNode: network.ControlPlane()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "local control plane:", err)
		return 1
	}
	defer closeAndReport(testCluster.Stop, &code)
	testNode, err = Start(ctx, testCluster, network, filepath.Join(dir, "node"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		return 1
	}
	defer closeAndReport(func() error { return testNode.Stop(context.Background()) }, &code)
	fmt.Printf("tests/node: control plane and node Ready in %s\n", time.Since(start).Round(time.Second))

	if err := loadImages(ctx, filepath.Join(dir, "images")); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		return 1
	}
	return m.Run()
}

func closeAndReport(stop func() error, code *int) {
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		*code = 1
	}
}

// loadImages builds confighash's and the demo app's images as make image does, and
// imports them into the node.
func loadImages(ctx context.Context, dir string) error {
	start := time.Now()
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot(), "tests/image/build.sh"), dir, "./cmd/confighash", "./tests/node/demoapp")
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "VERSION=node-test")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("build images: %w", err)
	}
	fmt.Printf("tests/node: images built in %s: %s", time.Since(start).Round(time.Second), out)
	for _, name := range []string{"confighash", "demoapp"} {
		if err := testNode.Import(ctx, filepath.Join(dir, name+".tar")); err != nil {
			return err
		}
	}
	return nil
}

func repoRoot() string {
	wd, _ := os.Getwd()
	return filepath.Join(wd, "../..")
}

// requireNode skips a test where the node cannot run.
func requireNode(t *testing.T) {
	t.Helper()
	if testNode == nil {
		t.Skip(skipReason)
	}
}
