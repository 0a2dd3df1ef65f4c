package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zerologr"
	"github.com/rs/zerolog"
	"k8s.io/klog/v2"
)

// newLogger returns the process logger, JSON or console, and routes klog (client-go,
// leader election) through it.
func newLogger(w io.Writer, format, level, component string) (zerolog.Logger, logr.Logger, error) {
	lvl, err := parseLevel(level)
	if err != nil {
		return zerolog.Logger{}, logr.Logger{}, err
	}
	// Durations in seconds agree with the _seconds metrics.
	zerolog.DurationFieldUnit = time.Second
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	default:
		return zerolog.Logger{}, logr.Logger{}, fmt.Errorf("--log-format %q: want json or console; for text, Reloader's default, give --log-format=console", format)
	}
	log := zerolog.New(w).Level(lvl).With().Timestamp().Str("component", component).Logger()
	lr := zerologr.New(&log)
	klog.SetLogger(lr)
	return log, lr, nil
}

// levels are the values of --log-level: Reloader's (logrus's) levels, which are
// zerolog's but for warning. zerolog's own parser would also take "", "disabled" and
// numbers, which silence the log or mean nothing to a reader of the flags.
var levels = map[string]zerolog.Level{
	"trace": zerolog.TraceLevel, "debug": zerolog.DebugLevel, "info": zerolog.InfoLevel,
	"warn": zerolog.WarnLevel, "warning": zerolog.WarnLevel, "error": zerolog.ErrorLevel,
	"fatal": zerolog.FatalLevel, "panic": zerolog.PanicLevel,
}

// parseLevel reads --log-level, in any case as logrus does.
func parseLevel(s string) (zerolog.Level, error) {
	if l, ok := levels[strings.ToLower(s)]; ok {
		return l, nil
	}
	return zerolog.NoLevel, fmt.Errorf("--log-level %q: want trace, debug, info, warn (or warning), error, fatal or panic", s)
}
