package restarter

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/confighash/confighash"
)

// reloadPod is a token volume, a volume of the app's files, and the applied file, as
// the webhook lays them out for a restarter that reloads.
type reloadPod struct {
	token, files *volume
	volumesDir   string
	applied      string
}

func newReloadPod(t *testing.T) *reloadPod {
	p := &reloadPod{token: newVolume(t), volumesDir: t.TempDir(), applied: filepath.Join(t.TempDir(), "applied")}
	p.files = &volume{t: t, dir: filepath.Join(p.volumesDir, "conf")}
	if err := os.Mkdir(p.files.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	token("v1:aaaa")(p.token)
	p.files.swap(func(dir string) error { return os.WriteFile(filepath.Join(dir, "message"), []byte("one"), 0o644) })
	return p
}

// run runs the restarter, reloading over HTTP at url's port, until it returns.
func (p *reloadPod) run(t *testing.T, url string) <-chan int {
	_, port, _ := net.SplitHostPort(url[len("http://"):])
	done := make(chan int, 1)
	go func() {
		code, err := Run(t.Context(), Config{TokenFile: p.token.path(), Poll: 10 * time.Millisecond, Reload: "http:" + port + "/-/reload",
			VolumesDir: p.volumesDir, AppliedFile: p.applied, Log: zerolog.Nop()})
		if err != nil {
			t.Error(err)
		}
		done <- code
	}()
	return done
}

// TestAReloadWaitsForTheFilesThenTellsTheApp: a changed token makes the restarter
// wait for the kubelet's swap of the app's files, then POST the app's reload URL once,
// on 127.0.0.1; it is not Ready from the change until then, and Ready after; the pod
// is not restarted.
func TestAReloadWaitsForTheFilesThenTellsTheApp(t *testing.T) {
	var reloads atomic.Int32
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/-/reload" {
			reloads.Add(1)
		}
	}))
	defer app.Close()
	p := newReloadPod(t)
	done := p.run(t, app.URL)
	waitUntil(t, "Ready at start", func() bool { return Ready(p.token.path(), p.applied) == nil })

	token("v1:bbbb 0")(p.token)
	waitUntil(t, "not Ready once the token changed", func() bool { return Ready(p.token.path(), p.applied) != nil })
	time.Sleep(500 * time.Millisecond)
	if n := reloads.Load(); n != 0 {
		t.Fatalf("%d reloads before the files were swapped, want none", n)
	}
	swapped := time.Now()
	p.files.swap(func(dir string) error { return os.WriteFile(filepath.Join(dir, "message"), []byte("two"), 0o644) })
	waitUntil(t, "Ready after the reload", func() bool { return Ready(p.token.path(), p.applied) == nil })
	if n := reloads.Load(); n != 1 {
		t.Errorf("%d reloads, want 1", n)
	}
	t.Logf("Ready %v after the swap", time.Since(swapped).Round(time.Millisecond))
	select {
	case code := <-done:
		t.Fatalf("the restarter exited %d: the pod would restart", code)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestAFailedReloadRestartsThePod: an app that answers its reload with an error, or
// does not listen, has its pod restarted in place instead.
func TestAFailedReloadRestartsThePod(t *testing.T) {
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad config", http.StatusInternalServerError)
	}))
	defer failing.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	for name, url := range map[string]string{"answers 500": failing.URL, "does not listen": dead.URL} {
		t.Run(name, func(t *testing.T) {
			p := newReloadPod(t)
			done := p.run(t, url)
			waitUntil(t, "Ready at start", func() bool { return Ready(p.token.path(), p.applied) == nil })
			token("v1:bbbb 0")(p.token)
			p.files.swap(func(dir string) error { return os.WriteFile(filepath.Join(dir, "message"), []byte("two"), 0o644) })
			select {
			case code := <-done:
				if code != confighash.RestarterExitCode {
					t.Errorf("exited %d, want %d", code, confighash.RestarterExitCode)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the restarter did not restart the pod")
			}
		})
	}
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("not %s within 10 s", what)
}
