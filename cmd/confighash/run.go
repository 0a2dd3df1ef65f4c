package main

import (
	"context"
	"errors"
	"fmt"
	"io"
)

const usage = `confighash rolls workloads when the ConfigMaps and Secrets they use change.

Usage:
  confighash <command> [flags]

Commands:
  webhook    run the mutating admission webhook
  watcher    run the watcher that touches workloads when their sources change
  restarter  the sidecar of restart in place: exits to restart its pod's containers
  explain    why a workload did or did not roll, live or from manifests
  resume     roll what a halted wave holds
  version    print the version

Run confighash <command> --help for its flags. Installed as kubectl-confighash, it is
also kubectl confighash <command>.
`

// errUsage reports a command line that names no known command.
var errUsage = errors.New("unknown command; run confighash help")

// run executes one subcommand; it is main without the process: testable end to end.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return nil
	}
	switch args[0] {
	case "webhook":
		return runWebhook(ctx, args[1:], stdout, stderr)
	case "watcher":
		return runWatcher(ctx, args[1:], stdout, stderr)
	case "restarter":
		return runRestarter(ctx, args[1:], stdout, stderr)
	case "explain":
		return runExplain(ctx, args[1:], stdout, stderr)
	case "resume":
		return runResume(ctx, args[1:], stdout, stderr)
	case "version":
		b := currentBuild()
		fmt.Fprintf(stdout, "confighash %s (revision %s, %s, %s)\n", b.Version, b.Revision, b.GoVersion, b.Platform)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		return fmt.Errorf("%q: %w", args[0], errUsage)
	}
}
