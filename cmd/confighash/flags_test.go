package main

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"
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
