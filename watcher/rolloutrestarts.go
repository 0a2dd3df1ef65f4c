package watcher

import (
	"time"

	"github.com/confighash/confighash"
)

// rolloutRestart returns what restarts the pods of an Argo Rollout with Reloader's
// restart strategy (Policy.RolloutRestart) in the write that converges it: its
// spec.restartAt, which has Argo restart each pod made before then, and the mark of
// the hash they are restarted for; nil when they already run the decision's data. The
// mark names the pod template too, so that a rollout since, which started every pod
// afresh, makes it stale. Written once per change, once the webhook recorded it
// (restartWaits): a retry finds the mark and restarts nothing again.
func rolloutRestart(v *view, d confighash.Decision, now time.Time) (spec, mark map[string]any) {
	if d.Restart == "" || v.Runs() == d.Restart {
		return nil, nil
	}
	return map[string]any{"restartAt": now.UTC().Format(time.RFC3339)},
		map[string]any{confighash.AnnotationRestartedHash: confighash.RestartedMark(d.Restart, v.Hash)}
}

// restartWaits reports whether the restart waits for a touch the webhook records the
// change in, its pod template's hash kept. A webhook that does not read the strategy,
// an earlier release's during an upgrade, rolls the template in the touch instead; a
// restart written in the same write would restart the pods that rollout replaces, and
// one left out is not needed. So is a webhook that failed open: nothing recorded,
// nothing restarted.
func restartWaits(v *view, d confighash.Decision) bool {
	recorded := d
	recorded.Restart = ""
	return !recorded.Carried(v.State)
}
