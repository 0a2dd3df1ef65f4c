package alert

import (
	"github.com/confighash/confighash/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// Recorder records what happened to alerts, by sink.
type Recorder interface {
	Sent(Sink)
	Failed(Sink)
	Dropped(Sink)
}

// NoopRecorder records nothing.
type NoopRecorder struct{}

var _ Recorder = NoopRecorder{}

func (NoopRecorder) Sent(Sink)    {}
func (NoopRecorder) Failed(Sink)  {}
func (NoopRecorder) Dropped(Sink) {}

// PrometheusRecorder records to Prometheus.
type PrometheusRecorder struct {
	sent, failed, dropped *prometheus.CounterVec
}

var _ Recorder = (*PrometheusRecorder)(nil)

// NewPrometheusRecorder registers the alert metrics with reg.
func NewPrometheusRecorder(reg prometheus.Registerer) (*PrometheusRecorder, error) {
	m := metrics.On(reg)
	r := &PrometheusRecorder{
		sent:    m.CounterVec("confighash_alerts_sent_total", "Alerts the sink accepted.", "sink"),
		failed:  m.CounterVec("confighash_alerts_failed_total", "Alerts not sent: the sink refused them, or could not be reached, after the retries.", "sink"),
		dropped: m.CounterVec("confighash_alerts_dropped_total", "Alerts dropped before sending: the queue was full, the sink slower than the changes.", "sink"),
	}
	for _, c := range []*prometheus.CounterVec{r.sent, r.failed, r.dropped} {
		for _, s := range Sinks {
			c.WithLabelValues(string(s))
		}
	}
	return r, m.Err()
}

func (r *PrometheusRecorder) Sent(s Sink)    { r.sent.WithLabelValues(string(s)).Inc() }
func (r *PrometheusRecorder) Failed(s Sink)  { r.failed.WithLabelValues(string(s)).Inc() }
func (r *PrometheusRecorder) Dropped(s Sink) { r.dropped.WithLabelValues(string(s)).Inc() }
