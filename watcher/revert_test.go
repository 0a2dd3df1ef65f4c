package watcher

import (
	"testing"

	"github.com/confighash/confighash"
)

// TestWhichFailedWorkloadsRevert: a failed rollout reverts a workload that is pinned
// and asks to, on itself or on the source, its own setting first; one not pinned, or
// whose own setting halts, halts, and one that asks and cannot is told why.
func TestWhichFailedWorkloadsRevert(t *testing.T) {
	pin := map[string]string{confighash.AnnotationPin: "true"}
	with := func(base map[string]string, onFailure string) map[string]string {
		out := map[string]string{confighash.AnnotationOnFailure: onFailure}
		for k, v := range base {
			out[k] = v
		}
		return out
	}
	h := newHarness(t, Config{}, harnessConfigMap("cfg", map[string]string{confighash.AnnotationOnFailure: "revert"}),
		harnessDeployment("pinned-from-source", pin, "cfg"),
		harnessDeployment("pinned-halts", with(pin, "halt"), "cfg"),
		harnessDeployment("unpinned-asks", with(nil, "revert"), "cfg"),
		harnessDeployment("unpinned-from-source", nil, "cfg"))
	cfg := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}
	for name, want := range map[string]struct {
		reverts bool
		told    bool
	}{
		"pinned-from-source":   {reverts: true},
		"pinned-halts":         {},
		"unpinned-asks":        {told: true},
		"unpinned-from-source": {told: true},
	} {
		v := h.w.workloads.lookup(harnessKey(confighash.Deployment, name))
		if v == nil {
			t.Fatalf("%s: not in the watcher's cache", name)
		}
		reverts, why := h.w.pacer.reverter.reverts(v, cfg)
		if reverts != want.reverts || (why != "") != want.told {
			t.Errorf("%s: reverts %v, told %q; want reverts %v, told: %v", name, reverts, why, want.reverts, want.told)
		}
	}
}
