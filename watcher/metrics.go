package watcher

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/metrics"
)

// Recorder records the watcher's metrics.
type Recorder interface {
	// SourceChanged records a change of a source's data, existence or counting.
	SourceChanged(kind confighash.SourceKind)
	// Touch records a write to a workload by result.
	Touch(result TouchResult)
	// Converged records the time from a change reaching a workload to its convergence.
	Converged(d time.Duration)
	// Resynced records how many workloads had drifted at a resync.
	Resynced(drifted int)
	// QueueDepth records the number of workloads waiting.
	QueueDepth(n int)
	// Held records how many workloads have a change held, by why.
	Held(counts map[string]int)
	// Halted records a wave halted on a failure.
	Halted()
	// Reverted records a workload rolled back to the revision it ran before a change
	// whose rollout failed.
	Reverted()
	// AnalysisRead records a read of a bake's metric gate by result.
	AnalysisRead(result AnalysisResult)
	// Flapping records a source whose users were held because it kept changing.
	Flapping()
	// PendingTooLong records a workload whose new pods stayed Pending too long: its
	// --max-rolling slot went to others.
	PendingTooLong()
	// Relisted records a workload informer that listed again, because a namespace's
	// mode came to act on workloads it kept only the key of.
	Relisted()
	// SnapshotSwept records a snapshot deleted because nothing owned or named it.
	SnapshotSwept()
	// SweepCalls records the API calls one sweep of snapshots made.
	SweepCalls(n int)
	// RestartedInPlace records a pod told to restart in place, or to reload: how.
	RestartedInPlace(how confighash.RestartMode)
	// RestartHalted records a pod restarted in place that did not come back, which
	// halts the rest of its controller's pods and holds its wave.
	RestartHalted()
	// RestartingControllers records the controllers whose pods are being restarted in
	// place, and those waiting for their wave or for room under --max-rolling.
	RestartingControllers(underWay, waiting int)
}

// AnalysisResult is the outcome of one read of a bake's metric gate.
type AnalysisResult string

// The results of a metric gate's read: every value holds, one does not, Prometheus had
// no data, or it could not be read (or the gate names no query of the install).
const (
	AnalysisHolds      AnalysisResult = "holds"
	AnalysisFails      AnalysisResult = "fails"
	AnalysisNoData     AnalysisResult = "no_data"
	AnalysisUnreadable AnalysisResult = "unreadable"
)

// TouchResult is the outcome of one write to a workload.
type TouchResult string

// Touch results.
const (
	TouchConverged    TouchResult = "converged"     // the webhook wrote the new hash
	TouchNotConverged TouchResult = "not_converged" // it did not; retried with backoff
	TouchHealed       TouchResult = "healed"        // the watcher wrote the hash itself
	TouchAdopted      TouchResult = "adopted"       // a running workload, or sources that started to count, current: recorded without a rollout
	TouchError        TouchResult = "error"         // the write failed
	TouchRecreated    TouchResult = "recreated"     // a Job was recreated
	TouchStarted      TouchResult = "started"       // a CronJob's Job was started for a change
	TouchGivenUp      TouchResult = "given_up"      // a Job's recreation was refused each time it was tried, and given up
)

// NoopRecorder records nothing.
type NoopRecorder struct{}

var _ Recorder = NoopRecorder{}

func (NoopRecorder) SourceChanged(confighash.SourceKind)     {}
func (NoopRecorder) Touch(TouchResult)                       {}
func (NoopRecorder) Converged(time.Duration)                 {}
func (NoopRecorder) Resynced(int)                            {}
func (NoopRecorder) QueueDepth(int)                          {}
func (NoopRecorder) Held(map[string]int)                     {}
func (NoopRecorder) Flapping()                               {}
func (NoopRecorder) Halted()                                 {}
func (NoopRecorder) Reverted()                               {}
func (NoopRecorder) AnalysisRead(AnalysisResult)             {}
func (NoopRecorder) PendingTooLong()                         {}
func (NoopRecorder) Relisted()                               {}
func (NoopRecorder) SnapshotSwept()                          {}
func (NoopRecorder) SweepCalls(int)                          {}
func (NoopRecorder) RestartedInPlace(confighash.RestartMode) {}
func (NoopRecorder) RestartHalted()                          {}
func (NoopRecorder) RestartingControllers(int, int)          {}

