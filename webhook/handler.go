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
	kwhmutating "github.com/slok/kubewebhook/v2/pkg/webhook/mutating"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// MaxBodyBytes caps an AdmissionReview body. The API server limits objects to about
// 3 MiB and a review carries the object and the old object.
const MaxBodyBytes = 7 << 20

// NewHandler returns the HTTP handler that admits workloads with the mutator. It
// refuses bodies that are too large, not JSON, or not an AdmissionReview with a request
// with a 4xx before they reach the mutator, and turns a panic into a 500 (which the
// API server, with failurePolicy Ignore, treats as allowed).
func NewHandler(m *Mutator, log zerolog.Logger) (http.Handler, error) {
	wh, err := kwhmutating.NewWebhook(kwhmutating.WebhookConfig{
		ID: "confighash",
		// Unstructured objects round-trip every field, so the JSON patch holds only our
		// annotations, whatever fields the workload's API version has.
		Obj:     &unstructured.Unstructured{},
		Mutator: m,
		Logger:  NewKubewebhookLogger(log),
	})
	if err != nil {
		return nil, err
	}
	inner, err := kwhhttp.HandlerFor(kwhhttp.HandlerConfig{Webhook: wh, Logger: NewKubewebhookLogger(log)})
	if err != nil {
		return nil, err
	}
	return &guard{next: inner, metrics: m.metrics, log: log}, nil
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
	var review struct {
		Request *struct {
			UID string `json:"uid"`
		} `json:"request"`
	}
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil || review.Request.UID == "" {
		g.refuse(w, reasonMalformed, "not an AdmissionReview with a request", http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	g.next.ServeHTTP(w, r)
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
