// Package metrics declares confighash's Prometheus metrics. Each is named in full, as
// docs/metrics.md and the dashboards name it (confighash_<component>_<what>), and is
// made and registered in one call, so that a component's metrics read as a list of
// names and helps.
package metrics

import "github.com/prometheus/client_golang/prometheus"

// Registry makes metrics and registers them; the first error is kept for Err, which a
// component's constructor returns once it has declared them all.
type Registry struct {
	reg prometheus.Registerer
	err error
}

// On declares metrics on reg.
func On(reg prometheus.Registerer) *Registry { return &Registry{reg: reg} }

// Err is the first registration that failed, nil if none did.
func (r *Registry) Err() error { return r.err }

func (r *Registry) Counter(name, help string) prometheus.Counter {
	return register(r, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

func (r *Registry) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return register(r, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

func (r *Registry) Gauge(name, help string) prometheus.Gauge {
	return register(r, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
}

func (r *Registry) GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return register(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
}

// GaugeFunc is a gauge whose value is read at each scrape.
func (r *Registry) GaugeFunc(name, help string, value func() float64) {
	register(r, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, value))
}

func (r *Registry) Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return register(r, prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}))
}

func (r *Registry) HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return register(r, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels))
}

func register[C prometheus.Collector](r *Registry, c C) C {
	if err := r.reg.Register(c); err != nil && r.err == nil {
		r.err = err
	}
	return c
}
