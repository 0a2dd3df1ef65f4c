package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestServeDrainsInFlightRequestsOnShutdown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(started)
		time.Sleep(300 * time.Millisecond) // an admission in flight
		_, _ = w.Write([]byte("done"))
	})}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- serve(ctx, srv, ln, false, 5*time.Second) }()

	got := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String())
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- string(b)
	}()
	<-started
	cancel() // SIGTERM arrives mid-request
	if body := <-got; body != "done" {
		t.Fatalf("in-flight request got %q, want it to finish with \"done\"", body)
	}
	if err := <-served; err != nil {
		t.Fatalf("serve returned %v, want nil on a graceful shutdown", err)
	}
	if _, err := http.Get("http://" + ln.Addr().String()); err == nil {
		t.Fatal("the server still accepts requests after shutdown")
	}
}

func TestDrainAfterKeepsServingForTheDelay(t *testing.T) {
	parent, sigterm := context.WithCancel(t.Context())
	var drainingAt time.Time
	drained := make(chan struct{})
	ctx := drainAfter(parent, 300*time.Millisecond, func() { drainingAt = time.Now(); close(drained) })
	start := time.Now()
	sigterm()
	<-drained
	if ctx.Err() != nil {
		t.Fatal("the servers' context ended with SIGTERM, before the delay")
	}
	<-ctx.Done()
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("the servers' context ended %s after SIGTERM, want at least the 300ms delay", waited)
	}
	if drainingAt.Sub(start) > 100*time.Millisecond {
		t.Fatalf("not ready %s after SIGTERM, want at once", drainingAt.Sub(start))
	}
}

func TestDrainingClosesEachConnectionAfterItsAnswer(t *testing.T) {
	var draining atomic.Bool
	srv := httptest.NewServer(closeWhenDraining(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}), &draining))
	defer srv.Close()
	get := func() *http.Response {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := get(); resp.Close {
		t.Fatal("a connection is closed before draining")
	}
	draining.Store(true)
	if resp := get(); !resp.Close {
		t.Fatal("draining: the answer does not close its connection")
	}
}

func TestReadyzWaitsForEveryCheck(t *testing.T) {
	ready := false
	h := opsHandler(newRegistry(), false, func() bool { return true }, func() bool { return ready })
	status := func(path string) int {
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, path, nil))
		return rr.Code
	}
	if got := status("/readyz"); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d before the last check passes, want 503", got)
	}
	if got := status("/healthz"); got != http.StatusOK {
		t.Fatalf("/healthz = %d, want 200 while the process runs", got)
	}
	ready = true
	if got := status("/readyz"); got != http.StatusOK {
		t.Fatalf("/readyz = %d, want 200", got)
	}
}

func TestProfilesOnlyWithProfiling(t *testing.T) {
	get := func(profiling bool) *httptest.ResponseRecorder {
		rr := httptest.NewRecorder()
		opsHandler(newRegistry(), profiling).ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/debug/pprof/heap?gc=1&debug=1", nil))
		return rr
	}
	if rr := get(false); rr.Code != http.StatusNotFound {
		t.Fatalf("without --profiling: %d, want 404", rr.Code)
	}
	if rr := get(true); rr.Code != http.StatusOK || !strings.Contains(rr.Body.String(), "# HeapAlloc = ") {
		t.Fatalf("with --profiling: %d, want 200 and the heap after a collection:\n%.300s", rr.Code, rr.Body.String())
	}
}

// stamp sets the build's version and revision as -ldflags -X would, for one test.
func stamp(t *testing.T, v, rev string) {
	oldVersion, oldRevision := version, revision
	version, revision = v, rev
	t.Cleanup(func() { version, revision = oldVersion, oldRevision })
}

func TestVersionAnswersTheStampedBuild(t *testing.T) {
	stamp(t, "v1.2.3", "0123456789ab")
	rr := httptest.NewRecorder()
	opsHandler(newRegistry(), false).ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/version", nil))
	if rr.Code != http.StatusOK || rr.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("/version = %d, %q; want 200, application/json", rr.Code, rr.Header().Get("Content-Type"))
	}
	var got map[string]string
	if err := json.Unmarshal(rr.Body.Bytes(), &got); err != nil {
		t.Fatalf("/version answered %q: %v", rr.Body.String(), err)
	}
	want := map[string]string{"version": "v1.2.3", "revision": "0123456789ab", "goVersion": runtime.Version(), "platform": runtime.GOOS + "/" + runtime.GOARCH}
	if len(got) != len(want) {
		t.Errorf("/version = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("/version %s = %q, want %q", k, got[k], v)
		}
	}
}

func TestBuildInfoIsExportedWithTheStampedBuild(t *testing.T) {
	stamp(t, "v1.2.3", "0123456789ab")
	want := `
# HELP confighash_build_info Always 1; the labels say which build runs.
# TYPE confighash_build_info gauge
confighash_build_info{goversion="` + runtime.Version() + `",revision="0123456789ab",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(newRegistry(), strings.NewReader(want), "confighash_build_info"); err != nil {
		t.Fatal(err)
	}
}
