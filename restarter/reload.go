package restarter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/confighash/confighash"
)

// Reloads: instead of restarting the pod, the restarter tells its app to reload its
// files once the kubelet swapped them, and records the token it reloaded for in the
// applied file, which its readiness probe (Ready) compares with the pod's token. From
// a token's change until then, it is not Ready, nor is the pod: the watcher waits for
// it to be Ready again before it moves on, as it waits for a restarted pod.

// The times a reload keeps to.
const (
	// swapWait bounds the wait for the kubelet's swap of the volumes' files: it swaps
	// them in the same sync of the pod as the token's file, but a change may touch
	// no file the pod mounts, and then nothing swaps.
	swapWait = 30 * time.Second
	// unreadyAtLeast keeps the restarter not Ready long enough for its readiness
	// probe, run each second, to see it: the watcher knows the reload by it.
	unreadyAtLeast = 2 * time.Second
	// httpTimeout bounds an HTTP reload.
	httpTimeout = 10 * time.Second
)

// reloader tells the app to reload.
type reloader struct {
	reload      confighash.Reload
	volumesDir  string
	appliedFile string
	log         zerolog.Logger
	// swapped are the volumes' ..data targets when the app last loaded them, and
	// applied the token it holds the data of.
	swapped map[string]string
	applied string
	// post and signal are how it is told, replaced in tests.
	post   func(ctx context.Context, url string) error
	signal func(sig syscall.Signal) (int, error)
}

func newReloader(cfg Config) (*reloader, error) {
	r, err := confighash.ParseReload(cfg.Reload)
	if err != nil {
		return nil, fmt.Errorf("--reload=%s: %w", cfg.Reload, err)
	}
	if cfg.AppliedFile == "" {
		return nil, errors.New("a reload needs --applied-file")
	}
	rl := &reloader{reload: r, volumesDir: cfg.VolumesDir, appliedFile: cfg.AppliedFile, log: cfg.Log, post: post, signal: signalApps}
	rl.swapped = rl.targets()
	return rl, nil
}

// start records the token the app started with as applied, unless the applied file,
// which outlives a restart of the restarter alone, says it never reloaded for a
// later one: then it reloads now.
func (r *reloader) start(ctx context.Context, token string) error {
	applied, err := readBounded(r.appliedFile)
	if err == nil && len(applied) > 0 && string(applied) != token {
		return r.reloadFor(ctx, token, time.Now())
	}
	return r.apply(token)
}

// reloadFor waits for the kubelet's swap of the files, at least unreadyAtLeast after
// the token changed at since, tells the app, and records the token as applied.
func (r *reloader) reloadFor(ctx context.Context, token string, since time.Time) error {
	deadline := time.Now().Add(swapWait)
	for !r.swappedSince() && time.Now().Before(deadline) {
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	if err := sleep(ctx, time.Until(since.Add(unreadyAtLeast))); err != nil {
		return err
	}
	r.swapped = r.targets()
	if r.reload.Signal != "" {
		n, err := r.signal(signalNumber(r.reload.Signal))
		if err != nil {
			return fmt.Errorf("signal the app: %w", err)
		}
		r.log.Info().Str("signal", r.reload.Signal).Int("processes", n).Str("token", token).Msg("files swapped: the app was told to reload")
	} else {
		url := "http://127.0.0.1:" + strconv.Itoa(r.reload.Port) + r.reload.Path
		if err := r.post(ctx, url); err != nil {
			return fmt.Errorf("POST %s: %w", url, err)
		}
		r.log.Info().Str("url", url).Str("token", token).Msg("files swapped: the app was told to reload")
	}
	return r.apply(token)
}

// apply records the token as the one the app holds the data of.
func (r *reloader) apply(token string) error {
	tmp := r.appliedFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(token), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, r.appliedFile); err != nil {
		return err
	}
	r.applied = token
	return nil
}

// targets reads the ..data target of each volume's directory: the kubelet points it
// at a new directory when it swaps the volume's files.
func (r *reloader) targets() map[string]string {
	out := map[string]string{}
	if r.volumesDir == "" {
		return out
	}
	dirs, _ := os.ReadDir(r.volumesDir)
	for _, d := range dirs {
		if target, err := os.Readlink(filepath.Join(r.volumesDir, d.Name(), "..data")); err == nil {
			out[d.Name()] = target
		}
	}
	return out
}

// swappedSince reports whether a volume's files were swapped since the app loaded them.
func (r *reloader) swappedSince() bool {
	for name, target := range r.targets() {
		if r.swapped[name] != target {
			return true
		}
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// post asks the app to reload over HTTP: a 2xx answer is done.
func post(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, httpTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

func signalNumber(name string) syscall.Signal {
	return map[string]syscall.Signal{"SIGHUP": syscall.SIGHUP, "SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2}[name]
}

// signalApps signals the first process of each of the pod's other containers: in the
// pod's shared process namespace, those whose parent is outside it (the container
// runtime's), but the pod's own first process (its sandbox, 1) and the restarter.
func signalApps(sig syscall.Signal) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	self, n := os.Getpid(), 0
	var errs []error
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 || pid == self || parentOf(pid) != 0 {
			continue
		}
		if err := syscall.Kill(pid, sig); err != nil {
			errs = append(errs, fmt.Errorf("process %d: %w", pid, err))
			continue
		}
		n++
	}
	if n == 0 {
		return 0, errors.Join(append(errs, errors.New("no process to signal: is the pod's process namespace shared?"))...)
	}
	return n, nil
}

// parentOf reads a process's parent from /proc/PID/stat, -1 when it cannot: the field
// after the command, which is in parentheses and may hold any byte.
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	i := bytes.LastIndexByte(b, ')')
	if err != nil || i < 0 {
		return -1
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		return -1
	}
	return ppid
}

// Ready reports, for the restarter's readiness probe, whether the app reloaded for the
// pod's current token: nil when the applied file holds it.
func Ready(tokenFile, appliedFile string) error {
	token, err := readBounded(tokenFile)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	applied, err := readBounded(appliedFile)
	if err != nil {
		return err
	}
	if !bytes.Equal(token, applied) {
		return fmt.Errorf("reloading: the app holds the data of %q, the pod's token is %q", applied, token)
	}
	return nil
}
