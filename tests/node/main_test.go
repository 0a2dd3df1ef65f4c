package node

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// testEnv is the suite's control plane and node, shared by its tests; nil where the
// node cannot run (skipReason says why).
var (
	testEnv    *Env
	skipReason string
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

// run brings the environment up, runs the tests, and takes it down; a host left
// changed fails the suite.
func run(m *testing.M) (code int) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	logf := func(format string, args ...any) { fmt.Printf("tests/node: "+format+"\n", args...) }
	env, err := Up(ctx, logf)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testEnv = env
	code = m.Run()
	if err := env.Down(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	logf("the host is as it was: no process, link, mount, path in /run, iptables rule or sysctl left changed")
	return code
}

// requireNode returns the suite's environment, or skips where the node cannot run.
func requireNode(t *testing.T) *Env {
	t.Helper()
	if testEnv == nil {
		t.Skip(skipReason)
	}
	return testEnv
}
