package watcher

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"

	kwhmodel "github.com/slok/kubewebhook/v2/pkg/model"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
	"github.com/confighash/confighash/watches"
	"github.com/confighash/confighash/webhook"
)

// The harness runs a Watcher made by New on a fake clientset and lets a test check one
// workload at a time with sync. The fake plays the API server's part: the webhook (the
// real Mutator, reading the same objects) admits each write of a workload, and the
// API server's own resourceVersions, UIDs and generations are stamped. The test plays
// the controllers' part: a new pod template rolls out only when it says so.
//
// It reaches the watcher only through New, Run, Synced, sync and processNext, and reads
// what happened from the fake, so that it holds while the watcher's insides move.

// harnessNamespace is where every object of a harness lives: opted in.
const harnessNamespace = "shop"

// harnessProbe is a Deployment with a bad annotation the watcher tells of once per
// resourceVersion: the harness's way to know what the watcher's informer holds.
const harnessProbe = "probe"

// harnessBarrier names the ConfigMap and the Secret the harness changes after
// another: once the watcher is told of their change, its handler of the other's has
// returned.
const harnessBarrier = "barrier"

type harness struct {
	t   *testing.T
	ctx context.Context
	w   *Watcher
	// cfg is the watcher's; stop stops it.
	cfg  Config
	stop context.CancelFunc
	// client is the watcher's; its tracker holds the objects.
	client  *fake.Clientset
	mutator *webhook.Mutator
	// admits is set while the webhook answers; unset, it fails open: each write is
	// allowed unchanged.
	admits  atomic.Bool
	events  *harnessEvents
	metrics *harnessMetrics

	mu sync.Mutex
	// rv is the last resourceVersion the API server gave, uids how many objects it made.
	rv, uids int
	// touches counts the watcher's patches of each workload that set its trigger,
	// rollouts the changes of its pod template's hash, creates its creates.
	touches, rollouts, creates map[workloadKey]int
}

// newHarness starts a watcher configured as cfg, in a namespace holding objects, made
// through the API server's admission in their order, a ConfigMap and a Secret the
// harness changes, and its probe.
func newHarness(t *testing.T, cfg Config, objects ...runtime.Object) *harness {
	t.Helper()
	key, err := confighash.NewKey(bytes.Repeat([]byte("k"), confighash.MinKeySize))
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: harnessNamespace,
		Labels: map[string]string{confighash.InjectionLabel: confighash.InjectionEnabled}}}
	h := &harness{t: t, ctx: t.Context(), client: fake.NewClientset(ns), events: &harnessEvents{}, metrics: &harnessMetrics{changed: map[confighash.SourceKind]int{}},
		touches: map[workloadKey]int{}, rollouts: map[workloadKey]int{}, creates: map[workloadKey]int{}}
	// The webhook reads through a clientset of its own on the same objects: a reactor
	// runs under the fake's lock, which a read through the watcher's clientset takes.
	reads := &fake.Clientset{}
	reads.AddReactor("*", "*", k8stesting.ObjectReaction(h.client.Tracker()))
	if h.mutator, err = webhook.New(webhook.Config{Key: key, Reader: webhook.NewLiveReader(reads, watches.Door{}, sourcecache.Filter{}, nil, nil)}); err != nil {
		t.Fatal(err)
	}
	h.admits.Store(true)
	h.client.PrependReactor("*", "*", h.apiServer)

	probe := harnessDeployment(harnessProbe, map[string]string{confighash.AnnotationPausePeriod: "soon"})
	barriers := []runtime.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: harnessBarrier}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: harnessBarrier}},
	}
	for _, obj := range append(append(barriers, probe), objects...) {
		h.create(obj)
	}

	cfg.Client, cfg.Key, cfg.Events, cfg.Metrics, cfg.Log = h.client, key, h.events, h.metrics, zerolog.Nop()
	// Required; no worker runs: the test takes the workloads from the queue, if at all.
	cfg.Workers, cfg.TouchRate = 1, 1000
	if cfg.HealAfter == 0 {
		cfg.HealAfter = 3
	}
	h.cfg = cfg
	h.start()
	return h
}

