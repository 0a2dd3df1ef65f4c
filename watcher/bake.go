package watcher

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
)

// The first wave of a change bakes: its workloads, the canary, roll; then, once rolled
// out, must stay healthy for the bake (confighash.dev/bake) before the next wave
// rolls. The marker on each of them (AnnotationBaking), written in the write that
// releases it and again when it has rolled out, carries the bake across leaders; the
// pacer looks at their pods while they bake (followRollout), and a failure halts the
// wave, or reverts it, as a failed rollout does.

// baker marks the workloads of a change's first wave and starts their bake.
type baker struct {
	sources   *sourcecache.Cache
	workloads *workloads
	report    *reporter
}

// current is the workload's baking marker when it is of the template it runs and of its
// source's latest change, nil when it has none that holds.
func (b *baker) current(v *view) *confighash.Baking {
	m := v.Baking
	if m.IsZero() || m.Hash != v.Hash {
		return nil
	}
	if d, ok := b.sources.Lookup(v.Namespace, m.Change.SourceRef); !ok || d.ResourceVersion != m.Change.ResourceVersion {
		return nil
	}
	return &m
}

// start marks, on a workload of the first wave that has rolled out, from when it bakes,
// and says until when; it reports whether it wrote, as the write brings it back.
func (b *baker) start(ctx context.Context, v *view, m *confighash.Baking) (bool, error) {
	if !m.Since.IsZero() || v.Status != confighash.RolledOut {
		return false, nil
	}
	started := *m
	started.Since = time.Now().Truncate(time.Second)
	annotations := map[string]any{confighash.AnnotationBaking: started.String()}
	why := fmt.Sprintf("%s changed: in its first wave, rolled out; bakes for %s before the next wave rolls", m.Change, m.Bake)
	if m.Bake > 0 {
		annotations = withStatus(annotations, confighash.Status{Act: confighash.ActBaking, At: started.Since, Until: started.Until(), Why: why})
	}
	if _, err := b.workloads.patch(ctx, v, annotationsPatch(annotations)); err != nil {
		return false, err
	}
	if m.Bake > 0 {
		b.report.EventOn(v, corev1.EventTypeNormal, "Baking", why+", until "+started.Until().UTC().Format(time.RFC3339))
	}
	return true, nil
}
