package main

import (
	"fmt"
	"io"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zerologr"
	"github.com/rs/zerolog"
	"k8s.io/klog/v2"
)

// newLogger returns the process logger, JSON or console, and routes klog (client-go,
// leader election) through it.
func newLogger(w io.Writer, format, level, component string) (zerolog.Logger, logr.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return zerolog.Logger{}, logr.Logger{}, fmt.Errorf("--log-level: %w", err)
	}
	// Durations in seconds agree with the _seconds metrics.
	zerolog.DurationFieldUnit = time.Second
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	default:
		return zerolog.Logger{}, logr.Logger{}, fmt.Errorf("--log-format: want json or console, got %q", format)
	}
	log := zerolog.New(w).Level(lvl).With().Timestamp().Str("component", component).Logger()
	lr := zerologr.New(&log)
	klog.SetLogger(lr)
	return log, lr, nil
}