// start starts a watcher on the API server: it knows only what the objects say.
func (h *harness) start() {
	h.t.Helper()
	w, err := New(h.cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(h.ctx)
	h.w, h.stop = w, stop
	go func() { _ = w.Run(ctx) }()
	waitUntil(h.t, w.Synced)
	h.sync(harnessKey(confighash.Deployment, harnessProbe)) // told of its first version
}

// failOver stops the watcher and starts another, as a new leader takes over.
func (h *harness) failOver() {
	h.t.Helper()
	h.stop()
	h.start()
}

// harnessKey names a workload of the harness's namespace.
func harnessKey(kind confighash.Kind, name string) workloadKey {
	return workloadKey{kind.Kind, harnessNamespace, name}
}

// harnessDeployment is a Deployment that opts in, with annotations, whose pods use the
// ConfigMaps named through envFrom; rolled out.
func harnessDeployment(name string, annotations map[string]string, configMaps ...string) *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{confighash.AnnotationInject: "true"}}}
	for k, v := range annotations {
		d.Annotations[k] = v
	}
	d.Spec.Template.Spec = harnessPod(configMaps...)
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}
	return d
}

// harnessPod is a pod whose container reads the ConfigMaps named through envFrom.
func harnessPod(configMaps ...string) corev1.PodSpec {
	c := corev1.Container{Name: "app"}
	for _, cm := range configMaps {
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}})
	}
	return corev1.PodSpec{Containers: []corev1.Container{c}}
}

// harnessConfigMap is a ConfigMap holding a value, with annotations.
func harnessConfigMap(name string, annotations map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}, Data: map[string]string{"value": "0"}}
}

// create makes the object in the harness's namespace, as a user's create would.
func (h *harness) create(obj runtime.Object) {
	h.t.Helper()
	o, err := meta.Accessor(obj)
	if err != nil {
		h.t.Fatal(err)
	}
	o.SetNamespace(harnessNamespace)
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil {
		h.t.Fatal(err)
	}
	gvr, _ := meta.UnsafeGuessKindToResource(gvks[0])
	if _, ok := harnessKindOf(gvr.Resource); !ok {
		o.SetResourceVersion(h.nextRV()) // the workloads' are stamped at their admission
	}
	if _, err := h.client.Invokes(k8stesting.NewCreateAction(gvr, harnessNamespace, obj), nil); err != nil {
		h.t.Fatalf("create %s %s: %v", gvr.Resource, o.GetName(), err)
	}
}

func (h *harness) nextRV() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rv++
	return strconv.Itoa(1000 + h.rv)
}

// harnessKindOf is the built-in workload kind of a resource; harnessKindNamed, of a kind.
func harnessKindOf(resource string) (confighash.Kind, bool) {
	for _, k := range confighash.Builtin {
		if k.Resource == resource {
			return k, true
		}
	}
	return confighash.Kind{}, false
}

