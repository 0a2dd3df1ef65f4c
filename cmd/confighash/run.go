package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `confighash rolls workloads when the ConfigMaps and Secrets they use change.

Usage:
  confighash <command> [flags]

Commands:
  version   print the version
`

// errUsage reports a command line that names no known command.
var errUsage = errors.New("unknown command; run confighash help")

// run executes one subcommand; it is main without the process: testable end to end.
func run(_ context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return nil
	}
	switch args[0] {
	case "version":
		fmt.Fprintf(stdout, "confighash %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		return fmt.Errorf("%q: %w", args[0], errUsage)
	}
}
