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
	var cfg restarter.Config
	fs := flag.NewFlagSet("restarter", flag.ContinueOnError)
	fs.StringVar(&cfg.TokenFile, "token-file", confighash.RestarterTokenFile, "the downward API file of the pod's "+confighash.AnnotationRestartToken+" annotation; read by path on each poll, as the kubelet swaps the volume's files")
	fs.DurationVar(&cfg.Poll, "poll", time.Second, "how often to read --token-file")
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
