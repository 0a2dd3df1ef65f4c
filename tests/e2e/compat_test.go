package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
)

// Reloader's own end-to-end suite (github.com/stakater/Reloader, test/e2e at v1.4.21)
// as a table of ours: each row is one of its scenarios, the same situation, checked
// for the outcome its test expects, or for confighash's documented difference (a
// section of docs/migrating-from-reloader.md, "Behaviour that differs"). Where
// Reloader's test looks for its own mark on the pod template, a row looks for a new
// confighash.dev/hash; for a Job, a new Job of the same name.

// Outcomes of a row.
type outcome int

const (
	reloaded    outcome = iota // the pod template's hash changed (a Job: recreated)
	notReloaded                // nothing changed
	jobStarted                 // a CronJob: its hash changed, and it started a Job at once
	restarted                  // an Argo Rollout: its spec.restartAt set, its pod template unchanged
)

// How a row's change is made.
type change int

const (
	updateData  change = iota // its data, as Reloader's suite updates it
	labelsOnly                // a label, data unchanged
	updateAgain               // its data, a second time
	createIt                  // it did not exist
	deleteIt
)

// A use of a source in the pod template, as Reloader's suite builds them.
type use int

const (
	envFrom use = iota
	valueFrom
	volume
	projected
	initEnvFrom
	initVolume
	secondEnvFrom // envFrom in a second container, container-1
)

// source names a row's source: "cm", "cm2", "s", "s2", made unique per row.
type source struct {
	name string
	uses []use // none: named by an annotation only
}

func (s source) kind() confighash.SourceKind {
	if strings.HasPrefix(s.name, "s") {
		return confighash.Secret
	}
	return confighash.ConfigMap
}

// compatRow is one scenario of Reloader's suite.
type compatRow struct {
	spec string // Reloader's spec: suite, context and test, as Ginkgo names it
	kind string // Deployment, DaemonSet, StatefulSet, Rollout, CronJob or Job
	// meta and pod are the workload's annotations and its pod template's; "{cm}" and
	// the like in a value stand for a source's name.
	meta, pod map[string]string
	sources   []source
	// sourceAnnotations and sourceLabels are set on the sources at creation; absent
	// sources are not made before the change.
	sourceAnnotations map[string]map[string]string
	sourceLabels      map[string]map[string]string
	absent            []string
	containers        int // 2: a second container, container-1
	change            change
	changed           string // the source changed
	again             bool   // changed a second time once reloaded, and reloaded again
	want              outcome
	// pausedAt: a Deployment reloaded carries Reloader's paused-at mark, as its pause
	// period tests check; any other reloaded does not.
	pausedAt bool
	// differs names the documented difference when want is not what Reloader's
	// test expects.
	differs string
}

