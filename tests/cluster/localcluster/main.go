// Command localcluster starts and stops a local control plane that outlives it, for
// people: `make cluster-up` and `make cluster-down`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/confighash/confighash/tests/cluster"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "localcluster: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("localcluster", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory for the cluster's certificates, data, logs and state (required)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: localcluster up|down --dir DIR")
		fs.PrintDefaults()
	}
	if len(args) == 0 {
		fs.Usage()
		return errors.New("missing command")
	}
	cmd := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("--dir is required")
	}
	switch cmd {
	case "up":
		return up(*dir, stdout)
	case "down":
		return down(*dir, stdout)
	default:
		return fmt.Errorf("unknown command %q: want up or down", cmd)
	}
}

func up(dir string, stdout io.Writer) error {
	if c, err := cluster.Attach(dir); err == nil && c.Running() {
		printUsage(stdout, c, dir, "already running")
		return nil
	} else if err == nil {
		// A leftover from a cluster that died: stop what remains and start afresh.
		_ = c.Stop()
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clear %s: %w", dir, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := cluster.Start(ctx, cluster.Options{Dir: dir, Detached: true})
	if err != nil {
		return err
	}
	printUsage(stdout, c, dir, "started")
	return nil
}

func printUsage(w io.Writer, c *cluster.Cluster, dir, what string) {
	fmt.Fprintf(w, "local control plane %s (logs in %s)\n\n", what, dir)
	fmt.Fprintf(w, "  export KUBECONFIG=%s\n", c.Kubeconfig)
	fmt.Fprintf(w, "  alias kubectl=%s\n\n", c.KubectlPath)
	fmt.Fprintf(w, "Tests reuse it with %s=%s; stop it with make cluster-down.\n", cluster.SharedDirEnv, dir)
}

func down(dir string, stdout io.Writer) error {
	c, err := cluster.Attach(dir)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(stdout, "no local control plane is running")
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.Stop(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "local control plane stopped")
	return nil
}
