package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/bounded"
	"github.com/confighash/confighash/namespaces"
	"github.com/confighash/confighash/watches"
)

// FieldManager owns the watcher's writes.
const FieldManager = "confighash-watcher"

// workloads are the watcher's port to the workloads: its informers of each kind, which
// every capability reads, and its one write of a workload, a merge patch of
// confighash.dev/ annotations and of the pod template's hash (the write set of
// confighash-watcher-writes-annotations-only).
type workloads struct {
	byKind  map[string]*watches.Informers
	gate    namespaces.Gate
	client  kubernetes.Interface
	dynamic dynamic.Interface
	toView  cache.TransformFunc
	metrics Recorder
	// watched are the namespaces of an install bound by RoleBindings, none for the
	// cluster; reads lists the cluster's namespaces.
	watched []string
	reads   *bounded.Reader
	// kept and relists read a namespace again when its mode rises above one some of
	// its objects were kept as their key alone under: relists, every set of informers
	// of the namespace, the sources' and the restarted pods' too.
	kept    *keptKeys
	relists *watches.Relists
	// generation moves whenever an informer's store takes in an object, and when a
	// relist swaps a store in; namespaces when a namespace's mode or pacing changes.
	// Waves' memos hold while neither moves.
	generation, namespaces atomic.Uint64
}

// newWorkloads opens the informers of each kind through the door: the built-in kinds
// with their types, the others as unstructured objects, each only if the API server
// serves it.
func newWorkloads(client kubernetes.Interface, dyn dynamic.Interface, reads *bounded.Reader, gate namespaces.Gate, door watches.Door, kinds confighash.Kinds, vocabulary confighash.Vocabulary, metrics Recorder, log zerolog.Logger) (*workloads, error) {
	w := &workloads{gate: gate, client: client, dynamic: dyn, watched: door.Namespaces, reads: reads, toView: viewTransform(vocabulary, kinds), metrics: metrics, kept: newKeptKeys(gate)}
	var err error
	w.byKind, err = workloadInformers(client, dyn, door, kinds, w.kept.transform(w.toView), log)
	return w, err
}

// workloadInformers returns the informers of each kind the API server serves.
func workloadInformers(client kubernetes.Interface, dyn dynamic.Interface, door watches.Door, kinds confighash.Kinds, transform cache.TransformFunc, log zerolog.Logger) (map[string]*watches.Informers, error) {
	// Indexed by namespace alone: a change of a source scans its namespace's workloads
	// (State.MayUse). An index by source would keep a map per source used, several times what
	// a view of a workload costs.
	indexers := cache.Indexers{cache.NamespaceIndex: byNamespace}
	informers := map[string]*watches.Informers{}
	for _, k := range kinds {
		var newInformer func(ns string) cache.SharedIndexInformer
		if typed, ok := typedInformers[k.GroupVersionKind]; ok {
			newInformer = func(ns string) cache.SharedIndexInformer { return typed(client, ns, indexers) }
		} else {
			served, err := Served(client, k.GroupVersion().WithResource(k.Resource))
			if err != nil {
				log.Warn().Err(err).Str("kind", k.Kind).Msg("cannot tell whether the kind is served; watching without it until it is")
			}
			if dyn == nil || !served {
				continue
			}
			gvr := k.GroupVersion().WithResource(k.Resource)
			newInformer = func(ns string) cache.SharedIndexInformer {
				return dynamicinformer.NewFilteredDynamicInformer(dyn, gvr, ns, 0, indexers, nil).Informer()
			}
		}
		in, err := door.Open(watches.Workloads(k), newInformer, transform)
		if err != nil {
			return nil, err
		}
		informers[k.Kind] = in
	}
	return informers, nil
}

// run starts the gate and the informers; each informer starts once the namespaces'
// modes are known: what confighash does not act on is kept as its key alone.
func (w *workloads) run(ctx context.Context) {
	w.gate.Run(ctx)
	for _, in := range w.byKind {
		in.Run(ctx)
	}
}

func (w *workloads) synced() bool {
	if !w.gate.HasSynced() {
		return false
	}
	for _, in := range w.byKind {
		if !in.HasSynced() {
			return false
		}
	}
	return true
}

// watches reports whether the kind's informers run: the API server served it.
func (w *workloads) watches(kind string) bool {
	_, ok := w.byKind[kind]
	return ok
}

