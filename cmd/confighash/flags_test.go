package main

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestEnvironmentSetsFlagsTheCommandLineDoesNot(t *testing.T) {
	t.Setenv("CONFIGHASH_TLS_POLL_INTERVAL", "3s")
	t.Setenv("CONFIGHASH_NAMESPACE", "from-env")
	var cfg webhookConfig
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	cfg.flags(fs)
	if err := parseFlags(fs, []string{"--namespace=from-flag"}, &bytes.Buffer{}, ""); err != nil {
		t.Fatal(err)
	}
	if cfg.certPoll != 3*time.Second {
		t.Errorf("tls poll interval = %v, want 3s from the environment", cfg.certPoll)
	}
	if cfg.namespace != "from-flag" {
		t.Errorf("namespace = %q, want the command line's", cfg.namespace)
	}
}

func TestBadEnvironmentValueNamesTheVariable(t *testing.T) {
	t.Setenv("CONFIGHASH_SHUTDOWN_TIMEOUT", "soon")
	var cfg webhookConfig
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	cfg.flags(fs)
	err := parseFlags(fs, nil, &bytes.Buffer{}, "")
	if err == nil || !strings.Contains(err.Error(), "$CONFIGHASH_SHUTDOWN_TIMEOUT") {
		t.Fatalf("error = %v, want it to name $CONFIGHASH_SHUTDOWN_TIMEOUT", err)
	}
}

func TestWebhookHelpListsEveryFlagWithItsVariable(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"webhook", "--help"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--tls-cert-file  [$CONFIGHASH_TLS_CERT_FILE]", "--hash-key-file", "--log-format"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help does not mention %q:\n%s", want, out.String())
		}
	}
}

func TestNamespacesFlag(t *testing.T) {
	tests := []struct {
		value   string
		want    string
		wantErr string
	}{
		{value: "", want: ""},
		{value: "team-b, team-a,team-b,", want: "team-a,team-b"},
		{value: "team-a,Team_B", wantErr: `namespace "Team_B"`},
	}
	for _, tt := range tests {
		var cfg watcherConfig
		fs := flag.NewFlagSet("watcher", flag.ContinueOnError)
		cfg.flags(fs)
		err := parseFlags(fs, []string{"--namespaces=" + tt.value}, &bytes.Buffer{}, "")
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("--namespaces=%q: error %v, want one naming %s", tt.value, err, tt.wantErr)
			}
			continue
		}
		if err != nil || cfg.watched.String() != tt.want {
			t.Errorf("--namespaces=%q: %q, %v; want %q", tt.value, cfg.watched.String(), err, tt.want)
		}
	}
}

func TestZeroTLSPollIntervalIsRefusedBeforeStarting(t *testing.T) {
	err := run(t.Context(), []string{"webhook", "--tls-poll-interval=0"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--tls-poll-interval must be positive") {
		t.Fatalf("error = %v, want the flag named", err)
	}
}

func TestReloaderFormsOfSharedFlagsMeanTheSame(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want map[string]string // flag: the value confighash reads
	}{
		{name: "key:value is key=value", args: []string{"--namespace-selector=team:shop"},
			want: map[string]string{"namespace-selector": "team=shop"}},
		{name: "key:* is the label existing", args: []string{"--source-label-selector=reload:*"},
			want: map[string]string{"source-label-selector": "reload"}},
		{name: "key=* is the label existing too", args: []string{"--namespace-selector=team=*"},
			want: map[string]string{"namespace-selector": "team"}},
		{name: "a comma list rewrites each entry", args: []string{"--namespace-selector=team:shop, env:*,tier=web"},
			want: map[string]string{"namespace-selector": "team=shop,env,tier=web"}},
		{name: "a set's commas are not entries", args: []string{"--source-label-selector=tier in (a,b),app:web"},
			want: map[string]string{"source-label-selector": "tier in (a,b),app=web"}},
		{name: "the double quotes Reloader's chart writes are dropped", args: []string{`--namespace-selector="team:shop,env:prod"`},
			want: map[string]string{"namespace-selector": "team=shop,env=prod"}},
		{name: "a repeated selector is both, as in Reloader", args: []string{"--namespace-selector=team:shop", "--namespace-selector=env:prod"},
			want: map[string]string{"namespace-selector": "team=shop,env=prod"}},
		{name: "repeated namespaces are all of them, as in Reloader", args: []string{"--namespaces=team-b", "--namespaces=team-a"},
			want: map[string]string{"namespaces": "team-a,team-b"}},
		{name: "a selector in Kubernetes' syntax is left as it is", args: []string{"--every-workload-namespace-selector=env!=prod,!legacy"},
			want: map[string]string{"every-workload-namespace-selector": "env!=prod,!legacy"}},
		{name: "the environment takes Reloader's forms too", env: map[string]string{"CONFIGHASH_SOURCE_LABEL_SELECTOR": "reload:true"},
			want: map[string]string{"source-label-selector": "reload=true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var cfg webhookConfig
			fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
			cfg.flags(fs)
			if err := parseFlags(fs, tt.args, &bytes.Buffer{}, ""); err != nil {
				t.Fatal(err)
			}
			for name, want := range tt.want {
				if got := fs.Lookup(name).Value.String(); got != want {
					t.Errorf("--%s = %q, want %q", name, got, want)
				}
			}
			if _, err := cfg.settings(); err != nil {
				t.Errorf("settings: %v", err)
			}
		})
	}
}