// PrometheusRecorder records to Prometheus.
type PrometheusRecorder struct {
	changes      *prometheus.CounterVec
	touches      *prometheus.CounterVec
	convergence  prometheus.Histogram
	drifted      prometheus.Gauge
	depth        prometheus.Gauge
	held         *prometheus.GaugeVec
	flapping     prometheus.Counter
	halts        prometheus.Counter
	reverts      prometheus.Counter
	analysis     *prometheus.CounterVec
	pending      prometheus.Counter
	relists      prometheus.Counter
	swept        prometheus.Counter
	sweepCalls   prometheus.Counter
	restarted    *prometheus.CounterVec
	restartHalts prometheus.Counter
	restarting   *prometheus.GaugeVec
}

var _ Recorder = (*PrometheusRecorder)(nil)

// NewPrometheusRecorder registers the watcher's metrics with reg.
func NewPrometheusRecorder(reg prometheus.Registerer) (*PrometheusRecorder, error) {
	m := metrics.On(reg)
	r := &PrometheusRecorder{
		changes:      m.CounterVec("confighash_watcher_source_changes_total", "Changes of ConfigMap or Secret data, existence or counting annotations seen, by kind.", "kind"),
		touches:      m.CounterVec("confighash_watcher_touches_total", "Writes to workloads by result: converged (the webhook wrote the hash), not_converged (it did not: retried), healed (the watcher wrote it), adopted (a workload, or sources that started to count, recorded without a rollout), error.", "result"),
		convergence:  m.Histogram("confighash_watcher_convergence_seconds", "Time from a change reaching a workload to the workload carrying the new hash.", []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}),
		drifted:      m.Gauge("confighash_watcher_drifted_workloads", "Workloads found not converged at the last resync (start or leadership change)."),
		depth:        m.Gauge("confighash_watcher_queue_depth", "Workloads waiting to be checked or touched."),
		held:         m.GaugeVec("confighash_watcher_held_workloads", "Workloads with a configuration change due and not rolled yet, by reason: window (outside their rollout window), wave (waiting for their wave), halted (their wave halted on a failure), flapping (a source whose change is due keeps changing).", "reason"),
		flapping:     m.Counter("confighash_watcher_flapping_sources_total", "Sources that changed more than --flap-limit times within --flap-window: their users were held at their current revision until the source was quiet (held_workloads{reason=\"flapping\"})."),
		halts:        m.Counter("confighash_watcher_wave_halts_total", "Waves halted because a workload they rolled failed."),
		reverts:      m.Counter("confighash_watcher_reverts_total", "Workloads rolled back to the revision they ran before a change whose rollout failed, with its data (confighash.dev/on-failure: revert)."),
		analysis:     m.CounterVec("confighash_watcher_analysis_reads_total", "Reads of the metric gates of bakes (confighash.dev/analysis) by result: holds, fails (a value past its threshold: the canary failed), no_data, unreadable (Prometheus down, slow or refusing, or a query the install does not name: the canary halts).", "result"),
		pending:      m.Counter("confighash_watcher_pending_too_long_total", "Workloads a wave let roll whose new pods stayed Pending longer than --pending-timeout: their --max-rolling slot went to others."),
		relists:      m.Counter("confighash_watcher_workload_relists_total", "Lists of a kind's workloads made again because a namespace's mode came to act on workloads kept only by their key (a namespace labelled, or labelled all)."),
		sweepCalls:   m.Counter("confighash_watcher_snapshot_sweep_requests_total", "API calls the sweeps of snapshots made: lists, reads of revisions and deletes, at most 200 a sweep."),
		swept:        m.Counter("confighash_watcher_snapshots_swept_total", "Snapshots of pinned workloads deleted because nothing owned or named them: a create refused after the webhook made them, or pins that moved on before the watcher saw them."),
		restarted:    m.CounterVec("confighash_watcher_pods_restarted_in_place_total", "Pods told to restart their containers in place (how=in-place), or their app to reload its files (how=reload), for new data.", "how"),
		restartHalts: m.Counter("confighash_watcher_restart_halts_total", "Pods restarted in place that did not come back: the rest of their controller's pods, and its wave, are held."),
		restarting:   m.GaugeVec("confighash_watcher_controllers_restarting_in_place", "Controllers whose pods are being restarted in place (state=under_way), and those waiting for their wave or for room under --max-rolling (state=waiting).", "state"),
	}
	if err := m.Err(); err != nil {
		return nil, err
	}
	// Every series exists from the start, at zero, so that rate() and increase()
	// see the first event and alerts need no absent().
	for _, k := range []confighash.SourceKind{confighash.ConfigMap, confighash.Secret} {
		r.changes.WithLabelValues(string(k))
	}
	for _, res := range []TouchResult{TouchConverged, TouchNotConverged, TouchHealed, TouchAdopted, TouchRecreated, TouchStarted, TouchGivenUp, TouchError} {
		r.touches.WithLabelValues(string(res))
	}
	for _, reason := range confighash.CountedHolds() {
		r.held.WithLabelValues(string(reason))
	}
	for _, res := range []AnalysisResult{AnalysisHolds, AnalysisFails, AnalysisNoData, AnalysisUnreadable} {
		r.analysis.WithLabelValues(string(res))
	}
	for _, how := range []confighash.RestartMode{confighash.RestartInPlace, confighash.RestartReload} {
		r.restarted.WithLabelValues(how.String())
	}
	r.RestartingControllers(0, 0)
	return r, nil
}

