package webhook

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/rs/zerolog"
	kwhhttp "github.com/slok/kubewebhook/v2/pkg/http"
	sigsjson "sigs.k8s.io/json"
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
	return &guard{next: inner, metrics: m.cfg.Metrics, log: log}, nil
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

// hasRequest reports whether body is one JSON object with exactly one "request"
// member, an object with exactly one non-empty "uid": what kubewebhook needs before
// it dereferences the request. Member names are matched exactly, as the API
// machinery's decoder matches them; a repeated member is refused, since which one
// wins would be the decoder's choice. It is one pass over the body, which skips the
// object without copying it.
func hasRequest(body []byte) bool {
	var review struct {
		Request *struct {
			UID *string `json:"uid"`
		} `json:"request"`
	}
	// Only repeated members are refused: the review has members this struct lacks.
	repeated, err := sigsjson.UnmarshalStrict(body, &review, sigsjson.DisallowDuplicateFields)
	return err == nil && len(repeated) == 0 && review.Request != nil && review.Request.UID != nil && *review.Request.UID != ""
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