// handle adds the handler to the informers of every kind.
func (w *workloads) handle(h cache.ResourceEventHandlerDetailedFuncs) error {
	// The generation moves once the store holds the object, before the handler runs:
	// a memo filled from the store before then is let go, and the users the handler
	// wakes read the store anew. Moved when the object is taken in, before the store
	// holds it, a memo filled in between held until the next change of any workload.
	stored := cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { w.generation.Add(1); h.AddFunc(obj, initial) },
		UpdateFunc: func(old, obj any) { w.generation.Add(1); h.UpdateFunc(old, obj) },
		DeleteFunc: func(obj any) { w.generation.Add(1); h.DeleteFunc(obj) },
	}
	for _, in := range w.byKind {
		if err := in.AddEventHandler(stored); err != nil {
			return err
		}
	}
	return nil
}

// mode is the namespace's mode.
func (w *workloads) mode(namespace string) confighash.Mode { return w.gate.Mode(namespace) }

// generations are the counts of the changes of the workloads, and of the namespaces'
// modes and pacing.
func (w *workloads) generations() (workloads, namespaces uint64) {
	return w.generation.Load(), w.namespaces.Load()
}

// modeChanged counts a change of the namespace's mode or pacing, and reports whether
// its workloads are to be checked now. Where confighash now acts on more than it kept
// there, they are read again first, then checked (relist).
func (w *workloads) modeChanged(namespace string) bool {
	w.namespaces.Add(1)
	switch {
	case w.kept.rose(namespace):
		w.relists.Add(namespace, slices.Collect(maps.Keys(w.byKind))...)
	case w.relists.Needed(namespace):
		w.relists.Add(namespace)
	default:
		return true
	}
	return false
}

// relistWith reads these sets of informers of a namespace again, with the workloads',
// when confighash starts acting on more of it.
func (w *workloads) relistWith(sets map[string]*watches.Informers, log zerolog.Logger) {
	maps.Copy(sets, w.byKind)
	w.relists = watches.NewRelists(sets, log)
}

// relist reads namespaces again as they are asked for, until ctx is done; done is told
// of each namespace read.
func (w *workloads) relist(ctx context.Context, done func(namespace string)) {
	w.relists.Run(ctx, w.relisted, done)
}

// relisted counts a set of informers swapped in by a relist: a workload kind's moves
// the workloads' generation, which the waves' memos hold on.
func (w *workloads) relisted(set string) {
	if w.watches(set) {
		w.generation.Add(1)
		w.metrics.Relisted()
	}
}

// acts reports whether the watcher acts on the workload: confighash acts on it in its
// namespace, it is not being deleted, and it is not a Job a controller made (a
// CronJob's next one reads the new data).
func (w *workloads) acts(v *view) bool {
	_, acts := v.PolicyIn(w.gate.Mode(v.Namespace))
	return acts && !v.Deleting && !v.Owned
}

// lookup returns the cached view of the workload, or nil.
func (w *workloads) lookup(key workloadKey) *view {
	in, ok := w.byKind[key.Kind]
	if !ok {
		return nil
	}
	inf := in.For(key.Namespace)
	if inf == nil {
		return nil
	}
	obj, exists, err := inf.GetStore().GetByKey(key.Namespace + "/" + key.Name)
	v, isView := obj.(*view)
	if err != nil || !exists || !isView {
		return nil
	}
	return v
}

// all returns every workload confighash acts on.
func (w *workloads) all() []*view {
	var out []*view
	for _, in := range w.byKind {
		for _, obj := range in.List() {
			if v, ok := obj.(*view); ok && w.acts(v) {
				out = append(out, v)
			}
		}
	}
	return out
}

// views returns the views of the namespace, acted on or not.
func (w *workloads) views(namespace string) []*view {
	var out []*view
	for _, in := range w.byKind {
		inf := in.For(namespace)
		if inf == nil {
			continue
		}
		objs, _ := inf.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
		for _, obj := range objs {
			if v, ok := obj.(*view); ok {
				out = append(out, v)
			}
		}
	}
	return out
}

// inNamespace returns the workloads confighash acts on in the namespace that match,
// when match is given.
func (w *workloads) inNamespace(namespace string, match func(*view) bool) []*view {
	var out []*view
	for _, v := range w.views(namespace) {
		if (match == nil || match(v)) && w.acts(v) {
			out = append(out, v)
		}
	}
	return out
}

