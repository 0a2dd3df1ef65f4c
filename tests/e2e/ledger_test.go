package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
)

// ledger records the source updates a test makes and the pod-template changes the API
// server's watch shows, each with the sources record it was admitted with, so that it
// can tell which update each rollout carried: every update must be carried by exactly
// one rollout, and no rollout may carry none. Sources are used whole (envFrom), so an
// update's digest is known from its data alone.
type ledger struct {
	key confighash.Key
	dyn dynamic.Interface

	mu       sync.Mutex
	updates  map[string][]ledgerUpdate  // by "namespace/name" of the ConfigMap
	rollouts map[string][]ledgerRollout // by workload, "Kind namespace/name"
	hashes   map[string]string          // each workload's current template hash
	uses     map[string]string          // workload -> the ConfigMap it uses
}

type ledgerUpdate struct {
	at     time.Time
	digest confighash.Digest
}

type ledgerRollout struct {
	at     time.Time
	record confighash.Record
}

func newLedger(t testing.TB, c *cluster.Cluster) *ledger {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &ledger{key: hashKey(t, c), dyn: dyn, updates: map[string][]ledgerUpdate{},
		rollouts: map[string][]ledgerRollout{}, hashes: map[string]string{}, uses: map[string]string{}}
}

func workloadID(kind confighash.Kind, ns, name string) string {
	return kind.Kind + " " + ns + "/" + name
}

// use declares that a workload uses the whole ConfigMap ns/configMap.
func (l *ledger) use(kind confighash.Kind, ns, name, configMap string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.uses[workloadID(kind, ns, name)] = ns + "/" + configMap
}

// watch records the template changes of every workload of the kind, from now until
// the test ends. Call it once the workloads exist: their current hash is the start.
func (l *ledger) watch(t testing.TB, kind confighash.Kind) {
	t.Helper()
	gvr := kind.GroupVersion().WithResource(kind.Resource)
	list, err := l.dyn.Resource(gvr).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	for i := range list.Items {
		u := &list.Items[i]
		l.hashes[workloadID(kind, u.GetNamespace(), u.GetName())] = templateHashOf(u, kind)
	}
	l.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := l.dyn.Resource(gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		w.Stop()
		<-done
	})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				continue
			}
			l.observe(kind, u, time.Now())
		}
	}()
}

func (l *ledger) observe(kind confighash.Kind, u *unstructured.Unstructured, at time.Time) {
	id := workloadID(kind, u.GetNamespace(), u.GetName())
	hash := templateHashOf(u, kind)
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, known := l.hashes[id]
	l.hashes[id] = hash
	if !known || prev == hash {
		return
	}
	record, _ := confighash.ParseRecord(u.GetAnnotations()[confighash.AnnotationSources])
	l.rollouts[id] = append(l.rollouts[id], ledgerRollout{at: at, record: record})
}

func templateHashOf(u *unstructured.Unstructured, kind confighash.Kind) string {
	path := append(append([]string{}, kind.TemplatePath...), "metadata", "annotations", confighash.AnnotationHash)
	h, _, _ := unstructured.NestedString(u.Object, path...)
	return h
}

// update sets key k of ConfigMap ns/name to value and records the update.
func (l *ledger) update(ctx context.Context, c *cluster.Cluster, ns, name, value string) error {
	patch := fmt.Sprintf(`{"data":{"k":%q}}`, value)
	cm, err := c.Client.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return err
	}
	l.recordUpdate(cm, time.Now())
	return nil
}

// recordUpdate records a write of cm made at the given time: its digest for a
// workload that uses it whole. The first write of each ConfigMap must be its creation,
// before the workloads that use it.
func (l *ledger) recordUpdate(cm *corev1.ConfigMap, at time.Time) {
	ref := confighash.Reference{SourceRef: confighash.SourceRef{Kind: confighash.ConfigMap, Name: cm.Name}, AllKeys: true}
	d := confighash.SourceDigest(l.key, ref, confighash.SourceOfConfigMap(cm))
	l.mu.Lock()
	defer l.mu.Unlock()
	key := cm.Namespace + "/" + cm.Name
	l.updates[key] = append(l.updates[key], ledgerUpdate{at: at, digest: d})
}

// outcome is what the ledger found, summed over the workloads.
type outcome struct {
	// updates counts each update once per workload that uses the source.
	updates, rollouts int
	// coalesced updates were carried by the rollout of a later update of the same
	// source, within the debounce window.
	coalesced int
	// lost updates were never carried by any rollout; spurious rollouts carried no
	// update that an earlier rollout had not.
	lost, spurious int
	// latencies run from an update to the rollout that carried it.
	latencies []time.Duration
	// byKind counts rollouts by workload kind.
	byKind map[string]int
}

// outcome matches every rollout with the updates it carried, and counts the updates
// made since the given time.
func (l *ledger) outcome(since time.Time) outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := outcome{byKind: map[string]int{}}
	for id, source := range l.uses {
		updates, rollouts := l.updates[source], l.rollouts[id]
		kind, _, _ := strings.Cut(id, " ")
		for _, u := range updates[min(1, len(updates)):] {
			if !u.at.Before(since) {
				out.updates++
			}
		}
		for _, r := range rollouts {
			if !r.at.Before(since) {
				out.rollouts++
				out.byKind[kind]++
			}
		}
		index := map[confighash.Digest]int{}
		for i, u := range updates {
			index[u.digest] = i
		}
		_, name, _ := strings.Cut(source, "/")
		carried := 0 // the last update a rollout carried; the first write, the creation, the workload was born with
		for _, r := range rollouts {
			k, ok := index[recordedDigest(r.record, name)]
			if !ok || k <= carried {
				if !r.at.Before(since) {
					out.spurious++
				}
				continue
			}
			for i := carried + 1; i <= k; i++ {
				if updates[i].at.Before(since) {
					continue
				}
				out.latencies = append(out.latencies, r.at.Sub(updates[i].at))
				if i < k {
					out.coalesced++
				}
			}
			carried = k
		}
		out.lost += len(updates) - 1 - carried
	}
	return out
}

// settled reports whether every workload's last rollout carries its source's last
// update.
func (l *ledger) settled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, source := range l.uses {
		updates, rollouts := l.updates[source], l.rollouts[id]
		if len(updates) < 2 {
			continue
		}
		_, name, _ := strings.Cut(source, "/")
		if len(rollouts) == 0 || recordedDigest(rollouts[len(rollouts)-1].record, name) != updates[len(updates)-1].digest {
			return false
		}
	}
	return true
}

// settle waits until every update is carried, or timeout, and then a quiet period in
// which any further rollout would be spurious.
func (l *ledger) settle(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for !l.settled() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(quietPeriod)
}

func recordedDigest(r confighash.Record, configMap string) confighash.Digest {
	for _, e := range r {
		if e.Kind == confighash.ConfigMap && e.Name == configMap {
			return e.Digest
		}
	}
	return confighash.Digest{}
}
