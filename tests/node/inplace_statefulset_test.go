package node

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
)

// dbReplicas is the size of the StatefulSet restarted in place.
const dbReplicas = 3

// statefulSetRestartsInPlace: a StatefulSet of 3, each pod with its own
// PersistentVolumeClaim and its MESSAGE from a Secret, opted in to restart in place.
// A change of the Secret reaches every pod where it runs, one pod at a time: the same
// pods (UIDs), each app restarted once, each volume keeping what the pod wrote on
// it. Then a bad change (the key its env needs removed) halts after the first pod:
// the others keep serving, untouched, until the Secret is fixed, and then every pod
// serves the fix.
func statefulSetRestartsInPlace(t *testing.T, env *Env) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	ns := newDB(ctx, t, env, true)
	c := env.Cluster.Client
	secrets := c.CoreV1().Secrets(ns)
	before := waitDBServes(ctx, t, env, ns, "p1", nil)

	start := time.Now()
	if _, err := secrets.Patch(ctx, "db", types.MergePatchType, []byte(`{"stringData":{"password":"p2"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var mostDown int
	after := waitDBServes(ctx, t, env, ns, "p2", &mostDown)
	t.Logf("figures: Secret edit to all %d pods serving it, restarted in place: %s", dbReplicas, time.Since(start).Round(100*time.Millisecond))
	if mostDown > 1 {
		t.Errorf("%d pods were not Ready at once, want at most 1", mostDown)
	}
	for name, pod := range after {
		was := before[name]
		if pod.UID != was.UID {
			t.Errorf("%s was replaced (%s, then %s), not restarted in place", name, was.UID, pod.UID)
		}
		if n, want := AppRestarts(pod), AppRestarts(was)+1; n != want {
			t.Errorf("%s: app restarted %d times, want %d", name, n, want)
		}
		if starts, err := Get(ctx, "http://"+pod.Status.PodIP+":8080/starts"); err != nil || starts != "2" {
			t.Errorf("%s: its volume holds %q starts (%v), want 2: the first start's line was lost", name, starts, err)
		}
	}

	// A bad change: the key the env needs is gone. The first pod restarted for it
	// cannot start; the others stay as they are.
	if _, err := secrets.Patch(ctx, "db", types.JSONPatchType, []byte(`[{"op":"remove","path":"/data/password"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	halted := waitHalted(ctx, t, env, ns)
	time.Sleep(6 * time.Second) // the rest of the group would have been restarted by now
	pods := dbPods(ctx, t, env, ns)
	for name, pod := range pods {
		if name == halted {
			continue
		}
		if got, _ := Get(ctx, "http://"+pod.Status.PodIP+":8080/"); got != "p2" || AppRestarts(pod) != AppRestarts(after[name]) {
			t.Errorf("%s, not the halted %s: serves %q after %d restarts, want p2 untouched after %d", name, halted, got, AppRestarts(pod), AppRestarts(after[name]))
		}
	}
	if _, err := secrets.Patch(ctx, "db", types.MergePatchType, []byte(`{"stringData":{"password":"p3"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	fixed := waitDBServes(ctx, t, env, ns, "p3", nil)
	for name, pod := range fixed {
		if pod.UID != before[name].UID {
			t.Errorf("%s was replaced, not restarted in place", name)
		}
	}

	// Exactly once through a restart of the watcher: the leader's pod is deleted once
	// the first pod restarted for the change; the next leader restarts the others,
	// and none twice.
	lease, err := c.CoordinationV1().Leases(InstallNamespace).Get(ctx, "confighash-watcher", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leader := leaderPod(ctx, t, env, *lease.Spec.HolderIdentity)
	if _, err := secrets.Patch(ctx, "db", types.MergePatchType, []byte(`{"stringData":{"password":"p4"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for name, pod := range dbPods(ctx, t, env, ns) {
			if AppRestarts(pod) > AppRestarts(fixed[name]) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no pod restarted for p4: %v", err)
	}
	if err := c.CoreV1().Pods(InstallNamespace).Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDBServes(ctx, t, env, ns, "p4", nil)
	time.Sleep(6 * time.Second) // a second restart of any would show by now
	for name, pod := range dbPods(ctx, t, env, ns) {
		if n, want := AppRestarts(pod), AppRestarts(fixed[name])+1; n != want || pod.UID != fixed[name].UID {
			t.Errorf("%s through the watcher's restart: app restarted %d times, want %d, UID %s, want %s", name, n, want, pod.UID, fixed[name].UID)
		}
	}
}

// waitHalted waits for the RestartHalted Event of the namespace and returns the pod
// it is on.
func waitHalted(ctx context.Context, t testing.TB, env *Env, ns string) string {
	t.Helper()
	var halted string
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := env.Cluster.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=RestartHalted"})
		if err != nil || len(events.Items) == 0 {
			return false, nil
		}
		halted = events.Items[0].InvolvedObject.Name
		return true, nil
	})
	if err != nil {
		t.Fatalf("no RestartHalted Event after the bad change: %v\n%s", err, env.describe(ctx, ns))
	}
	return halted
}

// newDB makes a namespace with the Secret db (password p1), a volume for each of the
// StatefulSet's pods, and the StatefulSet, restarted in place or rolled; it returns
// the namespace.
func newDB(ctx context.Context, t testing.TB, env *Env, inPlace bool) string {
	t.Helper()
	ns, err := env.Cluster.CreateNamespace(ctx, "db", map[string]string{confighash.InjectionLabel: confighash.InjectionEnabled})
	if err != nil {
		t.Fatal(err)
	}
	c := env.Cluster.Client
	if _, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"password": "p1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	class := "confighash-node-" + ns
	for i := range dbReplicas {
		if _, err := c.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", ns, i)},
			Spec: corev1.PersistentVolumeSpec{
				Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: class, PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				ClaimRef:               &corev1.ObjectReference{Namespace: ns, Name: fmt.Sprintf("data-db-%d", i)},
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: filepath.Join(env.dir, "volumes", ns, fmt.Sprint(i)), Type: ptr.To(corev1.HostPathDirectoryOrCreate)}},
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.AppsV1().StatefulSets(ns).Create(ctx, dbStatefulSet(class, inPlace), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// dbStatefulSet is the StatefulSet, its volumes of the class, restarted in place or,
// opted in with confighash.dev/inject, rolled.
func dbStatefulSet(class string, inPlace bool) *appsv1.StatefulSet {
	labels := map[string]string{"app": "db"}
	meta, template := map[string]string{}, map[string]string{confighash.AnnotationRestart: "in-place"}
	if !inPlace {
		meta, template = map[string]string{confighash.AnnotationInject: "true"}, nil
	}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Annotations: meta},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](dbReplicas), PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: template},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: DemoImage, ImagePullPolicy: corev1.PullNever,
					Env: []corev1.EnvVar{{Name: "STATE_DIR", Value: "/data"}, {Name: "MESSAGE", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password",
					}}}},
					VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)}, // the host directory is root's
					ReadinessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
				}}},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: &class,
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
				},
			}},
		},
	}
}