func TestReloaderLogLevelsAreRead(t *testing.T) {
	tests := []struct {
		value string
		want  zerolog.Level
	}{
		{"trace", zerolog.TraceLevel},
		{"debug", zerolog.DebugLevel},
		{"info", zerolog.InfoLevel},
		{"warn", zerolog.WarnLevel},
		{"warning", zerolog.WarnLevel},
		{"Warning", zerolog.WarnLevel},
		{"error", zerolog.ErrorLevel},
		{"fatal", zerolog.FatalLevel},
		{"panic", zerolog.PanicLevel},
	}
	for _, tt := range tests {
		if got, err := parseLevel(tt.value); err != nil || got != tt.want {
			t.Errorf("--log-level=%s: %v, %v; want %v", tt.value, got, err, tt.want)
		}
	}
}

func TestFormsThatWouldMeanSomethingElseAreRefusedWithTheirTranslation(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "Reloader's default text log format",
			args: []string{"--log-format="},
			want: `--log-format "": want json or console; for text, Reloader's default, give --log-format=console`},
		{name: "another log format",
			args: []string{"--log-format=text"},
			want: `--log-format "text": want json or console; for text, Reloader's default, give --log-format=console`},
		{name: "an unknown log level",
			args: []string{"--log-level=verbose"},
			want: `--log-level "verbose": want trace, debug, info, warn (or warning), error, fatal or panic`},
		{name: "an empty log level, which zerolog reads as silence",
			args: []string{"--log-level="},
			want: `--log-level "": want trace, debug, info, warn (or warning), error, fatal or panic`},
		{name: "a colon form with two colons, which Reloader cuts at the second",
			args: []string{"--namespace-selector=team:shop:eu"},
			want: `invalid value "team:shop:eu" for flag -namespace-selector: "team:shop:eu": Reloader's forms are key:value and key:*, with one colon; otherwise give a label selector, key=value`},
		{name: "a colon inside a set",
			args: []string{"--source-label-selector=tier in (a:b)"},
			want: `invalid value "tier in (a:b)" for flag -source-label-selector: "tier in (a:b)": Reloader's forms are key:value and key:*, with one colon; otherwise give a label selector, key=value`},
		{name: "both source kinds ignored across repeats, which Reloader refuses too",
			args: []string{"--resources-to-ignore=configMaps", "--resources-to-ignore=secrets"},
			want: `invalid value "secrets" for flag -resources-to-ignore: configMaps and secrets both: nothing would count; uninstall instead`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(t.Context(), append([]string{"webhook"}, tt.args...), &bytes.Buffer{}, &bytes.Buffer{})
			if err == nil || err.Error() != tt.want {
				t.Errorf("error:\n  %v\nwant:\n  %s", err, tt.want)
			}
		})
	}
}

// TestExplainReadsReloadersSelectorForms: explain takes the selectors the components
// were given, in Reloader's forms too.
func TestExplainReadsReloadersSelectorForms(t *testing.T) {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	sel := fs.String("namespace-selector", "", "")
	positional, err := parseInterspersed(fs, []string{"deployment/web", "--namespace-selector=team:shop"}, io.Discard, "")
	if err != nil || *sel != "team=shop" || len(positional) != 1 {
		t.Fatalf("parsed %q, selector %q, %v; want deployment/web, team=shop", positional, *sel, err)
	}
}
