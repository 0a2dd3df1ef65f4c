package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/confighash/confighash/tests/cluster"
)

// Images built by tests/image/build.sh and loaded into the node.
const (
	ConfighashImage = "ghcr.io/confighash/confighash:" + imageTag
	DemoImage       = "ghcr.io/confighash/demoapp:" + imageTag
	imageTag        = "node"
)

// Env is a control plane with a real node that has the project's images.
type Env struct {
	Cluster *cluster.Cluster
	Node    *Node

	dir     string
	network *Network
	before  hostState
	record  *os.File // locked while the run lives (abandoned.go)
}

// Up undoes what earlier runs killed midway left, starts the node's network, a
// control plane reachable from it, the node, and loads the images; logf reports
// each step's time. Down undoes it all.
func Up(ctx context.Context, logf func(format string, args ...any)) (e *Env, err error) {
	undone, err := undoAbandonedRuns()
	for _, dir := range undone {
		logf("undid the node a killed run left: %s", dir)
	}
	if err != nil {
		return nil, err
	}
	e = &Env{}
	if e.dir, err = os.MkdirTemp("", "confighash-node-"); err != nil {
		return nil, err
	}
	if e.before, err = readHostState(e.dir); err != nil {
		return nil, errors.Join(err, os.RemoveAll(e.dir))
	}
	id := fmt.Sprintf("%x", os.Getpid())
	if e.record, err = recordRun(e.dir, networkNamed(id), e.before); err != nil {
		return nil, errors.Join(err, os.RemoveAll(e.dir))
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.Down())
		}
	}()
	start := time.Now()
	if e.network, err = NewNetwork(id); err != nil {
		return e, err
	}
	if e.Cluster, err = cluster.Start(ctx, cluster.Options{Dir: filepath.Join(e.dir, "cluster"), RealNode: e.network.ControlPlane()}); err != nil {
		return e, fmt.Errorf("local control plane: %w", err)
	}
	if e.Node, err = Start(ctx, e.Cluster, e.network, filepath.Join(e.dir, "node")); err != nil {
		return e, fmt.Errorf("node: %w", err)
	}
	logf("control plane and node Ready in %s", time.Since(start).Round(time.Second))
	return e, e.loadImages(ctx, logf)
}

// loadImages builds confighash's image as a release does, one index for amd64 and
// arm64, and the demo app's as make image does, and imports them into the node:
// confighash's as docs/install.md says, the node's own platform from the index.
func (e *Env) loadImages(ctx context.Context, logf func(format string, args ...any)) error {
	start := time.Now()
	dir := filepath.Join(e.dir, "images")
	var said []string
	for _, script := range [][]string{{"tests/image/index.sh", dir}, {"tests/image/build.sh", dir, "./tests/node/demoapp"}} {
		cmd := exec.CommandContext(ctx, filepath.Join(repoRoot(), script[0]), script[1:]...)
		cmd.Dir = repoRoot()
		cmd.Env = append(os.Environ(), "VERSION="+imageTag)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("%s: %w", script[0], err)
		}
		said = append(said, strings.Fields(string(out))...)
	}
	logf("images built in %s: %s", time.Since(start).Round(time.Second), strings.Join(said, ", "))
	if err := e.Node.Import(ctx, filepath.Join(dir, "confighash.oci.tar"), "--platform", "linux/"+runtime.GOARCH); err != nil {
		return err
	}
	return e.Node.Import(ctx, filepath.Join(dir, "demoapp.tar"))
}

// Down stops the node, the control plane and the network, removes their directory,
// and returns an error naming anything the host was left with.
func (e *Env) Down() error {
	var errs []error
	if e.Node != nil {
		errs = append(errs, e.Node.Stop(context.Background()))
	}
	if e.Cluster != nil {
		errs = append(errs, e.Cluster.Stop())
	}
	if e.network != nil {
		errs = append(errs, e.network.Close())
	}
	errs = append(errs, os.RemoveAll(e.dir), e.record.Close())
	after, err := readHostState(e.dir)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if left := e.before.diff(after); len(left) > 0 {
		errs = append(errs, fmt.Errorf("the node left the host changed:\n  %s", strings.Join(left, "\n  ")))
	}
	return errors.Join(errs...)
}

// repoRoot is the repository's top directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "../..")
}
