package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/watches"
)

// Each tenant's kind is flooded with floodBytes of objects of about objectBytes each,
// in a namespace confighash does not act in, then in one it acts in. The flood of one
// kind may move either component's peak RSS by kindMiB at most, the flood of every kind
// of one namespace by floodMiB (docs/security.md): each object is kept as its name, or
// as its digests, and what stays is client-go's buffer of each watch, as large as the
// largest object it carried.
const (
	floodBytes  = 64 << 20
	objectBytes = 1 << 20
	kindMiB     = 32
	floodMiB    = 64
	// admittingMiB bounds the webhook's peak while it admits the flood's opted-in
	// workloads, under the install's limit of 256 Mi.
	admittingMiB = 200
	// relistMiB bounds a watcher started after both floods, which lists them at once:
	// three quarters of the install's limit of 256 Mi.
	relistMiB = 192
)

// floodLeases are long: a flood on a shared 2-core machine can hold the API server
// past the install's 10 s renew deadline, and a watcher that steps down exits, to be
// started again by its Deployment, which the test does not run.
var floodLeases = []string{"--leader-elect-lease-duration=60s", "--leader-elect-renew-deadline=45s", "--leader-elect-retry-period=5s"}

// TestAFloodOfEveryWatchedKindCostsOnlyItsBound (rule 13, issue 52): for every kind of
// a tenant's objects in watches.Kinds, 64 MiB of objects of about 1 MiB, made as large
// as each kind allows, in a namespace confighash does not act in, then in one it acts
// in. A kind added to the list is flooded here without a new test (the test fails for
// one it cannot make objects of). Each component's peak RSS moves by at most 32 MiB
// for the first flood, and by at most what docs/security.md says the second may cost;
// during each, a change in a third namespace rolls its user exactly once. Before the
// door, 60 labelled pods of 1.2 MB in a namespace not acted in took the watcher from
// 44 to 202 MiB.
func TestAFloodOfEveryWatchedKindCostsOnlyItsBound(t *testing.T) {
	c := isolatedCluster(t, "deployment", "replicaset") // the rollout of a change elsewhere
	// Every kind of the list is served: the CSI driver's pod statuses and Argo's
	// Rollouts too, their CRDs installed before the watcher starts.
	if err := c.InstallSecretsStoreCRDs(t.Context()); err != nil {
		t.Fatal(err)
	}
	installRolloutCRD(t, c)
	wh := startWebhook(t, c, "--profiling")
	w := startWatcher(t, c, append([]string{"--profiling"}, floodLeases...)...)
	victim := usedConfigMap(t, c)
	create := newCreator(c)
	components := map[string]int{"webhook": wh.cmd.Process.Pid, "watcher": w.cmd.Process.Pid}
	peaks := func() map[string]float64 {
		out := map[string]float64{}
		for name, pid := range components {
			out[name] = peakRSSMiB(t, pid)
		}
		return out
	}
	start := peaks()
	t.Logf("before the floods: webhook %.1f MiB, watcher %.1f MiB (peak RSS)", start["webhook"], start["watcher"])

	rollouts := 1
	for _, phase := range []struct {
		name string
		make func(testing.TB, *cluster.Cluster) string
	}{
		{"not acted in", func(t testing.TB, c *cluster.Cluster) string { return namespace(t, c, nil) }},
		{"acted in", labeledNamespace},
	} {
		ns := phase.make(t, c)
		before := peaks()
		began := time.Now()
		for _, kind := range watches.Kinds {
			if kind.Scope != watches.Tenant || kind.Resource.Resource == "" {
				continue // another namespace's, or of a kind an install adds
			}
			served, err := resourceServed(c, kind)
			if err != nil {
				t.Fatal(err)
			}
			if !served {
				t.Fatalf("%s: not served by the flood's control plane: install its CRD in the test", kind.Name)
			}
			made, prev := time.Now(), peaks()
			flood(t, create, kind, ns)
			time.Sleep(time.Second) // the informers take the last events in
			now := peaks()
			t.Logf("| %s | %s | %d of %d KiB | %.1f (+%.1f), heap %.1f | %.1f (+%.1f), heap %.1f | %.0fs |", kind.Name, phase.name, floodBytes/objectBytes, objectBytes>>10,
				now["webhook"], now["webhook"]-prev["webhook"], wh.liveHeap(t)/(1<<20), now["watcher"], now["watcher"]-prev["watcher"], w.liveHeap(t)/(1<<20), time.Since(made).Seconds())
			for name := range components {
				if name == "webhook" && phase.name == "acted in" {
					continue // it admits them too: bounded by the admissions in flight, below
				}
				if moved := now[name] - prev[name]; moved > kindMiB {
					t.Errorf("a flood of %s in a namespace %s moved the %s's peak RSS by %.1f MiB, want at most %d", kind.Name, phase.name, name, moved, kindMiB)
				}
			}
		}
		// Another namespace's change rolls its user exactly once, during the flood.
		rollouts++
		setKey(t, c, victim, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", fmt.Sprint(rollouts))
		expectReplicaSets(t, c, victim, "web", rollouts)
		after := peaks()
		for name := range components {
			moved := after[name] - before[name]
			t.Logf("flood of a namespace %s, in %.0fs: %s peak RSS %.1f → %.1f MiB (+%.1f)", phase.name, time.Since(began).Seconds(), name, before[name], after[name], moved)
			switch {
			case name == "webhook" && phase.name == "acted in":
				// Each opted-in workload is a review the webhook reads and decodes, as many
				// at once as its bounds on admissions in flight let one namespace have.
				if after[name] > admittingMiB {
					t.Errorf("admitting a flood of 1 MiB workloads took the webhook's peak RSS to %.1f MiB, want under %d (the install's limit is 256 Mi)", after[name], admittingMiB)
				}
			case moved > floodMiB:
				t.Errorf("a flood of every kind in a namespace %s moved the %s's peak RSS by %.1f MiB, want at most %d", phase.name, name, moved, floodMiB)
			}
		}
		for name, pid := range components {
			if err := syscall.Kill(pid, 0); err != nil {
				t.Fatalf("the %s died during the flood: %v", name, err)
			}
		}
	}
	if w.metric(t, "confighash_watcher_leader") != 1 {
		t.Error("the watcher no longer leads")
	}
	// A replica started now lists both floods at once, as a standby, or a watcher
	// restarted, does: what the watch of each object let go, the list must too.
	began := time.Now()
	standby := startComponent(t, c, append(watcherArgs(floodLeases...), "--profiling")...)
	peak := peakRSSMiB(t, standby.cmd.Process.Pid)
	t.Logf("a watcher started after both floods was ready in %.0fs at a peak RSS of %.1f MiB, heap %.1f", time.Since(began).Seconds(), peak, standby.liveHeap(t)/(1<<20))
	if peak > relistMiB {
		t.Errorf("a watcher started after the floods peaked at %.1f MiB while it listed them, want at most %d", peak, relistMiB)
	}
}

// flood makes floodBytes of objects of the kind in ns.
func flood(t *testing.T, create creator, kind watches.Kind, ns string) {
	t.Helper()
	createAll(t, floodBytes/objectBytes, func(i int) (runtime.Object, error) {
		return floodObject(kind, fmt.Sprintf("flood-%s-%03d", strings.ReplaceAll(strings.ToLower(kind.Name), " ", "-"), i))
	}, func(obj runtime.Object) error { return create(kind, ns, obj) })
}

// createAll makes n objects, four at a time, each tried again when the flooded
// control plane times out.
func createAll(tb testing.TB, n int, object func(i int) (runtime.Object, error), create func(runtime.Object) error) {
	tb.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				obj, err := object(i)
				for try := 0; err == nil || transient(err) && try < 3; try++ {
					err = create(obj)
					if try > 0 && apierrors.IsAlreadyExists(err) {
						err = nil // a create that timed out was made
					}
					if !transient(err) {
						break
					}
					time.Sleep(time.Second)
				}
				if err != nil {
					errs <- fmt.Errorf("object %d: %w", i, err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}

// creator makes an object of a kind in a namespace.
type creator func(kind watches.Kind, ns string, obj runtime.Object) error

// newCreator sends the objects of Kubernetes' own kinds in protobuf, which the API
// server decodes several times faster than JSON, and the others in JSON.
func newCreator(c *cluster.Cluster) creator {
	cfg := rest.CopyConfig(c.Config)
	cfg.ContentType = runtime.ContentTypeProtobuf
	pb := kubernetes.NewForConfigOrDie(cfg)
	clients := map[string]rest.Interface{"": pb.CoreV1().RESTClient(), "apps": pb.AppsV1().RESTClient(), "batch": pb.BatchV1().RESTClient(), "policy": pb.PolicyV1().RESTClient()}
	dyn := dynamic.NewForConfigOrDie(c.Config)
	return func(kind watches.Kind, ns string, obj runtime.Object) error {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			_, err := dyn.Resource(kind.Resource).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
			return err
		}
		return clients[kind.Resource.Group].Post().Namespace(ns).Resource(kind.Resource.Resource).Body(obj).Do(context.Background()).Error()
	}
}

// floodObject is an object of the kind of about objectBytes: large values for a
// source, many references and a large value for a pod template, many values for a
// budget's selector; labelled so that the kind's selector selects it.
func floodObject(kind watches.Kind, name string) (runtime.Object, error) {
	meta := metav1.ObjectMeta{Name: name, Labels: selecting(kind.Selector)}
	// Large values, which the API server takes fast; the keys a source may hold are
	// bounded apart (confighash.MaxSourceKeys).
	value := strings.Repeat("v", objectBytes/16)
	keys := map[string]string{}
	for i := range 15 {
		keys[fmt.Sprintf("key-%02d", i)] = value
	}
	// A pod template of many references, as the reproduction's, and one large value.
	spec := corev1.PodSpec{NodeSelector: map[string]string{"flood.example.com/nowhere": "true"},
		Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/app:1", Env: []corev1.EnvVar{{Name: "LARGE", Value: strings.Repeat("v", objectBytes*3/4)}}}}}
	for i := range 1000 {
		spec.Containers[0].Env = append(spec.Containers[0].Env, corev1.EnvVar{Name: fmt.Sprintf("ENV_%06d", i), ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: fmt.Sprintf("key-%06d", i), Optional: ptr.To(true)}}})
	}
	annotations := map[string]string{confighash.AnnotationInject: "true", confighash.AnnotationRestart: confighash.RestartInPlace.String()}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}, Annotations: annotations}, Spec: spec}
	selector := &metav1.LabelSelector{MatchLabels: template.Labels}
	runOnce := *template.DeepCopy()
	runOnce.Spec.RestartPolicy = corev1.RestartPolicyNever
	var obj runtime.Object
	switch kind.Resource.Resource {
	case "configmaps":
		obj = &corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"), ObjectMeta: meta, Data: keys}
	case "secrets":
		obj = &corev1.Secret{TypeMeta: typeMeta("v1", "Secret"), ObjectMeta: meta, StringData: keys}
	case "pods":
		meta.Annotations = annotations
		obj = &corev1.Pod{TypeMeta: typeMeta("v1", "Pod"), ObjectMeta: meta, Spec: spec}
	case "deployments":
		meta.Annotations = annotations
		// Paused: its controller makes no ReplicaSet, a second copy the flood does not need.
		obj = &appsv1.Deployment{TypeMeta: typeMeta("apps/v1", "Deployment"), ObjectMeta: meta,
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Paused: true, Selector: selector, Template: template}}
	case "statefulsets":
		meta.Annotations = annotations
		obj = &appsv1.StatefulSet{TypeMeta: typeMeta("apps/v1", "StatefulSet"), ObjectMeta: meta,
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](0), Selector: selector, Template: template}}
	case "daemonsets":
		obj = &appsv1.DaemonSet{TypeMeta: typeMeta("apps/v1", "DaemonSet"), ObjectMeta: meta, Spec: appsv1.DaemonSetSpec{Selector: selector, Template: template}}
	case "cronjobs":
		meta.Annotations = annotations
		obj = &batchv1.CronJob{TypeMeta: typeMeta("batch/v1", "CronJob"), ObjectMeta: meta, Spec: batchv1.CronJobSpec{Schedule: "0 0 1 1 *", Suspend: ptr.To(true),
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: runOnce}}}}
	case "jobs":
		meta.Annotations = annotations
		obj = &batchv1.Job{TypeMeta: typeMeta("batch/v1", "Job"), ObjectMeta: meta, Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: runOnce}}
	case "rollouts":
		meta.Annotations = annotations
		return toUnstructured(map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": meta,
			"spec": map[string]any{"replicas": 0, "selector": selector, "template": template}})
	case "secretproviderclasspodstatuses":
		// Few objects of long ids: the API server validates a custom resource field by
		// field, slowly; what is read of one is its bytes.
		objects := make([]map[string]string, objectBytes/4096)
		for i := range objects {
			objects[i] = map[string]string{"id": fmt.Sprintf("secret/%02040d", i), "version": fmt.Sprintf("%02040d", i)}
		}
		return toUnstructured(map[string]any{"apiVersion": "secrets-store.csi.x-k8s.io/v1", "kind": "SecretProviderClassPodStatus", "metadata": meta,
			"status": map[string]any{"podName": name, "secretProviderClassName": "vault", "mounted": true, "objects": objects}})
	case "poddisruptionbudgets":
		values := make([]string, 0, objectBytes/len(`"000000000000000000000000000000000000000000000000000000000000000",`))
		for i := range cap(values) {
			values = append(values, fmt.Sprintf("%063d", i))
		}
		obj = &policyv1.PodDisruptionBudget{TypeMeta: typeMeta("policy/v1", "PodDisruptionBudget"), ObjectMeta: meta,
			Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: values}}}}}
	default:
		return nil, fmt.Errorf("the flood cannot make objects of %s (%s): add them to floodObject", kind.Name, kind.Resource)
	}
	return obj, nil
}