// users returns the workloads confighash acts on that may use the source: those that
// reference or name it, and those with a name pattern it matches.
func (w *workloads) users(namespace string, ref confighash.SourceRef) []*view {
	return w.inNamespace(namespace, func(v *view) bool { return v.MayUse(ref) })
}

// rolloutFor reads the rollouts of the workloads whose selectors select the pod: the
// fewest pods down that any allows (1 when none says), whether any replaces pods, and
// the one whose pod template made it.
func (w *workloads) rolloutFor(p *podView) podRollout {
	r := podRollout{maxUnavailable: unknownUnavailable}
	for _, v := range w.views(p.Namespace) {
		if v.Selector == "" {
			continue
		}
		if sel, err := labels.Parse(v.Selector); err != nil || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		r.replacing = r.replacing || v.Replacing
		if v.Pods != unknownPods && made(v, p) {
			r.owner = v
		}
		if v.MaxUnavailable != unknownUnavailable && (r.maxUnavailable == unknownUnavailable || v.MaxUnavailable < r.maxUnavailable) {
			r.maxUnavailable = v.MaxUnavailable
		}
	}
	if r.maxUnavailable == unknownUnavailable {
		r.maxUnavailable = 1
	}
	return r
}

// podRollout is what the rollout of the workload that selects a pod says of its
// restarts in place: how many of its controller's pods may be down at once, whether
// the rollout replaces them anyway, and the workload whose pod template made the pod,
// where its status counts that controller's pods (nil elsewhere).
type podRollout struct {
	maxUnavailable int
	replacing      bool
	owner          *view
}

// made reports whether the workload's pod template made the pod: its controller is
// the workload, or, for a Deployment, the ReplicaSet it names after that template's
// hash, which the pod is labelled with.
func made(v *view, p *podView) bool {
	return p.Group == v.UID || v.Kind.Kind == confighash.Deployment.Kind &&
		p.Owner == "ReplicaSet/"+v.Name+"-"+p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
}

// touch patches the trigger annotation, and the others given, on the workload's
// metadata, so the API server admits it again through the webhook, and returns the
// admitted workload.
func (w *workloads) touch(ctx context.Context, v *view, trig []confighash.Trigger, others map[string]any) (*view, error) {
	return w.patch(ctx, v, touchPatch(trig, others))
}

// touchPatch is the merge patch of a touch: the trigger, and other annotations.
func touchPatch(trig []confighash.Trigger, others map[string]any) map[string]any {
	annotations := map[string]any{confighash.AnnotationTrigger: confighash.FormatTriggers(trig)}
	maps.Copy(annotations, others)
	return annotationsPatch(annotations)
}

// patch writes a merge patch of the workload and returns it as admitted; nil when it
// was deleted meanwhile.
func (w *workloads) patch(ctx context.Context, v *view, patch map[string]any) (*view, error) {
	body, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	opts := metav1.PatchOptions{FieldManager: FieldManager}
	var obj runtime.Object
	if typed, ok := typedPatches[v.Kind.GroupVersionKind]; ok {
		obj, err = typed(ctx, w.client, v.Namespace, v.Name, body, opts)
	} else {
		obj, err = w.resource(v).Patch(ctx, v.Name, types.MergePatchType, body, opts)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil // deleted meanwhile: nothing to converge
	}
	if err != nil {
		return nil, fmt.Errorf("patch %s %s/%s: %w", v.Kind.Kind, v.Namespace, v.Name, err)
	}
	admitted, err := w.toView(obj)
	if err != nil {
		return nil, err
	}
	av, ok := admitted.(*view)
	if !ok {
		return nil, fmt.Errorf("patch %s %s/%s: unreadable response", v.Kind.Kind, v.Namespace, v.Name)
	}
	return av, nil
}

// resource is the client of a workload of a kind without Go types.
func (w *workloads) resource(v *view) dynamic.ResourceInterface {
	return w.dynamic.Resource(v.Kind.GroupVersion().WithResource(v.Kind.Resource)).Namespace(v.Namespace)
}

func annotationPatch(name string, value any) map[string]any {
	return annotationsPatch(map[string]any{name: value})
}

// annotationsPatch is a merge patch of these annotations of the metadata; a nil
// value removes one.
func annotationsPatch(annotations map[string]any) map[string]any {
	return map[string]any{"metadata": map[string]any{"annotations": annotations}}
}