// dbPods returns the StatefulSet's pods by name.
func dbPods(ctx context.Context, t testing.TB, env *Env, ns string) map[string]*corev1.Pod {
	t.Helper()
	list, err := env.Cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=db"})
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]*corev1.Pod{}
	for i := range list.Items {
		pods[list.Items[i].Name] = &list.Items[i]
	}
	return pods
}

// waitDBServes waits until each of the StatefulSet's pods is Ready and serves want,
// and returns them; mostDown, when given, is the most pods seen not Ready at once.
func waitDBServes(ctx context.Context, t testing.TB, env *Env, ns, want string, mostDown *int) map[string]*corev1.Pod {
	t.Helper()
	var pods map[string]*corev1.Pod
	var last []string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods = dbPods(ctx, t, env, ns)
		down := 0
		last = last[:0]
		for name, pod := range pods {
			if !podReady(pod) {
				down++
				last = append(last, name+": not Ready")
				continue
			}
			if got, _ := Get(ctx, "http://"+pod.Status.PodIP+":8080/"); got != want {
				last = append(last, name+": "+got)
			}
		}
		if mostDown != nil {
			*mostDown = max(*mostDown, down)
		}
		return len(pods) == dbReplicas && len(last) == 0, nil
	})
	if err != nil {
		slices.Sort(last)
		t.Fatalf("the pods did not all serve %q: %s\n%s", want, strings.Join(last, ", "), env.describe(ctx, ns))
	}
	return pods
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// timeDBChange times one change of the Secret of a new StatefulSet of 3, restarted in
// place or rolled: see timeSecretEdit.
func timeDBChange(ctx context.Context, t testing.TB, env *Env, inPlace bool) (took time.Duration, replaced, notOnce int, tl *timeline) {
	t.Helper()
	ns := newDB(ctx, t, env, inPlace)
	return timeSecretEdit(ctx, t, env, ns, "p1", "p2")
}

// timeSecretEdit edits the StatefulSet's Secret from one password to the next and
// waits until every pod serves the new one. It returns how long until the last pod
// was Ready again, as a watch of the pods saw it (a poll of the pods' pages would add
// its own waits, and a rollout's pods change IPs), how many pods were replaced and how
// many of their apps restarted other than once, and the change's timeline.
func timeSecretEdit(ctx context.Context, t testing.TB, env *Env, ns, from, to string) (took time.Duration, replaced, notOnce int, tl *timeline) {
	t.Helper()
	before := waitDBServes(ctx, t, env, ns, from, nil)
	watching, stop := context.WithCancel(ctx)
	defer stop()
	tl = &timeline{start: time.Now()}
	if err := tl.watchPods(watching, env, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Cluster.Client.CoreV1().Secrets(ns).Patch(ctx, "db", types.MergePatchType, fmt.Appendf(nil, `{"stringData":{"password":%q}}`, to), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	after := waitDBServes(ctx, t, env, ns, to, nil)
	var back time.Time
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var all bool
		back, all = tl.lastReady(slices.Collect(maps.Keys(after)))
		return all, nil
	})
	if err != nil {
		t.Fatalf("the watch did not see each pod Ready again after the edit:\n%s", tl)
	}
	tl.tokenFiles(env, after)
	if err := tl.containerd(env, ns); err != nil {
		t.Fatal(err)
	}
	for name, pod := range after {
		switch {
		case pod.UID != before[name].UID:
			replaced++
		case AppRestarts(pod) != AppRestarts(before[name])+1:
			notOnce++
		}
	}
	return back.Sub(tl.start), replaced, notOnce, tl
}
