package watches

import (
	"slices"
	"time"

	"github.com/confighash/confighash/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Overs tells of the objects read over their kind's bound (Door.Over): a warning, at
// most a few a minute whatever a tenant writes, and a count by kind.
type Overs struct {
	count *prometheus.CounterVec
	log   zerolog.Logger
}

// NewOvers registers the component's count of objects over their bound with reg.
func NewOvers(reg prometheus.Registerer, component string, log zerolog.Logger) (*Overs, error) {
	m := metrics.On(reg)
	o := &Overs{
		count: m.CounterVec("confighash_"+component+"_objects_over_bound_total",
			"Objects of a tenant's kind read over their kind's bound in bytes, by kind: kept as their key alone and not acted on (docs/security.md).", "kind"),
		log: log.Sample(&zerolog.BurstSampler{Burst: 5, Period: time.Minute}),
	}
	if err := m.Err(); err != nil {
		return nil, err
	}
	for _, k := range Kinds {
		if k.MaxBytes > 0 && slices.Contains(k.By, component) {
			o.count.WithLabelValues(k.Name)
		}
	}
	return o, nil
}

// Over tells of one object over its kind's bound.
func (o *Overs) Over(kind Kind, namespace, name string, bytes int) {
	o.count.WithLabelValues(kind.Name).Inc()
	o.log.Warn().Str("kind", kind.Name).Str("namespace", namespace).Str("name", name).Int("bytes", bytes).Int("bound", kind.MaxBytes).
		Msg("an object over its kind's bound is kept as its key alone and not acted on")
}
