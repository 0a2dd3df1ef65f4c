package watcher

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/bounded"
	"github.com/confighash/confighash/sourcecache"
)

// proofs find out what the running pods of a workload hold, for the sources that
// started to count or for a workload met for the first time (rule 8): a source's data
// is held where it was written before the pods' revision was created, or never
// rewritten since it was created, for a required source without which the pods could
// not start.
type proofs struct {
	sources   *sourcecache.Cache
	written   *dataWrites
	revisions *revisionReader
	reads     *bounded.Reader
}

// observe learns of a write of a source, prev being what it was.
func (p *proofs) observe(prev, d *sourcecache.Digested) { p.written.observe(prev, d) }

// proven tells, for each source that exists, whether the workload's running pods
// provably hold its current data: it was written before their revision was created,
// or, for a required source, it was never written after its creation, since the pods
// could not start without it. A CronJob's next run reads the current data.
func (p *proofs) proven(ctx context.Context, v *view, observations []confighash.Observation) (map[confighash.SourceRef]bool, error) {
	proven := map[confighash.SourceRef]bool{}
	written := map[confighash.SourceRef]confighash.Written{}
	var versions []string
	for _, o := range observations {
		if !o.Present {
			continue
		}
		proven[o.SourceRef] = v.Kind.Kind == confighash.CronJob.Kind
		if o.Kind == confighash.SecretProviderClass {
			// Its pods report what they hold: every one the current versions, or not.
			d, ok := p.sources.Lookup(v.Namespace, o.SourceRef)
			proven[o.SourceRef] = ok && d.Uniform
			continue
		}
		if d, ok := p.sources.Lookup(v.Namespace, o.SourceRef); ok {
			wr := p.written.of(d)
			written[o.SourceRef] = wr
			versions = append(versions, wr.ResourceVersion)
		}
	}
	if v.Kind.Kind == confighash.CronJob.Kind {
		return proven, nil
	}
	running, err := p.running(ctx, v, versions)
	if err != nil {
		return nil, err
	}
	for _, o := range observations {
		wr, ok := written[o.SourceRef]
		if !ok {
			continue
		}
		if proven[o.SourceRef] = running.Holds(wr); proven[o.SourceRef] || o.Optional {
			continue
		}
		if proven[o.SourceRef], err = p.neverRewritten(ctx, v.Namespace, o.SourceRef, wr); err != nil {
			return nil, err
		}
	}
	return proven, nil
}

// neverRewritten reports whether a source's data was last written when it was
// created: no later second in its metadata, and, while the API server keeps the
// history, absent just before that write.
func (p *proofs) neverRewritten(ctx context.Context, namespace string, ref confighash.SourceRef, wr confighash.Written) (bool, error) {
	d, ok := p.sources.Lookup(namespace, ref)
	before, err := strconv.ParseUint(wr.ResourceVersion, 10, 64)
	if !ok || !d.Created().Equal(wr.Time) || err != nil || before < 2 {
		return false, nil
	}
	opts := metav1.ListOptions{
		FieldSelector:        fields.OneTermEqualSelector("metadata.name", ref.Name).String(),
		ResourceVersion:      strconv.FormatUint(before-1, 10),
		ResourceVersionMatch: metav1.ResourceVersionMatchExact,
	}
	res := bounded.Resource{GroupVersionResource: sourcecache.Resource(ref.Kind), Namespace: namespace}
	then, err := bounded.List[metav1.PartialObjectMetadata](ctx, p.reads, res, opts, byNameLimits)
	if err != nil {
		return false, historyGone(err)
	}
	return len(then) == 0, nil
}

// running returns what is known of when the workload's running pods started: the
// creation of the oldest revision that may run pods, and the newest of versions at
// which none of those revisions existed yet, while the API server keeps them.
func (p *proofs) running(ctx context.Context, v *view, versions []string) (confighash.Running, error) {
	revs, err := p.revisions.of(ctx, v)
	if err != nil {
		return confighash.Running{}, err
	}
	r := confighash.Running{Since: time.Now()}
	uids := make([]types.UID, len(revs.running))
	for i, rev := range revs.running {
		uids[i] = rev.GetUID()
		if created := rev.GetCreationTimestamp().Time; created.Before(r.Since) {
			r.Since = created
		}
	}
	slices.SortFunc(versions, func(a, b string) int {
		newer, _ := resourceversion.CompareResourceVersion(b, a)
		return newer
	})
	for _, rv := range slices.Compact(versions) {
		then, err := revs.at(ctx, rv)
		if err != nil {
			return r, historyGone(err)
		}
		if !slices.ContainsFunc(then, func(o metav1.Object) bool { return slices.Contains(uids, o.GetUID()) }) {
			r.AbsentAt = rv // and so at every earlier version
			break
		}
	}
	return r, nil
}

// dataWrites keeps, for the sources whose latest writes changed only their metadata
// (a match annotation added, say), their last write of data: the data running pods
// may hold dates from then, not from the metadata's write. It learns from the
// watcher's handler of sources; the cache keeps no handler of its own, whose buffer of
// notifications would grow with the first list and never shrink.
type dataWrites struct {
	mu   sync.Mutex
	kept map[sourceIn]confighash.Written
}

func newDataWrites() *dataWrites { return &dataWrites{kept: map[sourceIn]confighash.Written{}} }

// observe learns of a write of the source, prev being what it was; nil when it was
// created or deleted, which forgets what was kept of it.
func (dw *dataWrites) observe(prev, d *sourcecache.Digested) {
	if d.Source.Kind == confighash.SecretProviderClass {
		return // one pod's report: its class's last write is its latest report's
	}
	key := sourceIn{d.Namespace(), d.Source.SourceRef}
	dw.mu.Lock()
	defer dw.mu.Unlock()
	switch {
	case prev == nil, !slices.Equal(prev.Source.Data, d.Source.Data) || !slices.Equal(prev.Source.BinaryData, d.Source.BinaryData):
		delete(dw.kept, key)
	default:
		if _, ok := dw.kept[key]; !ok {
			dw.kept[key] = confighash.Written{Time: prev.Written(), ResourceVersion: prev.ResourceVersion}
		}
	}
}

// of returns the source's last write of data as far as the watcher has seen: after a
// restart, its last write of any kind.
func (dw *dataWrites) of(d *sourcecache.Digested) confighash.Written {
	dw.mu.Lock()
	w, kept := dw.kept[sourceIn{d.Namespace(), d.Source.SourceRef}]
	dw.mu.Unlock()
	if kept {
		return w
	}
	return confighash.Written{Time: d.Written(), ResourceVersion: d.ResourceVersion}
}
