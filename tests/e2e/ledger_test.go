package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
)

// ledger records the source updates a test makes and the rollouts of the workloads
// that use them, each with the sources record it was admitted with, so that it can tell
// which update each rollout carried: every update must be carried by exactly one
// rollout, and no rollout may carry none. Sources are used whole (envFrom), so an
// update's digest is known from its data alone. Rollouts come from the API server's
// watch of the workloads (watch), or from the Deployments' ReplicaSets (fromReplicaSets).
type ledger struct {
	key confighash.Key
	dyn dynamic.Interface
	// refresh, when set, reads the rollouts again from the API server's state.
	refresh func(context.Context) error

	mu       sync.Mutex
	updates  map[source][]ledgerUpdate
	rollouts map[string][]ledgerRollout // by workload, "Kind namespace/name"
	hashes   map[string]string          // each workload's current template hash
	uses     map[string]source          // workload -> the source it uses
}

// source names a ConfigMap or Secret of a namespace.
type source struct {
	ns  string
	ref confighash.SourceRef
}

func configMapIn(ns, name string) source {
	return source{ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: name}}
}

func secretIn(ns, name string) source {
	return source{ns, confighash.SourceRef{Kind: confighash.Secret, Name: name}}
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
	return &ledger{key: hashKey(t, c), dyn: dyn, updates: map[source][]ledgerUpdate{},
		rollouts: map[string][]ledgerRollout{}, hashes: map[string]string{}, uses: map[string]source{}}
}

func workloadID(kind confighash.Kind, ns, name string) string {
	return kind.Kind + " " + ns + "/" + name
}

// use declares that a workload uses the whole source, of its own namespace.
func (l *ledger) use(kind confighash.Kind, ns, name string, src source) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.uses[workloadID(kind, ns, name)] = src
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

// fromReplicaSets makes the ledger read the rollouts of the Deployments of namespace ns
// from their ReplicaSets, the API server's own state, instead of a watch, which breaks
// with the API server. Every ReplicaSet after a Deployment's first is a rollout,
// carrying the sources record the Deployment had when the ReplicaSet was made; a
// template that a later one replaced before the controller made its ReplicaSet never
// ran a pod, and is no rollout. The Deployments must keep their whole history
// (revisionHistoryLimit) and never return to an earlier template.
func (l *ledger) fromReplicaSets(c *cluster.Cluster, ns string) {
	l.refresh = func(ctx context.Context) error {
		list, err := c.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		owned := map[string][]appsv1.ReplicaSet{}
		for _, rs := range list.Items {
			if owner := metav1.GetControllerOf(&rs); owner != nil && owner.Kind == "Deployment" {
				id := workloadID(confighash.Deployment, ns, owner.Name)
				owned[id] = append(owned[id], rs)
			}
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for id, sets := range owned {
			slices.SortFunc(sets, func(a, b appsv1.ReplicaSet) int { return revision(&a) - revision(&b) })
			rollouts := make([]ledgerRollout, 0, len(sets)-1)
			for _, rs := range sets[1:] {
				record, _ := confighash.ParseRecord(rs.Annotations[confighash.AnnotationSources])
				rollouts = append(rollouts, ledgerRollout{at: rs.CreationTimestamp.Time, record: record})
			}
			l.rollouts[id] = rollouts
		}
		return nil
	}
}

// revision is the Deployment revision a ReplicaSet was made for.
func revision(rs *appsv1.ReplicaSet) int {
	n, _ := strconv.Atoi(rs.Annotations["deployment.kubernetes.io/revision"])
	return n
}

// update sets key k of the source to value and records the update.
// Its time is when the write returned, as latencies have always been measured.
func (l *ledger) update(ctx context.Context, c *cluster.Cluster, src source, value string) error {
	if src.ref.Kind == confighash.Secret {
		patch := fmt.Sprintf(`{"data":{"k":%q}}`, base64.StdEncoding.EncodeToString([]byte(value)))
		s, err := c.Client.CoreV1().Secrets(src.ns).Patch(ctx, src.ref.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			return err
		}
		l.recordSecretUpdate(s, time.Now())
		return nil
	}
	patch := fmt.Sprintf(`{"data":{"k":%q}}`, value)
	cm, err := c.Client.CoreV1().ConfigMaps(src.ns).Patch(ctx, src.ref.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return err
	}
	l.recordUpdate(cm, time.Now())
	return nil
}

// recordUpdate records a write of cm made at the given time: its digest for a
// workload that uses it whole. The first write of each source must be its creation,
// before the workloads that use it.
func (l *ledger) recordUpdate(cm *corev1.ConfigMap, at time.Time) {
	l.record(configMapIn(cm.Namespace, cm.Name), confighash.SourceOfConfigMap(cm), at)
}

// recordSecretUpdate is recordUpdate for a Secret.
func (l *ledger) recordSecretUpdate(s *corev1.Secret, at time.Time) {
	l.record(secretIn(s.Namespace, s.Name), confighash.SourceOfSecret(s), at)
}

func (l *ledger) record(src source, data confighash.Source, at time.Time) {
	d := confighash.SourceDigest(l.key, confighash.Reference{SourceRef: src.ref, AllKeys: true}, data)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.updates[src] = append(l.updates[src], ledgerUpdate{at: at, digest: d})
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
		carried := 0 // the last update a rollout carried; the first write, the creation, the workload was born with
		for _, r := range rollouts {
			k, ok := index[recordedDigest(r.record, source.ref)]
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
		if len(rollouts) == 0 || recordedDigest(rollouts[len(rollouts)-1].record, source.ref) != updates[len(updates)-1].digest {
			return false
		}
	}
	return true
}

// settle waits until every update is carried, or timeout, and then a quiet period in
// which any further rollout would be spurious.
func (l *ledger) settle(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !(l.read(t.Context()) == nil && l.settled()) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(quietPeriod)
	if err := l.read(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// read refreshes the rollouts of a ledger that reads them from the API server's state.
func (l *ledger) read(ctx context.Context) error {
	if l.refresh == nil {
		return nil
	}
	return l.refresh(ctx)
}

func recordedDigest(r confighash.Record, ref confighash.SourceRef) confighash.Digest {
	for _, e := range r {
		if e.SourceRef == ref {
			return e.Digest
		}
	}
	return confighash.Digest{}
}
