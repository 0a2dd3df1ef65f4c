// Command demoapp is the demo's application: it serves the value its pod was started
// with, from the MESSAGE environment variable, which a ConfigMap fills. An
// environment variable never changes in a running pod: the page changes only when
// the pod is replaced, which is what confighash is for.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	message := os.Getenv("MESSAGE")
	srv := &http.Server{
		Addr:              ":8080",
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintln(w, message)
		}),
	}
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
