package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/restarter"
)

var restarterSummary = fmt.Sprintf(`confighash restarter: the sidecar of restart in place. It exits %d when the pod's restart token
changes, and the pod's restart rule on that code restarts every container of the pod.`, confighash.RestarterExitCode)

// runRestarter runs in every pod restarted in place, so it stays small: no API
// client, no informers, no ops server.
func runRestarter(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "ready" {
		return restarterReady(args[1:], stdout)
	}
	var cfg restarter.Config
	fs := flag.NewFlagSet("restarter", flag.ContinueOnError)
	fs.StringVar(&cfg.TokenFile, "token-file", confighash.RestarterTokenFile, "the downward API file of the pod's "+confighash.AnnotationRestartToken+" annotation; read by path on each poll, as the kubelet swaps the volume's files")
	fs.DurationVar(&cfg.Poll, "poll", time.Second, "how often to read --token-file besides each change of its directory (inotify), which is read at once; the only reads where inotify is not available")
	fs.StringVar(&cfg.Reload, "reload", "", "tell the app to reload instead of restarting the pod: signal:SIGHUP (SIGUSR1, SIGUSR2; to the first process of each other container of the pod, whose process namespace is shared) or http:PORT/PATH (a POST to 127.0.0.1); a reload that fails restarts the pod")
	fs.StringVar(&cfg.VolumesDir, "volumes-dir", confighash.RestarterVolumesDir, "with --reload: where the volumes of the app's files are mounted, one directory each; the reload waits for the kubelet's swap of their files")
	fs.StringVar(&cfg.AppliedFile, "applied-file", confighash.RestarterAppliedFile, "with --reload: where the token the app last reloaded for is kept, for the readiness probe (confighash restarter ready)")
	if done, err := parse(fs, args, stdout, restarterSummary); done || err != nil {
		return err
	}
	log, _, err := newLogger(stderr, "json", "info", "restarter")
	if err != nil {
		return err
	}
	limitMemory(cgroupMemoryMax)
	cfg.Log = log
	code, err := restarter.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if code != 0 {
		return &exitError{code, errors.New("the restart token changed: restarting the pod's containers")}
	}
	return nil
}

// restarterReady is the readiness probe of a restarter that reloads: it succeeds when
// the app reloaded for the pod's current token.
func restarterReady(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("restarter ready", flag.ContinueOnError)
	tokenFile := fs.String("token-file", confighash.RestarterTokenFile, "the pod's restart token, as the restarter reads it")
	appliedFile := fs.String("applied-file", confighash.RestarterAppliedFile, "the token the app last reloaded for")
	if done, err := parse(fs, args, stdout, "confighash restarter ready: the readiness probe of a restarter that reloads: it fails until the app reloaded for the pod's token."); done || err != nil {
		return err
	}
	return restarter.Ready(*tokenFile, *appliedFile)
}
