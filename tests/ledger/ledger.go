// Package ledger records the source updates a test makes and the rollouts of the
// workloads that use them, and tells which update each rollout carried: exactly once
// means every update carried by one rollout, and no rollout carrying none.
package ledger

import (
	"cmp"
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
	"github.com/confighash/confighash/tests/rollouts"
)

// Ledger records the source updates a test makes and the rollouts of the workloads
// that use them, each with the sources record it was admitted with, so that it can tell
// which update each rollout carried: every update must be carried by exactly one
// rollout, and no rollout may carry none. Sources are used whole (envFrom), so an
// update's digest is known from its data alone. Rollouts come from the API server's
// watch of the workloads (Watch), or from the Deployments' ReplicaSets (FromReplicaSets).
type Ledger struct {
	key confighash.Key
	dyn dynamic.Interface
	// refresh, when set, reads the rollouts again from the API server's state.
	refresh func(context.Context) error

	mu       sync.Mutex
	updates  map[Source][]update
	rollouts map[string][]rollout // by workload, "Kind namespace/name"
	hashes   map[string]string    // each workload's current template hash
	uses     map[string]Source    // workload -> the source it uses
	// templates are the template hashes each workload had, in order, when followed
	// with FromReplicaSets.
	templates map[string][]string
}

// Source names a ConfigMap or Secret of a namespace.
type Source struct {
	Namespace string
	Ref       confighash.SourceRef
}

// ConfigMapIn names a ConfigMap.
func ConfigMapIn(ns, name string) Source {
	return Source{ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: name}}
}

// SecretIn names a Secret.
func SecretIn(ns, name string) Source {
	return Source{ns, confighash.SourceRef{Kind: confighash.Secret, Name: name}}
}

type update struct {
	at     time.Time
	digest confighash.Digest
}

type rollout struct {
	at     time.Time
	record confighash.Record
	// revision is the Deployment revision, when read from ReplicaSets.
	revision int
}

// New returns a ledger of the cluster's workloads, whose hashes are made with key.
func New(t testing.TB, c *cluster.Cluster, key confighash.Key) *Ledger {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger(key)
	l.dyn = dyn
	return l
}

func newLedger(key confighash.Key) *Ledger {
	return &Ledger{key: key, updates: map[Source][]update{}, rollouts: map[string][]rollout{}, hashes: map[string]string{}, uses: map[string]Source{}, templates: map[string][]string{}}
}

// WorkloadID names a workload in the ledger.
func WorkloadID(kind confighash.Kind, ns, name string) string {
	return kind.Kind + " " + ns + "/" + name
}

// Use declares that a workload uses the whole source, of its own namespace.
func (l *Ledger) Use(kind confighash.Kind, ns, name string, src Source) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.uses[WorkloadID(kind, ns, name)] = src
}