// apiServer writes the workloads as the API server does: a create, an update or a merge
// patch is admitted through the webhook, then stamped with a resourceVersion, a UID
// once, and a generation that moves with the spec; a write of the status changes the
// status alone. It counts the watcher's touches and the rollouts. (A Deployment's
// generation moves with its annotations too, and its controller observes that at once:
// to a wave, the same.)
func (h *harness) apiServer(a k8stesting.Action) (bool, runtime.Object, error) {
	kind, ok := harnessKindOf(a.GetResource().Resource)
	if !ok || a.GetSubresource() != "" && a.GetSubresource() != "status" {
		return false, nil, nil
	}
	gvr, ns := a.GetResource(), a.GetNamespace()
	var old, next map[string]any
	var err error
	switch a := a.(type) {
	case k8stesting.CreateActionImpl:
		next, err = runtime.DefaultUnstructuredConverter.ToUnstructured(a.GetObject())
	case k8stesting.UpdateActionImpl:
		if next, err = runtime.DefaultUnstructuredConverter.ToUnstructured(a.GetObject()); err == nil {
			old, err = h.stored(gvr, ns, (&unstructured.Unstructured{Object: next}).GetName())
		}
	case k8stesting.PatchActionImpl:
		if a.GetPatchType() != types.MergePatchType {
			return false, nil, nil
		}
		if old, err = h.stored(gvr, ns, a.GetName()); err == nil {
			next, err = harnessMergePatch(old, a.GetPatch())
		}
	default:
		return false, nil, nil
	}
	if err != nil {
		return true, nil, err
	}
	if a.GetSubresource() == "status" {
		status := next["status"]
		next = runtime.DeepCopyJSON(old)
		next["status"] = status
	}
	u := &unstructured.Unstructured{Object: next}
	u.SetGroupVersionKind(kind.GroupVersionKind) // what the webhook reads the kind from
	if a.GetSubresource() == "" && h.admits.Load() {
		if u, err = h.admit(kind, u, old); err != nil {
			return true, nil, err
		}
	}
	u.SetResourceVersion(h.nextRV())
	if old == nil {
		h.mu.Lock()
		h.uids++
		u.SetUID(types.UID(fmt.Sprint("uid-", h.uids)))
		h.mu.Unlock()
		u.SetGeneration(1)
	} else {
		was := &unstructured.Unstructured{Object: old}
		u.SetUID(was.GetUID())
		u.SetGeneration(was.GetGeneration())
		// Compared as JSON: a patched object's numbers are decoded as floats.
		before, _ := json.Marshal(old["spec"])
		after, _ := json.Marshal(u.Object["spec"])
		if !bytes.Equal(before, after) {
			u.SetGeneration(was.GetGeneration() + 1)
		}
	}
	obj, err := scheme.Scheme.New(kind.GroupVersionKind)
	if err != nil {
		return true, nil, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return true, nil, err
	}
	if old == nil {
		err = h.client.Tracker().Create(gvr, obj, ns)
	} else {
		err = h.client.Tracker().Update(gvr, obj, ns)
	}
	if err != nil {
		return true, nil, err
	}
	h.count(workloadKey{kind.Kind, ns, u.GetName()}, kind, a, old, u.Object)
	return true, obj, nil
}

// admit applies the webhook's answer to the review of the write of u over old (nil
// for a create), as the API server applies a mutating webhook's JSON patch.
func (h *harness) admit(kind confighash.Kind, u *unstructured.Unstructured, old map[string]any) (*unstructured.Unstructured, error) {
	raw, err := u.MarshalJSON()
	if err != nil {
		return nil, err
	}
	gvk := kind.GroupVersionKind
	review := kwhmodel.AdmissionReview{ID: "review", Name: u.GetName(), Namespace: u.GetNamespace(), Operation: kwhmodel.OperationCreate,
		RequestGVK: &metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind}, NewObjectRaw: raw}
	if old != nil {
		review.Operation = kwhmodel.OperationUpdate
		if review.OldObjectRaw, err = json.Marshal(old); err != nil {
			return nil, err
		}
	}
	resp, err := h.mutator.Review(context.Background(), review)
	if err != nil {
		return nil, err
	}
	patch, err := jsonpatch.DecodePatch(resp.(*kwhmodel.MutatingAdmissionResponse).JSONPatchPatch)
	if err != nil {
		return nil, err
	}
	admitted, err := patch.Apply(raw)
	if err != nil {
		return nil, err
	}
	out := &unstructured.Unstructured{}
	return out, out.UnmarshalJSON(admitted)
}

