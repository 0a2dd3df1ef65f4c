package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/rs/zerolog"
	kwhhttp "github.com/slok/kubewebhook/v2/pkg/http"
)

// MaxBodyBytes caps an AdmissionReview body. The API server limits objects to about
// 3 MiB and a review carries the object and the old object.
const MaxBodyBytes = 7 << 20

// NewHandler returns the HTTP handler that admits workloads with the mutator. It
// refuses bodies that are too large, not JSON, or not an AdmissionReview with a request
// with a 4xx before they reach the mutator, and turns a panic into a 500 (which the
// API server, with failurePolicy Ignore, treats as allowed).
func NewHandler(m *Mutator, log zerolog.Logger) (http.Handler, error) {
	inner, err := kwhhttp.HandlerFor(kwhhttp.HandlerConfig{Webhook: m, Logger: NewKubewebhookLogger(log)})
	if err != nil {
		return nil, err
	}
	return &guard{next: inner, metrics: m.metrics, log: log}, nil
}

// NewServeMux serves the mutator at Path, and its form for namespaces that opt every
// workload in at EveryPath.
func NewServeMux(m *Mutator, log zerolog.Logger) (*http.ServeMux, error) {
	mux := http.NewServeMux()
	for path, mutator := range map[string]*Mutator{Path: m, EveryPath: m.ForEveryWorkload()} {
		h, err := NewHandler(mutator, log)
		if err != nil {
			return nil, err
		}
		mux.Handle(path, h)
	}
	return mux, nil
}

type guard struct {
	next    http.Handler
	metrics Recorder
	log     zerolog.Logger
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			g.metrics.Panic()
			g.log.Error().Interface("panic", p).Msg("recovered a panic while admitting")
			http.Error(w, "internal error", http.StatusInternalServerError)
		}
	}()
	if r.Method != http.MethodPost {
		g.refuse(w, reasonMethod, "want POST", http.StatusMethodNotAllowed)
		return
	}
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		g.refuse(w, reasonContentType, "want Content-Type application/json", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		g.refuse(w, reasonTooLarge, "body too large", http.StatusRequestEntityTooLarge)
		return
	case err != nil:
		g.refuse(w, reasonRead, "could not read body", http.StatusBadRequest)
		return
	}
	// kubewebhook assumes a request is present; check before it dereferences it.
	if !hasRequest(body) {
		g.refuse(w, reasonMalformed, "not an AdmissionReview with a request", http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	g.next.ServeHTTP(w, r)
}

// hasRequest reports whether body is a JSON object with a "request" object whose
// "uid" is set. It reads only as far as that uid: the API server writes apiVersion,
// kind and request in that order, and the uid first in the request, so the objects
// that follow, most of the body, are decoded once, by kubewebhook.
func hasRequest(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	// find reads tokens of the object that starts at dec up to member name, skipping
	// the values of the others.
	find := func(name string) bool {
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return false
		}
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				return false
			}
			if key == name {
				return true
			}
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return false
			}
		}
		return false
	}
	if !find("request") || !find("uid") {
		return false
	}
	var uid string
	return dec.Decode(&uid) == nil && uid != ""
}

// Reasons a request is refused before admission, for metrics.
const (
	reasonMethod      = "method"
	reasonContentType = "content_type"
	reasonTooLarge    = "too_large"
	reasonRead        = "read"
	reasonMalformed   = "malformed"
)

var badRequestReasons = []string{reasonMethod, reasonContentType, reasonTooLarge, reasonRead, reasonMalformed}

func (g *guard) refuse(w http.ResponseWriter, reason, msg string, status int) {
	g.metrics.BadRequest(reason)
	http.Error(w, msg, status)
}