// Watch records the template changes of every workload of the kind, from now until
// the test ends. Call it once the workloads exist: their current hash is the start.
func (l *Ledger) Watch(t testing.TB, kind confighash.Kind) {
	t.Helper()
	gvr := kind.GroupVersion().WithResource(kind.Resource)
	list, err := l.dyn.Resource(gvr).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	for i := range list.Items {
		u := &list.Items[i]
		l.hashes[WorkloadID(kind, u.GetNamespace(), u.GetName())] = templateHashOf(u, kind)
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

func (l *Ledger) observe(kind confighash.Kind, u *unstructured.Unstructured, at time.Time) {
	id := WorkloadID(kind, u.GetNamespace(), u.GetName())
	hash := templateHashOf(u, kind)
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, known := l.hashes[id]
	l.hashes[id] = hash
	if !known || prev == hash {
		return
	}
	record, _ := confighash.ParseRecord(u.GetAnnotations()[confighash.AnnotationSources])
	l.rollouts[id] = append(l.rollouts[id], rollout{at: at, record: record})
}

func templateHashOf(u *unstructured.Unstructured, kind confighash.Kind) string {
	path := append(append([]string{}, kind.TemplatePath...), "metadata", "annotations", confighash.AnnotationHash)
	h, _, _ := unstructured.NestedString(u.Object, path...)
	return h
}

// FromReplicaSets makes the ledger read the rollouts of the Deployments of namespace ns
// from their ReplicaSets, the API server's own state, instead of a watch, which breaks
// with the API server; a Deployment's pods must be labelled app with its name, as
// rollouts.History tells them apart. Every ReplicaSet after a Deployment's first is a
// rollout, carrying the sources record the Deployment had when the ReplicaSet was made; a
// template that a later one replaced before the controller made its ReplicaSet never
// ran a pod, and is no rollout. They are ordered by creation, not by revision: a
// controller whose cache lags a restart of the API server gives two ReplicaSets the
// same revision, and renumbers one later. The Deployments must keep their whole
// history (revisionHistoryLimit).
//
// A template that returns to an earlier one reuses its ReplicaSet, which no count of
// them shows, so the ledger also follows the templates, with a watch that lists again
// whenever it breaks, until the test ends.
func (l *Ledger) FromReplicaSets(t testing.TB, c *cluster.Cluster, ns string) {
	l.refresh = func(ctx context.Context) error {
		history, err := rollouts.History(ctx, c.Client, ns)
		if err != nil {
			return err
		}
		owned := map[string][]rollout{}
		for app, sets := range history {
			id := WorkloadID(confighash.Deployment, ns, app)
			for _, rs := range sets {
				record, _ := confighash.ParseRecord(rs.Annotations[confighash.AnnotationSources])
				owned[id] = append(owned[id], rollout{at: rs.CreationTimestamp.Time, record: record, revision: firstRevision(&rs)})
			}
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for id, rs := range owned {
			slices.SortFunc(rs, func(a, b rollout) int { return cmp.Or(a.at.Compare(b.at), a.revision-b.revision) })
			l.rollouts[id] = rs[1:]
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			list, err := c.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				time.Sleep(200 * time.Millisecond) // the API server is away
				continue
			}
			for i := range list.Items {
				l.template(&list.Items[i])
			}
			w, err := c.Client.AppsV1().Deployments(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
			if err != nil {
				continue
			}
			for ev := range w.ResultChan() {
				if d, ok := ev.Object.(*appsv1.Deployment); ok {
					l.template(d)
				}
			}
		}
	}()
}

// template notes the Deployment's template hash, if it is a new one.
func (l *Ledger) template(d *appsv1.Deployment) {
	id := WorkloadID(confighash.Deployment, d.Namespace, d.Name)
	hash := d.Spec.Template.Annotations[confighash.AnnotationHash]
	l.mu.Lock()
	defer l.mu.Unlock()
	if seen := l.templates[id]; len(seen) == 0 || seen[len(seen)-1] != hash {
		l.templates[id] = append(seen, hash)
	}
}

// firstRevision is the Deployment revision a ReplicaSet was made with: the first of
// its revision history, or its revision.
func firstRevision(rs *appsv1.ReplicaSet) int {
	first, _, _ := strings.Cut(rs.Annotations["deployment.kubernetes.io/revision-history"], ",")
	if n, err := strconv.Atoi(first); err == nil {
		return n
	}
	n, _ := strconv.Atoi(rs.Annotations["deployment.kubernetes.io/revision"])
	return n
}

// Update sets key k of the source to value and records the update.
// Its time is when the write returned, as latencies have always been measured.
func (l *Ledger) Update(ctx context.Context, c *cluster.Cluster, src Source, value string) error {
	if src.Ref.Kind == confighash.Secret {
		patch := fmt.Sprintf(`{"data":{"k":%q}}`, base64.StdEncoding.EncodeToString([]byte(value)))
		s, err := c.Client.CoreV1().Secrets(src.Namespace).Patch(ctx, src.Ref.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			return err
		}
		l.RecordSecretUpdate(s, time.Now())
		return nil
	}
	patch := fmt.Sprintf(`{"data":{"k":%q}}`, value)
	cm, err := c.Client.CoreV1().ConfigMaps(src.Namespace).Patch(ctx, src.Ref.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return err
	}
	l.RecordUpdate(cm, time.Now())
	return nil
}

// RecordUpdate records a write of cm made at the given time: its digest for a
// workload that uses it whole. The first write of each source must be its creation,
// before the workloads that use it.
func (l *Ledger) RecordUpdate(cm *corev1.ConfigMap, at time.Time) {
	l.record(ConfigMapIn(cm.Namespace, cm.Name), confighash.SourceOfConfigMap(cm), at)
}

// RecordSecretUpdate is RecordUpdate for a Secret.
func (l *Ledger) RecordSecretUpdate(s *corev1.Secret, at time.Time) {
	l.record(SecretIn(s.Namespace, s.Name), confighash.SourceOfSecret(s), at)
}

func (l *Ledger) record(src Source, data confighash.Source, at time.Time) {
	d := confighash.NamespacedDigest(l.key, src.Namespace, confighash.Reference{SourceRef: src.Ref, AllKeys: true}, data)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.updates[src] = append(l.updates[src], update{at: at, digest: d})
}

// Outcome is what the ledger found, summed over the workloads.
type Outcome struct {
	// Updates counts each update once per workload that uses the source.
	Updates, Rollouts int
	// Coalesced updates were carried by the rollout of a later update of the same
	// source, within the debounce window.
	Coalesced int
	// Lost updates were never carried by any rollout; spurious rollouts carried no
	// update that an earlier rollout had not.
	Lost, Spurious int
	// SpuriousIn names the workloads of the spurious rollouts, each with its history:
	// the digests of its source's updates and of its rollouts, in order, with times.
	SpuriousIn []string
	// Latencies run from an update to the rollout that carried it.
	Latencies []time.Duration
	// ByKind counts rollouts by workload kind.
	ByKind map[string]int
}

// Outcome matches every rollout with the updates it carried, and counts the updates
// made since the given time.
func (l *Ledger) Outcome(since time.Time) Outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := Outcome{ByKind: map[string]int{}}
	for id, source := range l.uses {
		updates, rollouts := l.updates[source], l.rollouts[id]
		kind, _, _ := strings.Cut(id, " ")
		for _, u := range updates[min(1, len(updates)):] {
			if !u.at.Before(since) {
				out.Updates++
			}
		}
		for _, r := range rollouts {
			if !r.at.Before(since) {
				out.Rollouts++
				out.ByKind[kind]++
			}
		}
		index := map[confighash.Digest]int{}
		for i, u := range updates {
			index[u.digest] = i
		}
		carried := 0 // the last update a rollout carried; the first write, the creation, the workload was born with
		for _, r := range rollouts {
			k, ok := index[recordedDigest(r.record, source.Ref)]
			if !ok || k <= carried {
				if !r.at.Before(since) {
					out.Spurious++
					out.SpuriousIn = append(out.SpuriousIn, id+": "+history(updates, rollouts, source.Ref))
				}
				continue
			}
			for i := carried + 1; i <= k; i++ {
				if updates[i].at.Before(since) {
					continue
				}
				out.Latencies = append(out.Latencies, r.at.Sub(updates[i].at))
				if i < k {
					out.Coalesced++
				}
			}
			carried = k
		}
		out.Lost += len(updates) - 1 - carried
		if back := returns(l.templates[id]); back > 0 {
			out.Spurious += back
			out.SpuriousIn = append(out.SpuriousIn, fmt.Sprintf("%s: returned %d times to an earlier template: %s", id, back, strings.Join(l.templates[id], " ")))
		}
	}
	return out
}

// returns counts the templates that came back after another one had replaced them.
func returns(templates []string) int {
	n := 0
	for i, h := range templates {
		if slices.Contains(templates[:i], h) {
			n++
		}
	}
	return n
}

// history renders a workload's updates and rollouts, to tell where a rollout came from.
func history(updates []update, rollouts []rollout, ref confighash.SourceRef) string {
	var b strings.Builder
	b.WriteString("updates")
	for _, u := range updates {
		fmt.Fprintf(&b, " %.8s@%s", u.digest.String(), u.at.Format("15:04:05.000"))
	}
	b.WriteString("; rollouts")
	for _, r := range rollouts {
		fmt.Fprintf(&b, " %.8s@%s", recordedDigest(r.record, ref).String(), r.at.Format("15:04:05.000"))
		if r.revision > 0 {
			fmt.Fprintf(&b, "#%d", r.revision)
		}
	}
	return b.String()
}

// Workloads returns how many workloads the ledger follows.
func (l *Ledger) Workloads() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.uses)
}

// Rollouts returns how many rollouts of the workload the ledger has seen.
func (l *Ledger) Rollouts(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.rollouts[id])
}

// Settled reports whether every workload's last rollout carries its source's last
// update.
func (l *Ledger) Settled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, source := range l.uses {
		updates, rollouts := l.updates[source], l.rollouts[id]
		if len(updates) < 2 {
			continue
		}
		if len(rollouts) == 0 || recordedDigest(rollouts[len(rollouts)-1].record, source.Ref) != updates[len(updates)-1].digest {
			return false
		}
	}
	return true
}

// Settle waits until every update is carried, or timeout, and then for quiet, in which
// any further rollout would be spurious.
func (l *Ledger) Settle(t testing.TB, timeout, quiet time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !(l.Read(t.Context()) == nil && l.Settled()) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(quiet)
	if err := l.Read(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// Read refreshes the rollouts of a ledger that reads them from the API server's state.
func (l *Ledger) Read(ctx context.Context) error {
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
