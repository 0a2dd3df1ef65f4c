// Command demoapp is the demo's application: it serves the value its pod was started
// with, from the MESSAGE environment variable, which a ConfigMap fills, or from a file. An
// environment variable never changes in a running pod: the page changes only when
// the pod's containers start again, which is what confighash is for.
//
// With STATE_DIR set, each start appends a line to STATE_DIR/starts, and /starts
// serves how many there are: on a volume, what the pod's starts kept.
//
// A bad configuration, as the tests of a bake play it: CRASH_AFTER, a duration, makes it
// exit with code 1 that long after its start; ERROR_RATIO is what /metrics serves as
// demo_error_ratio, for a Prometheus to see.
package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	var message atomic.Value
	message.Store(os.Getenv("MESSAGE"))
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, message.Load()) })
	// With MESSAGE_FILE set, the message is that file's, read at the start and read
	// again on SIGHUP or a POST to /-/reload, as an app that reloads its files does.
	if file := os.Getenv("MESSAGE_FILE"); file != "" {
		load := func() error {
			b, err := os.ReadFile(file)
			if err == nil {
				message.Store(strings.TrimSpace(string(b)))
			}
			return err
		}
		if err := load(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		go func() {
			for range hup {
				if err := load(); err != nil {
					fmt.Fprintln(os.Stderr, err)
				}
			}
		}()
		mux.HandleFunc("POST /-/reload", func(w http.ResponseWriter, _ *http.Request) {
			if err := load(); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
		})
	}
	if dir := os.Getenv("STATE_DIR"); dir != "" {
		starts := filepath.Join(dir, "starts")
		if err := appendLine(starts, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		mux.HandleFunc("/starts", func(w http.ResponseWriter, _ *http.Request) {
			b, err := os.ReadFile(starts)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			fmt.Fprintln(w, bytes.Count(b, []byte("\n")))
		})
	}
	errorRatio := cmp.Or(os.Getenv("ERROR_RATIO"), "0")
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# TYPE demo_error_ratio gauge\ndemo_error_ratio %s\n", errorRatio)
	})
	if after := os.Getenv("CRASH_AFTER"); after != "" {
		d, err := time.ParseDuration(after)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		time.AfterFunc(d, func() {
			fmt.Fprintf(os.Stderr, "CRASH_AFTER=%s: exiting\n", after)
			os.Exit(1)
		})
	}
	srv := &http.Server{Addr: ":8080", ReadHeaderTimeout: 5 * time.Second, Handler: mux}
	// As PID 1 it would ignore SIGTERM and keep serving old pages on open
	// connections until killed: it closes them when the pod is replaced.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, line)
	return errors.Join(err, f.Close())
}
