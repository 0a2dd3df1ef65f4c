package webhook

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/metrics"
)

// Recorder records the webhook's metrics.
type Recorder interface {
	// ObserveAdmission records one admission of a workload kind.
	ObserveAdmission(kind, operation string, result Result, d time.Duration)
	// SourceRead records where one source was read from: ReadFromCache or ReadFromLive.
	SourceRead(kind confighash.SourceKind, from string)
	// VersionRead records one GET of a source's current version, which proves the
	// cache current for every admission that shares it.
	VersionRead(kind confighash.SourceKind)
	// BadRequest records a request refused before admission, by reason.
	BadRequest(reason string)
	// Panic records a recovered panic.
	Panic()
	// Shed records an admission answered at once, allowed unchanged (or 429 without a
	// uid), because the admissions in flight were at a bound: "count" or "bytes".
	Shed(limit string)
	// SnapshotsCapped records a pinned workload admitted unpinned, its namespace's
	// snapshots being at their cap: "count" or "bytes".
	SnapshotsCapped(limit string)
}

// NoopRecorder records nothing.
type NoopRecorder struct{}

var _ Recorder = NoopRecorder{}

func (NoopRecorder) ObserveAdmission(string, string, Result, time.Duration) {}
func (NoopRecorder) SourceRead(confighash.SourceKind, string)               {}
func (NoopRecorder) VersionRead(confighash.SourceKind)                      {}
func (NoopRecorder) BadRequest(string)                                      {}
func (NoopRecorder) Panic()                                                 {}
func (NoopRecorder) SnapshotsCapped(string)                                 {}
func (NoopRecorder) Shed(string)                                            {}

// ResultAnnotationsTooLarge: the hash or the record would take the workload over the
// API server's bound on annotations: allowed unchanged.
const ResultAnnotationsTooLarge Result = "annotations_too_large"

// overBound returns the result of an admission left unchanged for a bound, by which.
func overBound(err error) Result {
	if errors.Is(err, confighash.ErrAnnotationsTooLarge) {
		return ResultAnnotationsTooLarge
	}
	return ResultTooLarge
}

// Where a source is read from.
const (
	ReadFromCache = "cache"
	ReadFromLive  = "live"
)

// admissionBuckets line up with the API server's own webhook latency buckets, from a
// millisecond to its ten-second webhook timeout.
var admissionBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// PrometheusRecorder records to Prometheus. Labels are low-cardinality: never a
// namespace or a name.
type PrometheusRecorder struct {
	duration    *prometheus.HistogramVec
	mutations   *prometheus.CounterVec
	reads       *prometheus.CounterVec
	versions    *prometheus.CounterVec
	badRequests *prometheus.CounterVec
	panics      prometheus.Counter
	capped      *prometheus.CounterVec
	shed        *prometheus.CounterVec
}

var _ Recorder = (*PrometheusRecorder)(nil)

// NewPrometheusRecorder registers the webhook's metrics with reg.
func NewPrometheusRecorder(reg prometheus.Registerer) (*PrometheusRecorder, error) {
	m := metrics.On(reg)
	r := &PrometheusRecorder{
		duration:    m.HistogramVec("confighash_webhook_admission_duration_seconds", "Time to admit one workload, by operation.", admissionBuckets, "operation"),
		mutations:   m.CounterVec("confighash_webhook_mutations_total", "Workload admissions by kind and result: patched, unchanged, skipped (not opted in), error (allowed unchanged).", "kind", "result"),
		reads:       m.CounterVec("confighash_webhook_source_reads_total", "ConfigMaps and Secrets read during admission, by kind and where from: cache or live.", "kind", "from"),
		versions:    m.CounterVec("confighash_webhook_version_reads_total", "Consistent metadata-only GETs of a source's current version, sent to prove the cache current for a create or update; admissions that read the same source at the same time share one.", "kind"),
		badRequests: m.CounterVec("confighash_webhook_bad_requests_total", "Requests refused before admission, by reason.", "reason"),
		panics:      m.Counter("confighash_webhook_panics_total", "Panics recovered while handling a request; the request was allowed unchanged."),
		capped:      m.CounterVec("confighash_webhook_snapshots_capped_total", "Pinned workloads admitted unpinned because their namespace's snapshots were at their cap, by the cap reached: count or bytes.", "limit"),
		shed:        m.CounterVec("confighash_webhook_admissions_shed_total", "Admissions answered at once, allowed unchanged and unread (429 when the uid was not in the first bytes), because the admissions in flight were at their bound, by the bound reached: count or bytes.", "limit"),
	}
	if err := m.Err(); err != nil {
		return nil, err
	}
	// Every series exists from the start, at zero, so that rate() and increase()
	// see the first event and alerts need no absent().
	for _, op := range []string{"CREATE", "UPDATE"} {
		r.duration.WithLabelValues(op)
	}
	for _, k := range confighash.Builtin {
		for _, res := range []Result{ResultPatched, ResultUnchanged, ResultSkipped, ResultError, ResultDeferred, ResultTooLarge, ResultAnnotationsTooLarge} {
			r.mutations.WithLabelValues(k.Kind, string(res))
		}
	}
	for _, k := range []confighash.SourceKind{confighash.ConfigMap, confighash.Secret} {
		for _, from := range []string{ReadFromCache, ReadFromLive} {
			r.reads.WithLabelValues(string(k), from)
		}
		r.versions.WithLabelValues(string(k))
	}
	for _, reason := range badRequestReasons {
		r.badRequests.WithLabelValues(reason)
	}
	for _, limit := range []string{"count", "bytes"} {
		r.capped.WithLabelValues(limit)
	}
	for _, limit := range []string{shedCount, shedBytes} {
		r.shed.WithLabelValues(limit)
	}
	return r, nil
}

func (r *PrometheusRecorder) ObserveAdmission(kind, operation string, result Result, d time.Duration) {
	r.duration.WithLabelValues(operation).Observe(d.Seconds())
	r.mutations.WithLabelValues(kind, string(result)).Inc()
}

func (r *PrometheusRecorder) SourceRead(kind confighash.SourceKind, from string) {
	r.reads.WithLabelValues(string(kind), from).Inc()
}

func (r *PrometheusRecorder) VersionRead(kind confighash.SourceKind) {
	r.versions.WithLabelValues(string(kind)).Inc()
}

func (r *PrometheusRecorder) BadRequest(reason string) { r.badRequests.WithLabelValues(reason).Inc() }

func (r *PrometheusRecorder) Panic() { r.panics.Inc() }

func (r *PrometheusRecorder) SnapshotsCapped(limit string) { r.capped.WithLabelValues(limit).Inc() }

func (r *PrometheusRecorder) Shed(limit string) { r.shed.WithLabelValues(limit).Inc() }