// compatRun makes each row's sources and workload in ns, makes each row's change,
// and checks its outcome. The rows run together, as they would one after the other:
// each has its own sources and workload.
func compatRun(t *testing.T, c *cluster.Cluster, w *component, ns string, rows []compatRow) {
	t.Helper()
	run := compatRuns.Add(1)
	names := func(i int) map[string]string { return compatNames(run, i) }
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	type state struct{ hash, uid, restartAt string }
	read := func(i int, r compatRow) state {
		u, err := dyn.Resource(compatGVR(r.kind)).Namespace(ns).Get(t.Context(), names(i)["w"], metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return state{}
		}
		if err != nil {
			t.Fatal(err)
		}
		path := append(compatTemplatePath(r.kind), "metadata", "annotations", confighash.AnnotationHash)
		hash, _, _ := unstructured.NestedString(u.Object, path...)
		restartAt, _, _ := unstructured.NestedString(u.Object, "spec", "restartAt")
		return state{hash, string(u.GetUID()), restartAt}
	}
	// started reports whether the CronJob started a Job, as Reloader's suite checks it.
	started := func(cronJob string) bool {
		jobs, err := startedByHand(t.Context(), c, ns, cronJob)
		if err != nil {
			t.Error(err)
		}
		return len(jobs) > 0
	}
	before := make([]state, len(rows))
	if ns == installNamespace {
		// Not a test namespace, deleted with the test: the rows' objects are.
		t.Cleanup(func() { compatDelete(c, dyn, ns, rows, names) })
	}
	for i, r := range rows {
		for _, s := range []string{"cm", "cm2", "s", "s2"} {
			if !slices.Contains(r.absent, s) {
				compatSource(t, c, ns, names(i)[s], s, "initial", r.sourceAnnotations[s], r.sourceLabels[s])
			}
		}
		compatWorkload(t, dyn, ns, names(i), r)
		before[i] = read(i, r)
		if before[i].hash == "" && r.want != notReloaded && r.kind != "CronJob" {
			t.Errorf("%s [%s]: not hashed at its creation", r.spec, r.kind)
		}
	}
	// Reloader's tests wait for each workload to be ready; here, for the watcher to
	// have checked them all.
	waitQuiet(t, w)
	for i, r := range rows {
		if now := read(i, r); now != before[i] {
			t.Errorf("%s [%s]: changed before its change: %+v, then %+v", r.spec, r.kind, before[i], now)
		}
	}
	for i, r := range rows {
		compatChange(t, c, ns, names(i)[r.changed], r.changed, r.change)
	}
	waitReloaded := func(again bool) {
		var wg sync.WaitGroup
		for i, r := range rows {
			if r.want == notReloaded || again && !r.again {
				continue
			}
			wg.Go(func() {
				// Reloader's suite waits 15 s; the rows here all change at once.
				deadline := time.Now().Add(30 * time.Second)
				for time.Now().Before(deadline) && t.Context().Err() == nil {
					now := read(i, r)
					switch {
					case r.want == restarted && now.restartAt != before[i].restartAt && now.hash == before[i].hash,
						r.want != restarted && (now.hash != before[i].hash || now.uid != before[i].uid && now.uid != "") && (r.want != jobStarted || started(names(i)["w"])):
						before[i] = now
						return
					}
					time.Sleep(200 * time.Millisecond)
				}
				t.Errorf("%s [%s]: not reloaded (want %s) within 30 s of its change%s", r.spec, r.kind, r.want, compatDiffers(r))
			})
		}
		wg.Wait()
	}
	waitReloaded(false)
	for i, r := range rows {
		if r.kind != "Deployment" || r.want != reloaded {
			continue
		}
		u, err := dyn.Resource(compatGVR(r.kind)).Namespace(ns).Get(t.Context(), names(i)["w"], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, marked := u.GetAnnotations()[confighash.ReloaderPausedAt]; marked != r.pausedAt {
			t.Errorf("%s [%s]: Reloader's paused-at mark %v once reloaded, want %v", r.spec, r.kind, marked, r.pausedAt)
		}
	}
	for i, r := range rows {
		if r.again {
			compatChange(t, c, ns, names(i)[r.changed], r.changed, updateAgain)
		}
	}
	waitReloaded(true)
	waitQuiet(t, w)
	for i, r := range rows {
		if r.want == notReloaded {
			if now := read(i, r); now != before[i] {
				t.Errorf("%s [%s]: reloaded (%+v, then %+v), want %s%s", r.spec, r.kind, before[i], now, r.want, compatDiffers(r))
			}
		}
	}
}

func compatDelete(c *cluster.Cluster, dyn dynamic.Interface, ns string, rows []compatRow, names func(int) map[string]string) {
	ctx := context.Background()
	for i, r := range rows {
		_ = dyn.Resource(compatGVR(r.kind)).Namespace(ns).Delete(ctx, names(i)["w"], metav1.DeleteOptions{})
		for _, s := range []string{"cm", "cm2"} {
			_ = c.Client.CoreV1().ConfigMaps(ns).Delete(ctx, names(i)[s], metav1.DeleteOptions{})
		}
		for _, s := range []string{"s", "s2"} {
			_ = c.Client.CoreV1().Secrets(ns).Delete(ctx, names(i)[s], metav1.DeleteOptions{})
		}
	}
}

func (o outcome) String() string {
	return [...]string{"reloaded", "not reloaded", "a Job started", "restarted (spec.restartAt)"}[o]
}

func compatDiffers(r compatRow) string {
	if r.differs == "" {
		return ""
	}
	return "; a documented difference: " + r.differs
}

// compatRuns numbers the runs, so that rows of two runs in one namespace differ.
var compatRuns atomic.Int64

// compatNames are the names of the sources of row i of a run, and its workload's.
func compatNames(run int64, i int) map[string]string {
	names := map[string]string{"w": fmt.Sprintf("w%d-%d", run, i)}
	for _, s := range []string{"cm", "cm2", "s", "s2"} {
		names[s] = fmt.Sprintf("r%d-%d-%s", run, i, s)
	}
	return names
}

// compatExpand replaces "{cm}" and the like by the names.
func compatExpand(names map[string]string, annotations map[string]string) map[string]string {
	if annotations == nil {
		return nil
	}
	out := maps.Clone(annotations)
	for k, v := range out {
		for s, name := range names {
			v = strings.ReplaceAll(v, "{"+s+"}", name)
		}
		out[k] = v
	}
	return out
}

func compatSource(t testing.TB, c *cluster.Cluster, ns, name, role, value string, annotations, labels map[string]string) {
	t.Helper()
	meta := metav1.ObjectMeta{Name: name, Annotations: annotations, Labels: labels}
	data := map[string]string{"key": value}
	var err error
	if strings.HasPrefix(role, "s") {
		_, err = c.Client.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{ObjectMeta: meta, StringData: data}, metav1.CreateOptions{})
	} else {
		_, err = c.Client.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: meta, Data: data}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

func compatChange(t testing.TB, c *cluster.Cluster, ns, name, role string, how change) {
	t.Helper()
	secret := strings.HasPrefix(role, "s")
	switch how {
	case createIt:
		compatSource(t, c, ns, name, role, "value", nil, nil)
	case deleteIt:
		var err error
		if secret {
			err = c.Client.CoreV1().Secrets(ns).Delete(t.Context(), name, metav1.DeleteOptions{})
		} else {
			err = c.Client.CoreV1().ConfigMaps(ns).Delete(t.Context(), name, metav1.DeleteOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	case updateData, labelsOnly, updateAgain:
		if secret {
			updateSecret(t, c, ns, name, func(s *corev1.Secret) {
				if how == labelsOnly {
					s.Labels = map[string]string{"new-label": "new-value"}
				} else {
					s.Data = map[string][]byte{"key": []byte(fmt.Sprint("updated", how))}
				}
			})
		} else {
			updateConfigMap(t, c, ns, name, func(cm *corev1.ConfigMap) {
				if how == labelsOnly {
					cm.Labels = map[string]string{"new-label": "new-value"}
				} else {
					cm.Data = map[string]string{"key": fmt.Sprint("updated", how)}
				}
			})
		}
	}
}

// compatTemplate is Reloader's test pod: a container "app" (and, for the init
// uses, an init container) using the row's sources as it says.
func compatTemplate(names map[string]string, r compatRow) corev1.PodTemplateSpec {
	app := corev1.Container{Name: "app", Image: "busybox:1.36", Command: []string{"sh", "-c", "sleep 3600"}}
	init := corev1.Container{Name: "init", Image: "busybox:1.36", Command: []string{"sh", "-c", "echo init done"}}
	second := corev1.Container{Name: "container-1", Image: "busybox:1.36", Command: []string{"sh", "-c", "sleep 3600"}}
	var volumes []corev1.Volume
	var sources []corev1.VolumeProjection
	for _, s := range r.sources {
		name, secret := names[s.name], s.kind() == confighash.Secret
		for _, u := range s.uses {
			switch u {
			case envFrom, initEnvFrom, secondEnvFrom:
				e := corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
				if secret {
					e = corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
				}
				switch u {
				case initEnvFrom:
					init.EnvFrom = append(init.EnvFrom, e)
				case secondEnvFrom:
					second.EnvFrom = append(second.EnvFrom, e)
				default:
					app.EnvFrom = append(app.EnvFrom, e)
				}
			case valueFrom:
				sel := corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: "key"}}
				if secret {
					sel = corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: "key"}}
				}
				app.Env = append(app.Env, corev1.EnvVar{Name: "VAR_" + strings.ToUpper(s.name), ValueFrom: &sel})
			case volume, initVolume:
				v := corev1.Volume{Name: "v-" + s.name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}
				if secret {
					v.VolumeSource = corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}
				}
				volumes = append(volumes, v)
				mount := corev1.VolumeMount{Name: v.Name, MountPath: "/etc/" + s.name}
				if u == initVolume {
					init.VolumeMounts = append(init.VolumeMounts, mount)
				} else {
					app.VolumeMounts = append(app.VolumeMounts, mount)
				}
			case projected:
				p := corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
				if secret {
					p = corev1.VolumeProjection{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
				}
				sources = append(sources, p)
			}
		}
	}
	if len(sources) > 0 {
		volumes = append(volumes, corev1.Volume{Name: "projected-config", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: sources}}})
		app.VolumeMounts = append(app.VolumeMounts, corev1.VolumeMount{Name: "projected-config", MountPath: "/etc/projected"})
	}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": names["w"]}, Annotations: compatExpand(names, r.pod)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{app}, Volumes: volumes},
	}
	if r.containers == 2 {
		tmpl.Spec.Containers = append(tmpl.Spec.Containers, second)
	}
	if len(init.EnvFrom) > 0 || len(init.VolumeMounts) > 0 {
		tmpl.Spec.InitContainers = []corev1.Container{init}
	}
	return tmpl
}

