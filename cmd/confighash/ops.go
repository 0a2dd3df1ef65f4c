package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// newRegistry returns a private registry with the process and Go collectors and
// confighash_build_info, which tells the builds of a mixed rollout apart.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	b := currentBuild()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector(),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "confighash_build_info",
			Help:        "Always 1; the labels say which build runs.",
			ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
		}, func() float64 { return 1 }))
	return reg
}

// opsHandler serves /healthz (the process runs), /readyz (every check passes),
// /version (the build, as JSON) and /metrics, on the plain-HTTP ops port; with
// profiling, Go's /debug/pprof/ too.
func opsHandler(reg *prometheus.Registry, profiling bool, ready ...func() bool) http.Handler {
	mux := http.NewServeMux()
	if profiling {
		// heap?gc=1&debug=1 collects first: the live heap, as the benchmarks read it.
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		for _, ok := range ready {
			if !ok() {
				http.Error(w, "not ready", http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(currentBuild())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// server is an HTTP server bound to its address, named in logs.
type server struct {
	name  string
	srv   *http.Server
	ln    net.Listener
	tlsOn bool
}

// listen binds srv to addr now, so that a taken port fails the start.
func listen(name, addr string, srv *http.Server, tlsOn bool) (*server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for %s: %w", name, err)
	}
	return &server{name: name, srv: srv, ln: ln, tlsOn: tlsOn}, nil
}

// listenOps binds the ops server: /healthz, /readyz with ready, /version, /metrics
// from reg, and with profiling /debug/pprof/.
func listenOps(addr string, reg *prometheus.Registry, profiling bool, ready ...func() bool) (*server, error) {
	return listen("ops", addr, &http.Server{Handler: opsHandler(reg, profiling, ready...), ReadHeaderTimeout: 5 * time.Second}, false)
}

// run serves until ctx is done, then shuts down within timeout.
func (s *server) run(ctx context.Context, log zerolog.Logger, timeout time.Duration) error {
	log.Info().Str("server", s.name).Str("address", s.ln.Addr().String()).Msg("server running")
	defer log.Info().Str("server", s.name).Msg("server stopped")
	return serve(ctx, s.srv, s.ln, s.tlsOn, timeout)
}

// drainAfter returns a context that ends delay after parent does; draining runs as
// parent ends. Servers run on it keep serving for delay after SIGTERM.
func drainAfter(parent context.Context, delay time.Duration, draining func()) context.Context {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	go func() {
		<-parent.Done()
		draining()
		time.Sleep(delay)
		cancel()
	}()
	return ctx
}

// closeWhenDraining asks each client to close its connection after the answer once
// draining: a kept-alive connection outlives the endpoint that routed it, and closing
// it idle at shutdown races the next request the client sends on it.
func closeWhenDraining(h http.Handler, draining *atomic.Bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if draining.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// serve runs srv on ln until ctx is done, then shuts it down gracefully: in-flight
// requests finish within timeout.
func serve(ctx context.Context, srv *http.Server, ln net.Listener, tlsOn bool, timeout time.Duration) error {
	errc := make(chan error, 1)
	go func() {
		var err error
		if tlsOn {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}
