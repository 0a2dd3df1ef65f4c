package restarter

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/confighash/confighash"
)

// volume is a directory laid out as the kubelet's AtomicWriter writes a downward API
// volume: token is a symlink to ..data/token, ..data a symlink to a timestamped
// directory, and each write makes a new directory and renames a new ..data over the
// old one.
type volume struct {
	t      *testing.T
	dir    string
	writes int
}

func newVolume(t *testing.T) *volume {
	v := &volume{t: t, dir: t.TempDir()}
	if err := os.Symlink(filepath.Join("..data", "token"), v.path()); err != nil {
		t.Fatal(err)
	}
	return v
}

func (v *volume) path() string { return filepath.Join(v.dir, "token") }

// swap writes a new timestamped directory with fill and points ..data at it.
func (v *volume) swap(fill func(dir string) error) {
	v.t.Helper()
	v.writes++
	name := fmt.Sprintf("..2026_07_01_12_00_00.%09d", v.writes)
	if err := os.Mkdir(filepath.Join(v.dir, name), 0o755); err != nil {
		v.t.Fatal(err)
	}
	if err := fill(filepath.Join(v.dir, name)); err != nil {
		v.t.Fatal(err)
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(name, tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			v.t.Fatal(err)
		}
	}
}

// The states a poll may find the token file in.
func token(s string) func(*volume) {
	return func(v *volume) {
		v.swap(func(dir string) error { return os.WriteFile(filepath.Join(dir, "token"), []byte(s), 0o644) })
	}
}

func missing(v *volume) { v.swap(func(string) error { return nil }) }

// unreadable makes the token a directory: it opens but does not read, even as root.
func unreadable(v *volume) {
	v.swap(func(dir string) error { return os.Mkdir(filepath.Join(dir, "token"), 0o755) })
}

type poll struct {
	state   func(*volume)
	restart bool
}