// count notes a touch, when the watcher's patch set the trigger, a create, and a
// rollout, when the write changed the hash on an existing workload's pod template.
func (h *harness) count(key workloadKey, kind confighash.Kind, a k8stesting.Action, old, next map[string]any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p, ok := a.(k8stesting.PatchActionImpl); ok {
		var patch struct {
			Metadata struct {
				Annotations map[string]any `json:"annotations"`
			} `json:"metadata"`
		}
		if json.Unmarshal(p.GetPatch(), &patch) == nil {
			if _, ok := patch.Metadata.Annotations[confighash.AnnotationTrigger]; ok {
				h.touches[key]++
			}
		}
	}
	switch {
	case old == nil:
		h.creates[key]++
	case harnessTemplateHash(old, kind) != harnessTemplateHash(next, kind):
		h.rollouts[key]++
	}
}

func harnessTemplateHash(obj map[string]any, kind confighash.Kind) string {
	path := append(append([]string{}, kind.TemplatePath...), "metadata", "annotations", confighash.AnnotationHash)
	hash, _, _ := unstructured.NestedString(obj, path...)
	return hash
}

func harnessMergePatch(old map[string]any, patch []byte) (map[string]any, error) {
	raw, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	if raw, err = jsonpatch.MergePatch(raw, patch); err != nil {
		return nil, err
	}
	out := map[string]any{}
	return out, json.Unmarshal(raw, &out)
}

// stored returns what the API server holds of the object.
func (h *harness) stored(gvr schema.GroupVersionResource, ns, name string) (map[string]any, error) {
	obj, err := h.client.Tracker().Get(gvr, ns, name)
	if err != nil {
		return nil, err
	}
	return runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
}

// sync checks the workload as a worker would.
func (h *harness) sync(key workloadKey) {
	h.t.Helper()
	if err := h.w.sync(h.ctx, key); err != nil {
		h.t.Fatalf("sync %s: %v", key, err)
	}
}

// next lets a worker take the next workload from the watcher's queue and check it,
// waiting for one at most a few seconds.
func (h *harness) next() {
	h.t.Helper()
	done := make(chan bool, 1)
	go func() { done <- h.w.processNext(h.ctx) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		h.t.Fatal("no workload was queued")
	}
}

