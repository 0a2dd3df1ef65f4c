package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/confighash/confighash"
)

// TestRestarterExitStatus runs the binary, as the kubelet does: its restart rule
// matches the process's exit status, so main's mapping of errors to codes is part of
// what is tested.
func TestRestarterExitStatus(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "confighash")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tests := []struct {
		name string
		then func(t *testing.T, p *os.Process, tokenFile string)
		want int
	}{
		{"a changed token exits with the code that restarts the pod", func(t *testing.T, _ *os.Process, tokenFile string) {
			writeToken(t, tokenFile, "v1:bbbb")
		}, confighash.RestarterExitCode},
		{"SIGTERM exits 0", func(t *testing.T, p *os.Process, _ string) {
			if err := p.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tokenFile := filepath.Join(t.TempDir(), "token")
			writeToken(t, tokenFile, "v1:aaaa")
			cmd := exec.Command(bin, "restarter", "--token-file="+tokenFile)
			cmd.Env = append(os.Environ(), "CONFIGHASH_POLL=5ms")
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			lines := bufio.NewScanner(stderr)
			if !lines.Scan() || !strings.Contains(lines.Text(), "watching the restart token") {
				t.Fatalf("first line on stderr %q, want the start", lines.Text())
			}
			tt.then(t, cmd.Process, tokenFile)
			exited := make(chan error, 1)
			go func() {
				_, _ = io.Copy(io.Discard, stderr) // Wait must follow the last read
				exited <- cmd.Wait()
			}()
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				t.Fatal("confighash restarter did not exit")
			}
			if got := cmd.ProcessState.ExitCode(); got != tt.want {
				t.Fatalf("exit status %d, want %d", got, tt.want)
			}
		})
	}
}

// writeToken replaces the file at once, as the kubelet's swap of ..data does.
func writeToken(t *testing.T, path, token string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(token), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
