package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/webhook"
)

const explainSummary = `confighash explain: why a workload did or did not roll, and what would.

  confighash explain deployment/web -n shop     one workload, live
  confighash explain -n shop                    every opted-in workload of a namespace
  confighash explain --file deploy.yaml --with cm.yaml [--hash-key-file key]
                                                offline, from manifests ("-" for stdin)
  confighash explain --file chart.yaml --with-old old.yaml --with new.yaml --fail-on-rollout
                                                which workloads a change of sources rolls

Exit status: 0; 1 with --fail-on-rollout when a workload would roll; 2 on bad input.`

// exitError carries a process exit status other than 1.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// badInput is an input error: exit status 2.
func badInput(format string, args ...any) error {
	return &exitError{2, fmt.Errorf(format, args...)}
}

// workloadKinds are the workload kinds explain and resume read: the built-in ones and
// those of --extra-kind.
func workloadKinds(extra []string) (confighash.Kinds, error) {
	kinds, err := confighash.ParseKinds("", extra)
	if err != nil {
		return nil, badInput("--extra-kind: %v", err)
	}
	return kinds, nil
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// extraKindUsage is the --extra-kind flag's usage, the same for every command.
const extraKindUsage = "an extra workload kind to handle, any whose controller rolls its pods when their template changes: apiVersion:Kind:resource:template path, as in serving.knative.dev/v1:Service:services:spec.template; repeatable"

type explainConfig struct {
	kubeconfig, context, namespace string
	installNamespace, keySecret    string
	hashKeyFile, output            string
	files, with, withOld           stringList
	extraKinds                     stringList
	failOnRollout, reloader, csi   bool
	ignored                        ignoredKinds
	namespaceSelector              string
	everySelector                  string
	rolloutWindow                  string
	waveSize                       int
	pinByDefault                   bool
	lifecycle                      lifecycleFlags
	onFailure                      string
}

func (c *explainConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file; default: $KUBECONFIG or ~/.kube/config")
	fs.StringVar(&c.context, "context", "", "kubeconfig context")
	fs.StringVar(&c.namespace, "n", "", "the workloads' namespace; default: the context's")
	fs.StringVar(&c.namespace, "namespace", "", "the workloads' namespace (as -n)")
	fs.StringVar(&c.installNamespace, "install-namespace", "confighash", "namespace confighash is installed in, holding the hash key Secret")
	fs.StringVar(&c.keySecret, "hash-key-secret", "confighash-hash-key", "the hash key Secret; without read access, digests are not compared")
	fs.StringVar(&c.hashKeyFile, "hash-key-file", "", "file holding the hash key, instead of the Secret")
	fs.StringVar(&c.output, "o", "table", "output: table or json")
	fs.Var(&c.files, "file", "offline: a manifest of workloads (multi-document YAML or JSON; - for stdin); repeatable")
	fs.Var(&c.with, "with", "offline: a manifest of the ConfigMaps and Secrets as they are (or will be); repeatable")
	fs.Var(&c.withOld, "with-old", "offline: the sources as they were: each workload is taken as hashed with them, to tell which the new ones roll; repeatable")
	fs.BoolVar(&c.failOnRollout, "fail-on-rollout", false, "exit 1 when a workload would roll")
	fs.BoolVar(&c.reloader, "reloader-annotations", true, "read Reloader's annotations as aliases, as the components do by default")
	fs.BoolVar(&c.csi, "enable-csi-integration", false, "count SecretProviderClasses from the Secrets Store CSI driver's pod statuses, as the components' flag")
	fs.Var(&c.ignored, "resources-to-ignore", `"configMaps" or "secrets": that kind never counts, as the components' flag`)
	fs.StringVar(&c.namespaceSelector, "namespace-selector", webhook.DefaultNamespaceSelector, "label selector of the namespaces where workloads that opt in are acted on, as given to the components")
	fs.StringVar(&c.rolloutWindow, "rollout-window", "", "the components' --rollout-window, to tell which changes are held")
	fs.IntVar(&c.waveSize, "wave-size", 0, "the components' --wave-size, to tell which changes are held")
	fs.BoolVar(&c.pinByDefault, "pin-by-default", false, "the components' --pin-by-default, to tell which workloads are pinned")
	fs.StringVar(&c.onFailure, "on-failure", "halt", "the components' --on-failure, to tell what a failed rollout does")
	c.lifecycle.flags(fs, "the components' ")
	fs.Var(&c.extraKinds, "extra-kind", extraKindUsage)
	fs.StringVar(&c.everySelector, "every-workload-namespace-selector", webhook.DefaultEveryNamespaceSelector, "label selector of the namespaces where every workload is acted on unless it opts out, as given to the components; empty: none")
}

func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg explainConfig
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	cfg.flags(fs)
	positional, err := parseInterspersed(fs, args, stdout, explainSummary)
	if positional == nil || err != nil {
		return err
	}
	if len(positional) > 1 {
		return badInput("unexpected arguments: %q; name one workload, or a namespace with -n", positional[1:])
	}
	target := positional[0]
	if cfg.output != "table" && cfg.output != "json" {
		return badInput("-o %q: want table or json", cfg.output)
	}
	selectors, err := parseSelectors(cfg.namespaceSelector, cfg.everySelector)
	if err != nil {
		return badInput("%v", err)
	}
	pacing, err := confighash.ParsePacing(confighash.PacingText{Window: cfg.rolloutWindow, WaveSize: fmt.Sprint(cfg.waveSize), Pin: strconv.FormatBool(cfg.pinByDefault), OnFailure: cfg.onFailure})
	if err != nil {
		return badInput("%v", err)
	}
	in := confighash.ExplainInput{Vocabulary: confighash.Vocabulary{Reloader: cfg.reloader, CSI: cfg.csi, Ignored: confighash.SourceKinds(cfg.ignored)}, Pacing: pacing, Lifecycle: cfg.lifecycle.domain()}
	var explanations []confighash.Explanation
	if len(cfg.files) > 0 {
		if target != "" {
			return badInput("name workloads with --file or on the command line, not both")
		}
		explanations, err = cfg.explainFiles(in, selectors)
	} else {
		explanations, err = cfg.explainLive(ctx, in, selectors, target)
	}
	if err != nil {
		return err
	}
	if err := printExplanations(stdout, cfg.output, explanations); err != nil {
		return err
	}
	if cfg.failOnRollout && slices.ContainsFunc(explanations, func(e confighash.Explanation) bool { return e.Verdict == confighash.VerdictRollout }) {
		return &exitError{1, errors.New("a workload would roll")}
	}
	return nil
}

// parseInterspersed parses a command line whose flags may come before or after its
// arguments, as with kubectl, and returns the arguments, with "" for none; nil when it
// only asked for help, which it printed.
func parseInterspersed(fs *flag.FlagSet, args []string, stdout io.Writer, summary string) ([]string, error) {
	readReloaderForms(fs) // the selectors given the components, in Reloader's forms too
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprintln(stdout, summary+"\n\nFlags:")
				fs.SetOutput(stdout)
				fs.PrintDefaults()
				return nil, nil
			}
			return nil, badInput("%v", err)
		}
		if fs.NArg() == 0 {
			break
		}
		positional, args = append(positional, fs.Arg(0)), fs.Args()[1:]
	}
	if len(positional) == 0 {
		positional = []string{""}
	}
	return positional, nil
}

// fileKey reads --hash-key-file, when given.
func (c *explainConfig) fileKey() (key confighash.Key, ok bool, err error) {
	if c.hashKeyFile == "" {
		return confighash.Key{}, false, nil
	}
	if key, err = keyFromFile(c.hashKeyFile); err != nil {
		return confighash.Key{}, false, badInput("%v", err)
	}
	return key, true, nil
}
