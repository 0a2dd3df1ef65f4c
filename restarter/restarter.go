// Package restarter is the sidecar of restart in place. It runs in each pod restarted
// in place, with no API credentials, and reads the pod's restart token from a
// downward API file: when the token changes it exits with the domain's
// RestarterExitCode, and the pod's restart rule on that code has the kubelet restart
// every container of the pod, which start with the current data.
package restarter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/confighash/confighash"
)

// maxToken bounds a read of the token file. Tokens are short hashes, but whoever may
// annotate the pod writes the file.
const maxToken = 1 << 10

// Config is what Run needs.
type Config struct {
	// TokenFile is the downward API file of the pod's restart token. Required.
	TokenFile string
	// Poll is how often the file is read besides each change of its directory;
	// 1 s. Where the directory's changes cannot be watched, the poll alone finds
	// the token.
	Poll time.Duration
	// Reload, when set ("signal:SIGHUP", "http:8080/-/reload"), tells the app to
	// reload its files instead of restarting the pod, once the kubelet swapped those
	// of the volumes in VolumesDir (one directory each), and records each token it
	// reloaded for in AppliedFile, for the readiness probe (Ready). A reload that
	// fails restarts the pod.
	Reload, VolumesDir, AppliedFile string
	Log                             zerolog.Logger
}

func (c *Config) defaults() error {
	if c.TokenFile == "" {
		return errors.New("no token file")
	}
	if c.Poll < 0 {
		return fmt.Errorf("poll interval %s: want more than 0", c.Poll)
	}
	if c.Poll == 0 {
		c.Poll = time.Second
	}
	return nil
}

// Run reads the token at start, then polls it until it changes to another one that
// is not empty: it returns confighash.RestarterExitCode then, and 0 once ctx is done.
// The error is a configuration error only.
func Run(ctx context.Context, cfg Config) (int, error) {
	if err := cfg.defaults(); err != nil {
		return 0, err
	}
	w := newWatch(cfg)
	var r *reloader
	if cfg.Reload != "" {
		var err error
		if r, err = newReloader(cfg); err != nil {
			return 0, err
		}
		if err := r.start(ctx, w.baseline); err != nil {
			return reloadFailed(ctx, cfg.Log, err)
		}
	}
	e := cfg.Log.Info().Str("token_file", cfg.TokenFile).Dur("poll", cfg.Poll).Str("reload", cfg.Reload)
	if w.known {
		e = e.Str("token", w.baseline)
	}
	swaps, err := watchDir(ctx, filepath.Dir(cfg.TokenFile))
	if err != nil {
		cfg.Log.Warn().Err(err).Msg("the token's directory cannot be watched: the poll alone finds a new token")
	}
	e.Bool("watched", swaps != nil).Msg("watching the restart token")
	t := time.NewTicker(cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0, nil
		case <-swaps:
		case <-t.C:
		}
		changed := w.changed()
		if r != nil && !changed && w.known && r.applied != w.baseline {
			// The first token read, after the start could not: the app holds it.
			if err := r.apply(w.baseline); err != nil {
				cfg.Log.Warn().Err(err).Msg("could not record the token the app holds")
			}
		}
		if !changed {
			continue
		}
		if r == nil {
			return confighash.RestarterExitCode, nil
		}
		token := w.latest
		if err := r.reloadFor(ctx, token, time.Now()); err != nil {
			return reloadFailed(ctx, cfg.Log, err)
		}
		w.baseline = token
	}
}

// reloadFailed restarts the pod in place: the app could not be told to reload.
func reloadFailed(ctx context.Context, log zerolog.Logger, err error) (int, error) {
	if ctx.Err() != nil {
		return 0, nil
	}
	log.Warn().Err(err).Msg("the reload failed: restarting the pod's containers instead")
	return confighash.RestarterExitCode, nil
}

// watch compares the token file with the token the containers started with.
type watch struct {
	cfg      Config
	baseline string
	// known is false while no read succeeded: the first token read is then the
	// baseline, since a read error must never restart the pod.
	known bool
	// trouble is the problem logged last, so that a file that stays unreadable is
	// logged once; "" after a good read.
	trouble string
	// latest is the token changed last reported.
	latest string
}

func newWatch(cfg Config) *watch {
	w := &watch{cfg: cfg}
	w.baseline, w.known = w.read()
	return w
}

// changed reads the token and reports whether it differs from the baseline and is
// not empty: an annotation removed or not yet written restarts nothing.
func (w *watch) changed() bool {
	token, ok := w.read()
	switch {
	case !ok:
		return false
	case !w.known:
		w.baseline, w.known = token, true
		w.cfg.Log.Info().Str("token", token).Msg("restart token readable: it is the baseline")
		return false
	case token == "" || token == w.baseline:
		return false
	}
	w.cfg.Log.Info().Str("old_token", w.baseline).Str("new_token", token).Msg("restart token changed")
	w.latest = token
	return true
}

// read returns the token; ok is false when the file cannot be read or is too long.
// It opens the file by path each time: the kubelet swaps the ..data symlink of the
// volume's directory (AtomicWriter), so an open file would never change. A missing
// file is an empty token.
func (w *watch) read() (token string, ok bool) {
	b, err := readBounded(w.cfg.TokenFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		w.trouble = ""
		return "", true
	case err != nil:
		if w.fresh(err.Error()) {
			w.cfg.Log.Warn().Err(err).Msg("restart token unreadable; polling on")
		}
		return "", false
	case len(b) > maxToken:
		if w.fresh("too long") {
			w.cfg.Log.Warn().Str("token_file", w.cfg.TokenFile).Int("max_bytes", maxToken).Msg("restart token too long: taken as unchanged")
		}
		return "", false
	}
	w.trouble = ""
	return string(b), true
}

// fresh reports whether trouble is not the problem logged last, and makes it so.
func (w *watch) fresh(trouble string) bool {
	if trouble == w.trouble {
		return false
	}
	w.trouble = trouble
	return true
}

// readBounded reads at most maxToken+1 bytes of path: one more tells a token too long.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxToken+1))
}
