package watcher

import (
	"github.com/confighash/confighash"
	"github.com/confighash/confighash/alert"
)

// Alerter hears of the workloads the watcher rolled, healed, or failed to heal. It
// must not block.
type Alerter interface {
	Notify(alert.Event)
}

// alert tells the Alerter, if any, what happened to the workload and which source
// changes caused it.
func (w *Watcher) alert(what alert.What, v *view, trig []confighash.Trigger, reason string) {
	if w.cfg.Alerts == nil {
		return
	}
	sources := make([]alert.Object, len(trig))
	for i, t := range trig {
		sources[i] = alert.Object{Kind: string(t.Kind), Name: t.Name, ResourceVersion: t.ResourceVersion}
	}
	w.cfg.Alerts.Notify(alert.Event{What: what, Namespace: v.Namespace, Workload: alert.Object{Kind: v.Kind.Kind, Name: v.Name}, Sources: sources, Reason: reason})
}
