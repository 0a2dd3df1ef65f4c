package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/confighash/confighash/tests/bench"
)

// BenchmarkScenarioRestartInPlace is `make bench`'s scenario restart-in-place: on the
// real node, with confighash installed as the docs say, one change of a Secret a
// StatefulSet of 3 with volumes uses, until every pod serves it, restarted in place
// and rolled, each a few times on a new StatefulSet.
func BenchmarkScenarioRestartInPlace(b *testing.B) {
	if testEnv == nil {
		b.Skip(skipReason)
	}
	env := testEnv
	ctx, cancel := context.WithTimeout(b.Context(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	if err := env.StartCertManager(ctx); err != nil {
		b.Fatal(err)
	}
	applyWithKustomize(b, env)
	const runs = 3
	s := bench.Scenario{
		Name: "restart-in-place", Title: "Restart in place against a rollout, on the real node",
		Setup:   fmt.Sprintf("A real node (containerd and a kubelet, the version of the control plane) with confighash installed by `kubectl apply -k`; for each run, a new StatefulSet of %d pods, each with a PersistentVolumeClaim (hostPath) and an env var from a Secret, ready within 1 s of its start (the demo app)", dbReplicas),
		Load:    fmt.Sprintf("%d runs each: the Secret edited once; timed until every pod is Ready and serves the new value, restarted in place (`confighash.dev/restart: in-place`) and rolled (`confighash.dev/inject`)", runs),
		Command: "make bench SCENARIOS=restart-in-place",
	}
	samples := map[bool][]time.Duration{}
	replaced, notOnce := map[bool]int{}, map[bool]int{}
	for range runs {
		for _, inPlace := range []bool{true, false} {
			took, r, n := timeDBChange(ctx, b, env, inPlace)
			samples[inPlace] = append(samples[inPlace], took)
			replaced[inPlace] += r
			notOnce[inPlace] += n
		}
	}
	for inPlace, name := range map[bool]string{true: "in place", false: "rollout"} {
		s.Add(name+" p50", bench.Milliseconds(bench.Quantile(samples[inPlace], 0.5)), "ms")
		s.Add(name+" max", bench.Milliseconds(bench.Quantile(samples[inPlace], 1)), "ms")
	}
	s.Add("pods replaced in place", float64(replaced[true]), "pods")
	s.Add("pods replaced by the rollout", float64(replaced[false]), "pods")
	s.Judge("in place, no pod replaced and each pod's app restarted exactly once per change", replaced[true] == 0 && notOnce[true] == 0)
	s.Notes = append(s.Notes, "In place spares what a rollout costs a real database: rescheduling, the volume's detach and attach, an image pull and a warm-up. The demo app has none of these, so the figures compare the two paths' own overhead: the restarter reads its token each second and the kubelet restarts the pod's init containers first.")
	s.Seconds = time.Since(start).Round(time.Second).Seconds()
	for _, f := range s.Figures {
		b.ReportMetric(f.Value, strings.ReplaceAll(f.Name, " ", "-")+"-"+f.Unit)
	}
	if err := bench.Record(s); err != nil {
		b.Fatal(err)
	}
}