// hashPatch is a merge patch of the hash on a workload's pod template, nested along
// its kind's template path, and of metadata on the workload's own.
func hashPatch(kind *confighash.Kind, hash string, metadata map[string]any) map[string]any {
	nested := map[string]any{"metadata": map[string]any{"annotations": map[string]any{confighash.AnnotationHash: hash}}}
	for i := len(kind.TemplatePath) - 1; i >= 1; i-- {
		nested = map[string]any{kind.TemplatePath[i]: nested}
	}
	return map[string]any{"metadata": metadata, kind.TemplatePath[0]: nested}
}

// Served reports whether the API server serves the resource, as a CRD is once
// installed. The group not being served is not an error.
func Served(client kubernetes.Interface, gvr schema.GroupVersionResource) (bool, error) {
	list, err := client.Discovery().ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			return true, nil
		}
	}
	return false, nil
}

// namespacesLimits bound the list of the cluster's namespaces, their metadata alone, a
// page at a time: only the names of those confighash acts in are kept.
var namespacesLimits = bounded.Limits{Page: 500, PageBytes: 4 << 20, Items: 1 << 20, Bytes: 1 << 30}

// actingNamespaces returns the namespaces confighash acts in: those it watches, or,
// for a cluster-wide install, those the cluster has, in the mode they are in now. It
// counts the calls it makes in calls, if not nil.
func (w *workloads) actingNamespaces(ctx context.Context, calls *int) ([]string, error) {
	acting := func(names []string) []string {
		return slices.DeleteFunc(names, func(ns string) bool { return w.gate.Mode(ns) == confighash.ModeOff })
	}
	if len(w.watched) > 0 {
		return acting(slices.Clone(w.watched)), nil
	}
	var names []string
	res := bounded.Resource{GroupVersionResource: corev1.SchemeGroupVersion.WithResource("namespaces")}
	err := bounded.Each(ctx, w.reads, res, metav1.ListOptions{}, namespacesLimits, func(page []metav1.PartialObjectMetadata) error {
		if calls != nil {
			*calls++
		}
		for _, ns := range page {
			names = append(names, ns.Name)
		}
		names = acting(names)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	return names, nil
}

// byNamespace indexes the views by namespace; keys alone are not indexed, since
// nothing looks them up by namespace.
func byNamespace(obj any) ([]string, error) {
	if v, ok := obj.(*view); ok {
		return []string{v.Namespace}, nil
	}
	return nil, nil
}

// keptKeys remembers, per namespace, the lowest mode a workload there was kept as its
// key alone under: when the namespace's mode rises above it, those workloads must be
// read again, since what confighash now acts on was not kept.
type keptKeys struct {
	gate namespaces.Gate

	mu     sync.Mutex
	lowest map[string]confighash.Mode
}

func newKeptKeys(gate namespaces.Gate) *keptKeys {
	return &keptKeys{gate: gate, lowest: map[string]confighash.Mode{}}
}

// transform keeps only the key of a workload confighash does not act on in its
// namespace's current mode, and the view full makes of the others, and of every
// workload of a namespace not read yet. A workload of a namespace confighash does not
// act in never gets here: the door keeps its key alone, unread (watches.Door).
func (k *keptKeys) transform(full cache.TransformFunc) cache.TransformFunc {
	return func(obj any) (any, error) {
		out, err := full(obj)
		v, ok := out.(*view)
		if err != nil || !ok || !k.gate.Known(v.Namespace) {
			return out, err
		}
		mode := k.gate.Mode(v.Namespace)
		// One with bad annotations is kept whole, to be told: a typo may be what keeps
		// it from opting in. It costs its own namespace.
		if _, acts := v.PolicyIn(mode); acts || len(v.Problems) > 0 {
			return v, nil
		}
		k.keep(v.Namespace, mode)
		// Read again after the mark: a mode that rose meanwhile either is seen here,
		// or finds the mark and has the namespace read again.
		if k.gate.Mode(v.Namespace) != mode {
			return v, nil
		}
		return watches.KeyOf(v.Namespace, v.Name), nil
	}
}

func (k *keptKeys) keep(namespace string, mode confighash.Mode) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if lowest, ok := k.lowest[namespace]; !ok || mode < lowest {
		k.lowest[namespace] = mode
	}
}

// rose reports whether the namespace's mode rose above one a workload there was kept
// as its key under, and forgets it: the caller reads the namespace again.
func (k *keptKeys) rose(namespace string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	lowest, ok := k.lowest[namespace]
	if !ok || lowest >= k.gate.Mode(namespace) {
		return false
	}
	delete(k.lowest, namespace)
	return true
}