func TestChanged(t *testing.T) {
	tests := []struct {
		name  string
		start func(*volume)
		polls []poll
	}{
		{"a new token restarts", token("a"), []poll{{token("b"), true}}},
		{"a rewrite with the same token restarts nothing", token("a"), []poll{{token("a"), false}, {token("a"), false}}},
		{"an emptied token restarts nothing", token("a"), []poll{{token(""), false}, {token("a"), false}}},
		{"a removed token file restarts nothing", token("a"), []poll{{missing, false}, {token("a"), false}}},
		{"a token written where the file was missing restarts", missing, []poll{{missing, false}, {token("a"), true}}},
		{"a token written where it was empty restarts", token(""), []poll{{token(""), false}, {token("a"), true}}},
		{"an unreadable token restarts nothing, and a change after it does", token("a"),
			[]poll{{unreadable, false}, {unreadable, false}, {token("a"), false}, {token("b"), true}}},
		{"a token unreadable at start: the first one read is the baseline", unreadable,
			[]poll{{token("a"), false}, {token("b"), true}}},
		{"a token longer than 1 KiB is taken as unchanged", token("a"),
			[]poll{{token(strings.Repeat("x", maxToken+1)), false}, {token(strings.Repeat("x", maxToken)), true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newVolume(t)
			tt.start(v)
			w := newWatch(Config{TokenFile: v.path()})
			for i, p := range tt.polls {
				p.state(v)
				if got := w.changed(); got != p.restart {
					t.Fatalf("poll %d: restart = %t, want %t", i+1, got, p.restart)
				}
			}
		})
	}
}

// lines are the JSON log lines of a test, decoded.
func lines(t *testing.T, log *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestAFileThatStaysUnreadableIsLoggedOnce(t *testing.T) {
	var log bytes.Buffer
	v := newVolume(t)
	token("a")(v)
	w := newWatch(Config{TokenFile: v.path(), Log: zerolog.New(&log)})
	for _, state := range []func(*volume){unreadable, unreadable, unreadable, token("a"), unreadable, token(strings.Repeat("x", 2*maxToken)), token(strings.Repeat("y", 2*maxToken))} {
		state(v)
		w.changed()
	}
	var got []string
	for _, l := range lines(t, &log) {
		got = append(got, l["message"].(string))
	}
	want := []string{"restart token unreadable; polling on", "restart token unreadable; polling on", "restart token too long: taken as unchanged"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("logged %q, want %q: once each time the file becomes unreadable or too long", got, want)
	}
}

// logLines hands each log line over as it is written.
type logLines chan []byte

func (c logLines) Write(p []byte) (int, error) {
	c <- bytes.Clone(p)
	return len(p), nil
}

// next decodes the next log line.
func (c logLines) next(t *testing.T) map[string]any {
	t.Helper()
	select {
	case l := <-c:
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no log line in 10 s")
		return nil
	}
}

// runAsync runs the restarter and returns the channel its exit code comes on.
func runAsync(ctx context.Context, t *testing.T, cfg Config) <-chan int {
	done := make(chan int, 1)
	go func() {
		code, err := Run(ctx, cfg)
		if err != nil {
			t.Error(err)
		}
		done <- code
	}()
	return done
}

func TestRunExitsToRestartThePodWhenTheTokenChanges(t *testing.T) {
	log := make(logLines, 4)
	v := newVolume(t)
	token("v1:aaaa")(v)
	done := runAsync(t.Context(), t, Config{TokenFile: v.path(), Poll: time.Millisecond, Log: zerolog.New(log)})
	if start := log.next(t); start["token"] != "v1:aaaa" {
		t.Fatalf("first logged %v, want the start with the token v1:aaaa", start)
	}
	token("v1:aaaa")(v)
	time.Sleep(20 * time.Millisecond) // polls of the rewritten, unchanged token
	token("v1:bbbb")(v)
	if change := log.next(t); change["old_token"] != "v1:aaaa" || change["new_token"] != "v1:bbbb" {
		t.Fatalf("logged %v; want one line naming the old and the new token", change)
	}
	select {
	case code := <-done:
		if code != confighash.RestarterExitCode {
			t.Fatalf("Run returned %d, want %d", code, confighash.RestarterExitCode)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the token changed")
	}
	if len(log) != 0 {
		t.Fatalf("logged %q after the change", <-log)
	}
}

// TestRunSeesTheKubeletsSwapAtOnce: the kubelet writes a new token at one look at the
// pod and sees the restarter's exit at the next, a second later; a token found at the
// next poll, up to a second later, often missed that look and cost the restart
// another second. The directory's swap wakes the restarter at once.
func TestRunSeesTheKubeletsSwapAtOnce(t *testing.T) {
	v := newVolume(t)
	token("v1:aaaa")(v)
	log := make(logLines, 4)
	done := runAsync(t.Context(), t, Config{TokenFile: v.path(), Poll: time.Hour, Log: zerolog.New(log)})
	if start := log.next(t); start["watched"] != true {
		t.Fatalf("first logged %v, want the start, watching the token's directory", start)
	}
	token("v1:bbbb")(v)
	start := time.Now()
	select {
	case code := <-done:
		if code != confighash.RestarterExitCode {
			t.Fatalf("Run returned %d, want %d", code, confighash.RestarterExitCode)
		}
		t.Logf("the swap seen in %v", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s of the swap, with its poll an hour")
	}
}

func TestRunReturnsZeroAtOnceWhenStopped(t *testing.T) {
	v := newVolume(t)
	token("a")(v)
	ctx, cancel := context.WithCancel(t.Context())
	done := runAsync(ctx, t, Config{TokenFile: v.path(), Poll: time.Hour})
	cancel()
	token("b")(v) // a change after a SIGTERM restarts nothing
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("Run returned %d, want 0", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return when its context was done")
	}
}

func TestRunRefusesABadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no token file":            {},
		"a negative poll interval": {TokenFile: "token", Poll: -time.Second},
	} {
		if _, err := Run(t.Context(), cfg); err == nil {
			t.Errorf("%s: Run returned no error", name)
		}
	}
}