var rolloutGVRCompat = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "rollouts"}

func compatGVR(kind string) schema.GroupVersionResource {
	switch kind {
	case "CronJob":
		return batchv1.SchemeGroupVersion.WithResource("cronjobs")
	case "Job":
		return batchv1.SchemeGroupVersion.WithResource("jobs")
	case "Rollout":
		return rolloutGVRCompat
	}
	return appsv1.SchemeGroupVersion.WithResource(strings.ToLower(kind) + "s")
}

func compatTemplatePath(kind string) []string {
	if kind == "CronJob" {
		return []string{"spec", "jobTemplate", "spec", "template"}
	}
	return []string{"spec", "template"}
}

// compatWorkload makes a row's workload, as Reloader's suite makes it.
func compatWorkload(t testing.TB, dyn dynamic.Interface, ns string, names map[string]string, r compatRow) {
	t.Helper()
	name, tmpl := names["w"], compatTemplate(names, r)
	meta := metav1.ObjectMeta{Name: name, Annotations: compatExpand(names, r.meta)}
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
	var obj runtime.Object
	switch r.kind {
	case "Deployment":
		obj = &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Selector: selector, Template: tmpl}}
	case "DaemonSet":
		obj = &appsv1.DaemonSet{ObjectMeta: meta, Spec: appsv1.DaemonSetSpec{Selector: selector, Template: tmpl}}
	case "StatefulSet":
		obj = &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(1)), ServiceName: name, Selector: selector, Template: tmpl}}
	case "CronJob":
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		obj = &batchv1.CronJob{ObjectMeta: meta, Spec: batchv1.CronJobSpec{Schedule: "0 0 1 1 *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: tmpl}}}}
	case "Job":
		// Its pods complete at once, as Reloader's "echo done" Job has by the change.
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		obj = &batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{Template: tmpl}}
	case "Rollout":
		rawTmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&tmpl)
		if err != nil {
			t.Fatal(err)
		}
		obj = &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": name},
			"spec": map[string]any{
				"replicas": int64(1), "selector": map[string]any{"matchLabels": map[string]any{"app": name}},
				"strategy": map[string]any{"canary": map[string]any{"steps": []any{map[string]any{"setWeight": int64(100)}}}},
				"template": rawTmpl,
			},
		}}
	default:
		t.Fatalf("kind %s", r.kind)
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		u = &unstructured.Unstructured{Object: raw}
	}
	u.SetAnnotations(meta.Annotations)
	gvr := compatGVR(r.kind)
	u.SetAPIVersion(gvr.GroupVersion().String())
	u.SetKind(r.kind)
	if _, err := dyn.Resource(gvr).Namespace(ns).Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("%s [%s]: %v", r.spec, r.kind, err)
	}
}

// forKinds returns the row once per kind, as Reloader's DescribeTable entries.
func forKinds(r compatRow, kinds ...string) []compatRow {
	rows := make([]compatRow, len(kinds))
	for i, k := range kinds {
		rows[i] = r
		rows[i].kind = k
	}
	return rows
}

// Reloader's entry sets: E5 without DeploymentConfig (OpenShift only), and E3.
var (
	e5 = []string{"Deployment", "DaemonSet", "StatefulSet", "Rollout"}
	e3 = []string{"Deployment", "DaemonSet", "StatefulSet"}
)