func (r *PrometheusRecorder) SourceChanged(kind confighash.SourceKind) {
	r.changes.WithLabelValues(string(kind)).Inc()
}
func (r *PrometheusRecorder) Touch(result TouchResult) {
	r.touches.WithLabelValues(string(result)).Inc()
}
func (r *PrometheusRecorder) Converged(d time.Duration) { r.convergence.Observe(d.Seconds()) }
func (r *PrometheusRecorder) Resynced(drifted int)      { r.drifted.Set(float64(drifted)) }
func (r *PrometheusRecorder) QueueDepth(n int)          { r.depth.Set(float64(n)) }
func (r *PrometheusRecorder) Halted()                   { r.halts.Inc() }
func (r *PrometheusRecorder) Reverted()                 { r.reverts.Inc() }
func (r *PrometheusRecorder) AnalysisRead(result AnalysisResult) {
	r.analysis.WithLabelValues(string(result)).Inc()
}
func (r *PrometheusRecorder) Flapping()        { r.flapping.Inc() }
func (r *PrometheusRecorder) PendingTooLong()  { r.pending.Inc() }
func (r *PrometheusRecorder) Relisted()        { r.relists.Inc() }
func (r *PrometheusRecorder) SnapshotSwept()   { r.swept.Inc() }
func (r *PrometheusRecorder) SweepCalls(n int) { r.sweepCalls.Add(float64(n)) }
func (r *PrometheusRecorder) RestartHalted()   { r.restartHalts.Inc() }
func (r *PrometheusRecorder) RestartedInPlace(how confighash.RestartMode) {
	r.restarted.WithLabelValues(how.String()).Inc()
}
func (r *PrometheusRecorder) RestartingControllers(underWay, waiting int) {
	r.restarting.WithLabelValues("under_way").Set(float64(underWay))
	r.restarting.WithLabelValues("waiting").Set(float64(waiting))
}

func (r *PrometheusRecorder) Held(counts map[string]int) {
	for _, reason := range confighash.CountedHolds() {
		r.held.WithLabelValues(string(reason)).Set(float64(counts[string(reason)]))
	}
}