// toUnstructured is an object of a kind the API server serves only in JSON.
func toUnstructured(obj any) (runtime.Object, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	return u, u.UnmarshalJSON(data)
}

// transient reports whether a create failed only because the control plane was slow.
func transient(err error) bool {
	return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err)
}

func typeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

// selecting returns labels that the selector selects.
func selecting(selector string) map[string]string {
	out := map[string]string{}
	sel, err := labels.Parse(selector)
	if err != nil {
		return out
	}
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		switch r.Operator() {
		case selection.In, selection.Equals, selection.DoubleEquals:
			out[r.Key()] = r.ValuesUnsorted()[0]
		case selection.Exists:
			out[r.Key()] = "true"
		}
	}
	return out
}

// resourceServed reports whether the control plane serves the kind's resource.
func resourceServed(c *cluster.Cluster, kind watches.Kind) (bool, error) {
	list, err := c.Client.Discovery().ServerResourcesForGroupVersion(kind.Resource.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == kind.Resource.Resource {
			return true, nil
		}
	}
	return false, nil
}

// TestLabelledPodsOfANamespaceNotActedInCostTheWatcherNothing is issue 52's
// reproduction, as a hostile tenant made it: 60 Pending pods of about 1.2 MB (4,500
// optional configMapKeyRef entries each), labelled confighash.dev/restart=in-place, in
// a namespace with no injection label. They took the watcher from 44 to 202 MiB in
// 20 s, its pods' informer keeping every one's parsed references.
func TestLabelledPodsOfANamespaceNotActedInCostTheWatcherNothing(t *testing.T) {
	c := sharedCluster(t)
	if moved := labelledPods(t, c, 60); moved > kindMiB {
		t.Errorf("they moved the watcher's peak RSS by %.1f MiB, want at most %d", moved, kindMiB)
	}
}

