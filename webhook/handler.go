package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/rs/zerolog"
	kwhhttp "github.com/slok/kubewebhook/v2/pkg/http"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	sigsjson "sigs.k8s.io/json"

	"github.com/confighash/confighash"
)

// MaxBodyBytes caps an AdmissionReview body. The largest object the API server keeps
// is etcd's request limit, 1.5 MiB (its own request bodies are capped at 3 MiB, and a
// create of more is refused by etcd unless it is a dry run); the review of an update
// carries it twice, object and oldObject, so 3 MiB. Half a MiB more covers the rest of
// the review (uid, kinds, userInfo with its groups and extras, options) and JSON's
// overhead over the stored encoding. A larger review is refused before it is read;
// with failurePolicy Ignore the write goes through unchanged and the watcher heals.
const MaxBodyBytes = 3<<20 + 512<<10

// Default bounds on the admissions handled at once (rules 9 and 11): by count,
// and by the bytes of their bodies, which are read, decoded and copied a few times
// each. A burst of 256 ordinary reviews of 10 KB passes; four reviews at MaxBodyBytes
// fill the bytes, which bounds the memory they take to tens of MiB.
const (
	DefaultMaxInFlight      = 256
	DefaultMaxInFlightBytes = 16 << 20
)

// bodyReadTimeout bounds the reading of a body, which holds its share of the bounds:
// the API server sends it at once.
const bodyReadTimeout = 5 * time.Second

// NewHandler returns the HTTP handler that admits workloads with the mutator. Before
// anything is decoded it sheds what is beyond the bounds on admissions in flight
// (allowed, unchanged), and refuses bodies that are too large, not JSON, or not an
// AdmissionReview with a request with a 4xx; a review of a namespace confighash does
// not act in, of a kind it does not handle, or of another operation is answered
// allowed, unchanged, without decoding the object. It turns a panic into a 500 (which
// the API server, with failurePolicy Ignore, treats as allowed).
func NewHandler(m *Mutator, log zerolog.Logger) (http.Handler, error) {
	inner, err := kwhhttp.HandlerFor(kwhhttp.HandlerConfig{Webhook: m, Logger: NewKubewebhookLogger(log)})
	if err != nil {
		return nil, err
	}
	return &guard{next: inner, mutator: m, metrics: m.cfg.Metrics, log: log}, nil
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
	mutator *Mutator
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
	// Before anything is read: a caller that is not the API server learns nothing.
	if c := g.mutator.cfg.Callers; c != nil && !c.Allows(r.RemoteAddr) {
		g.refuse(w, reasonCaller, "forbidden", http.StatusForbidden)
		return
	}
	if r.Method != http.MethodPost {
		g.refuse(w, reasonMethod, "want POST", http.StatusMethodNotAllowed)
		return
	}
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		g.refuse(w, reasonContentType, "want Content-Type application/json", http.StatusUnsupportedMediaType)
		return
	}
	if r.ContentLength > MaxBodyBytes {
		g.refuse(w, reasonTooLarge, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	weight := r.ContentLength
	if weight < 0 {
		weight = MaxBodyBytes // chunked: it may be as large as the cap
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyReadTimeout)) // not supported in tests
	// The first bytes say whose review it is, for the bounds' shares: no more is read
	// of one that is shed.
	prefix := make([]byte, shedPrefixBytes)
	n, _ := io.ReadFull(r.Body, prefix)
	prefix = prefix[:n]
	head := headOf(prefix)
	release, full := g.mutator.limits.acquire(head.namespace, weight)
	if release == nil {
		g.shed(w, head, full)
		return
	}
	defer release()
	body, err := readBody(w, r, prefix)
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
	p, ok := previewOf(body)
	if !ok {
		g.refuse(w, reasonMalformed, "not an AdmissionReview with a request", http.StatusBadRequest)
		return
	}
	if kind, ok := g.mutator.handles(p); !ok {
		// The API server sends none of these: answered without decoding the object.
		start := time.Now()
		answer(w, p.APIVersion, *p.Request.UID, nil)
		g.metrics.ObserveAdmission(kind, operationLabel(p.Request.Operation), ResultSkipped, time.Since(start))
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	g.next.ServeHTTP(w, r)
}

// readBody reads the body, its prefix read already, up to MaxBodyBytes, into a buffer
// of its declared length.
func readBody(w http.ResponseWriter, r *http.Request, prefix []byte) ([]byte, error) {
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + bytes.MinRead) // ReadFrom wants room to see the end
	}
	buf.Write(prefix)
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxBodyBytes-int64(len(prefix))))
	return buf.Bytes(), err
}

