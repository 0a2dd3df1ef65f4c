package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantOut string
		wantErr error
	}{
		{"no command prints usage", nil, "Usage:", nil},
		{"help prints usage", []string{"help"}, "Commands:", nil},
		{"version prints the build version", []string{"version"}, "confighash dev", nil},
		{"an unknown command is an error", []string{"frobnicate"}, "", errUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), tt.args, &stdout, &stderr)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("run(%q) error = %v, want %v", tt.args, err, tt.wantErr)
			}
			if !strings.Contains(stdout.String(), tt.wantOut) {
				t.Fatalf("run(%q) printed %q, want it to contain %q", tt.args, stdout.String(), tt.wantOut)
			}
		})
	}
}