// BenchmarkLabelledPodsOfANamespaceNotActedIn is the reproduction at 600 pods.
func BenchmarkLabelledPodsOfANamespaceNotActedIn(b *testing.B) {
	c := cluster.Require(b, testCluster)
	for b.Loop() {
		b.ReportMetric(labelledPods(b, c, 600), "watcher-peak-RSS-growth-MiB")
	}
}

// labelledPods makes n labelled pods of 1.2 MB in a namespace not acted in, checks that
// a change in another namespace still rolls its user once, and returns how far they
// moved the watcher's peak RSS, in MiB.
func labelledPods(tb testing.TB, c *cluster.Cluster, n int) float64 {
	tb.Helper()
	w := startWatcher(tb, c, floodLeases...)
	victim := usedConfigMap(tb, c)
	ns := namespace(tb, c, nil)
	before := peakRSSMiB(tb, w.cmd.Process.Pid)
	env := make([]corev1.EnvVar, 4500)
	for i := range env {
		env[i] = corev1.EnvVar{Name: fmt.Sprintf("CONFIG_VALUE_NUMBER_%06d", i), ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "settings-of-the-application"}, Key: fmt.Sprintf("configuration-key-number-%06d", i), Optional: ptr.To(true)}}}
	}
	create := newCreator(c)
	createAll(tb, n, func(i int) (runtime.Object, error) {
		return &corev1.Pod{TypeMeta: typeMeta("v1", "Pod"), ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("hostile-%03d", i),
			Labels: map[string]string{confighash.LabelRestart: confighash.RestartInPlace.String()}},
			Spec: corev1.PodSpec{NodeSelector: map[string]string{"flood.example.com/nowhere": "true"},
				Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/app:1", Env: env}}}}, nil
	}, func(obj runtime.Object) error { return create(watches.RestartedPods, ns, obj) })
	time.Sleep(3 * time.Second) // the informers take the last events in
	setKey(tb, c, victim, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	// Rolled once: its new ReplicaSet, and no other. Its pod may wait for a scheduler
	// that is going through the pods of the flood, which is not the watcher's to say.
	expectReplicaSetsNoWait(tb, c, victim, "web", 2)
	time.Sleep(quietPeriod)
	if n := replicaSets(tb, c, victim, "web"); n != 2 {
		tb.Errorf("the change in another namespace rolled its user into %d ReplicaSets, want 2", n)
	}
	after := peakRSSMiB(tb, w.cmd.Process.Pid)
	tb.Logf("%d labelled pods of 1.2 MB in a namespace not acted in: the watcher's peak RSS %.1f → %.1f MiB (+%.1f)", n, before, after, after-before)
	return after - before
}