// change changes the data of the source, and returns once the watcher's handler of
// that change has returned: the handlers of one kind of source are called in turn,
// and the barrier's change is told after it.
func (h *harness) change(kind confighash.SourceKind, name string) {
	h.t.Helper()
	before := h.metrics.changes(kind)
	for _, name := range []string{name, harnessBarrier} {
		var err error
		rv := h.nextRV()
		switch kind {
		case confighash.ConfigMap:
			cms := h.client.CoreV1().ConfigMaps(harnessNamespace)
			var cm *corev1.ConfigMap
			if cm, err = cms.Get(h.ctx, name, metav1.GetOptions{}); err == nil {
				cm.ResourceVersion, cm.Data = rv, map[string]string{"value": rv}
				_, err = cms.Update(h.ctx, cm, metav1.UpdateOptions{})
			}
		case confighash.Secret:
			secrets := h.client.CoreV1().Secrets(harnessNamespace)
			var s *corev1.Secret
			if s, err = secrets.Get(h.ctx, name, metav1.GetOptions{}); err == nil {
				s.ResourceVersion, s.Data = rv, map[string][]byte{"value": []byte(rv)}
				_, err = secrets.Update(h.ctx, s, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			h.t.Fatalf("change %s %s: %v", kind, name, err)
		}
	}
	waitUntil(h.t, func() bool { return h.metrics.changes(kind) >= before+2 })
}

// write writes the Deployment as a user would, changing a label: the API server
// admits it through the webhook.
func (h *harness) write(key workloadKey) {
	h.t.Helper()
	d, err := h.client.AppsV1().Deployments(key.Namespace).Get(h.ctx, key.Name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	d.Labels = map[string]string{"written": h.nextRV()}
	if _, err := h.client.AppsV1().Deployments(key.Namespace).Update(h.ctx, d, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// caughtUp returns once the watcher's informer of Deployments holds every write made
// so far: it holds a write of the probe, made after them, once it tells of it.
func (h *harness) caughtUp() {
	h.t.Helper()
	probe := harnessKey(confighash.Deployment, harnessProbe)
	told := h.events.count(probe, "BadAnnotation")
	h.write(probe)
	waitUntil(h.t, func() bool {
		h.sync(probe)
		return h.events.count(probe, "BadAnnotation") > told
	})
}

// rollOut plays the Deployment controller: the rollout of the workload's pod template
// finishes, or fails past its progress deadline.
func (h *harness) rollOut(key workloadKey, failed bool) {
	h.t.Helper()
	deployments := h.client.AppsV1().Deployments(key.Namespace)
	d, err := deployments.Get(h.ctx, key.Name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}
	if failed {
		d.Status.AvailableReplicas = 0
		d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}
	}
	if _, err := deployments.UpdateStatus(h.ctx, d, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// touchesOf counts the watcher's touches of the workload; rolloutsOf, its rollouts;
// createsOf, the times it was made.
func (h *harness) touchesOf(key workloadKey) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.touches[key]
}

func (h *harness) rolloutsOf(key workloadKey) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rollouts[key]
}

func (h *harness) createsOf(key workloadKey) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.creates[key]
}

// workload returns the workload as the API server holds it.
func (h *harness) workload(key workloadKey) *unstructured.Unstructured {
	h.t.Helper()
	k, _ := harnessKindNamed(key.Kind)
	obj, err := h.stored(k.GroupVersion().WithResource(k.Resource), key.Namespace, key.Name)
	if err != nil {
		h.t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

// annotation returns the annotation of the workload; hash, the hash on its pod template.
func (h *harness) annotation(key workloadKey, name string) string {
	return h.workload(key).GetAnnotations()[name]
}

func (h *harness) hash(key workloadKey) string {
	k, _ := harnessKindNamed(key.Kind)
	return harnessTemplateHash(h.workload(key).Object, k)
}

// status returns the status the watcher wrote on the workload.
func (h *harness) status(key workloadKey) confighash.Status {
	h.t.Helper()
	s, err := confighash.ParseStatus(h.annotation(key, confighash.AnnotationStatus))
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

func harnessKindNamed(kind string) (confighash.Kind, bool) {
	for _, k := range confighash.Builtin {
		if k.Kind == kind {
			return k, true
		}
	}
	return confighash.Kind{}, false
}

// harnessEvents keeps the Events the watcher sends, with the object each is about,
// which record.FakeRecorder's text leaves out.
type harnessEvents struct {
	mu  sync.Mutex
	all []harnessEvent
}

type harnessEvent struct{ kind, name, reason string }

func (e *harnessEvents) Event(obj runtime.Object, _, reason, _ string) {
	var kind, name string
	if ref, ok := obj.(*corev1.ObjectReference); ok {
		kind, name = ref.Kind, ref.Name
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, harnessEvent{kind, name, reason})
}

func (e *harnessEvents) Eventf(obj runtime.Object, _, reason, _ string, _ ...any) {
	e.Event(obj, "", reason, "")
}

func (e *harnessEvents) AnnotatedEventf(obj runtime.Object, _ map[string]string, _, reason, _ string, _ ...any) {
	e.Event(obj, "", reason, "")
}

// count counts the Events of the reason about the workload.
func (e *harnessEvents) count(key workloadKey, reason string) int {
	return len(e.of(key.Kind, key.Name, reason))
}

// of returns the Events of the reason about the object of that kind and name.
func (e *harnessEvents) of(kind, name, reason string) []harnessEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []harnessEvent
	for _, ev := range e.all {
		if ev.kind == kind && ev.name == name && ev.reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

// harnessMetrics counts the source changes the watcher's handlers were told of.
type harnessMetrics struct {
	NoopRecorder
	mu      sync.Mutex
	changed map[confighash.SourceKind]int
}

func (m *harnessMetrics) SourceChanged(kind confighash.SourceKind) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.changed[kind]++
}

func (m *harnessMetrics) changes(kind confighash.SourceKind) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed[kind]
}