// answer writes an AdmissionReview that allows the request unchanged.
func answer(w http.ResponseWriter, apiVersion, uid string, warnings []string) {
	if apiVersion != admissionv1.SchemeGroupVersion.String() && apiVersion != "admission.k8s.io/v1beta1" {
		apiVersion = admissionv1.SchemeGroupVersion.String()
	}
	out, _ := json.Marshal(admissionv1.AdmissionReview{ // strings only: cannot fail
		TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: "AdmissionReview"},
		Response: &admissionv1.AdmissionResponse{UID: types.UID(uid), Allowed: true, Warnings: warnings},
	})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	_, _ = w.Write(out)
}

// preview is what the guard reads of a review before the object is decoded.
type preview struct {
	APIVersion string `json:"apiVersion"`
	Request    *struct {
		UID       *string                 `json:"uid"`
		Kind      metav1.GroupVersionKind `json:"kind"`
		Namespace string                  `json:"namespace"`
		Operation string                  `json:"operation"`
	} `json:"request"`
}

// previewOf reads the review's request, its uid, kind, namespace and operation. It
// reports whether body is one JSON object with exactly one "request" member, an
// object with exactly one non-empty "uid": what kubewebhook needs before it
// dereferences the request. Member names are matched exactly, as the API machinery's
// decoder matches them; a repeated member is refused, since which one wins would be
// the decoder's choice. It is one pass over the body, which skips the object without
// copying it.
func previewOf(body []byte) (preview, bool) {
	var p preview
	// Only repeated members are refused: the review has members this struct lacks.
	repeated, err := sigsjson.UnmarshalStrict(body, &p, sigsjson.DisallowDuplicateFields)
	return p, err == nil && len(repeated) == 0 && p.Request != nil && p.Request.UID != nil && *p.Request.UID != ""
}

// hasRequest reports whether previewOf accepts body.
func hasRequest(body []byte) bool { _, ok := previewOf(body); return ok }

// handles reports whether the mutator may act on the review: a create or update of a
// kind it handles (a Job's, only its create), in a namespace it acts in. Otherwise it
// answers allowed, unchanged, without reading the object. kind is for metrics: the
// kind's name, or "unknown".
func (m *Mutator) handles(p preview) (kind string, ok bool) {
	k, err := m.cfg.Kinds.Lookup(schema.GroupVersionKind(p.Request.Kind))
	pod := isPod(p.Request.Kind.Group, p.Request.Kind.Version, p.Request.Kind.Kind)
	switch {
	case pod:
		k = confighash.PodKind // admitted at its creation, to be restarted in place
	case err != nil:
		return "unknown", false
	}
	switch p.Request.Operation {
	case string(admissionv1.Create):
	case string(admissionv1.Update):
		if k.Recreated() || pod {
			return k.Kind, false // its template cannot change: any write to it would be refused
		}
	default:
		return k.Kind, false
	}
	if m.cfg.Gate != nil && m.cfg.Gate.Mode(p.Request.Namespace) == confighash.ModeOff {
		return k.Kind, false // the API server does not send these: read nothing for others
	}
	return k.Kind, true
}

// isPod reports whether a group, version and kind are a core v1 Pod's.
func isPod(group, version, kind string) bool {
	return group == "" && version == "v1" && kind == confighash.PodKind.Kind
}

// operationLabel is the operation for metrics: CREATE, UPDATE or, from a caller that
// is not the API server, "unknown".
func operationLabel(op string) string {
	if op == string(admissionv1.Create) || op == string(admissionv1.Update) {
		return op
	}
	return "unknown"
}

// Reasons a request is refused before admission, for metrics.
const (
	reasonMethod      = "method"
	reasonContentType = "content_type"
	reasonTooLarge    = "too_large"
	reasonRead        = "read"
	reasonMalformed   = "malformed"
	reasonCaller      = "caller"
)

var badRequestReasons = []string{reasonMethod, reasonContentType, reasonTooLarge, reasonRead, reasonMalformed, reasonCaller}

func (g *guard) refuse(w http.ResponseWriter, reason, msg string, status int) {
	g.metrics.BadRequest(reason)
	http.Error(w, msg, status)
}
