package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// TestAPinnedDeploymentRollsBackToItsOldData: a pinned Deployment's pod template
// names snapshots of its ConfigMap (envFrom) and Secret (volume). A change of the
// ConfigMap rolls it once, to a new snapshot; kubectl rollout undo brings the
// revision back with the snapshot of the old data, and it stays there through an
// unrelated write; the next change of the ConfigMap rolls it forward once.
func TestAPinnedDeploymentRollsBackToItsOldData(t *testing.T) {
	c, ns, cfg := pinnedWeb(t, "greeting", "hello", nil)

	// pinned returns the names the Deployment's pod template gives its ConfigMap and
	// Secret, after checking that they are the snapshots its pins say.
	pinned := func() (configMap, secret string) {
		t.Helper()
		d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		spec := d.Spec.Template.Spec
		configMap, secret = spec.Containers[0].EnvFrom[0].ConfigMapRef.Name, spec.Volumes[0].Secret.SecretName
		pins, err := confighash.ParsePins(d.Spec.Template.Annotations[confighash.AnnotationPinned])
		if err != nil {
			t.Fatal(err)
		}
		cmPin, ok1 := pins.Get(cfg)
		secretPin, ok2 := pins.Get(confighash.SourceRef{Kind: confighash.Secret, Name: "db"})
		if !ok1 || !ok2 || cmPin.Snapshot() != configMap || secretPin.Snapshot() != secret {
			t.Fatalf("the template names %s and %s, and pins %s", configMap, secret, pins)
		}
		return configMap, secret
	}
	snapshotSays := func(name string) string {
		t.Helper()
		cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the snapshot %s: %v", name, err)
		}
		if cm.Immutable == nil || !*cm.Immutable || cm.Labels[confighash.LabelSnapshotOf] != cfg.Name {
			t.Fatalf("the snapshot %s: immutable %v, labels %v", name, cm.Immutable, cm.Labels)
		}
		return cm.Data["greeting"]
	}
	first, secretSnapshot := pinned()
	if got := snapshotSays(first); got != "hello" {
		t.Fatalf("the first snapshot says %q, want hello", got)
	}
	sec, err := c.Client.CoreV1().Secrets(ns).Get(t.Context(), secretSnapshot, metav1.GetOptions{})
	if err != nil || string(sec.Data["password"]) != "one" || sec.Type != corev1.SecretTypeOpaque {
		t.Fatalf("the Secret's snapshot %s: %v, %v", secretSnapshot, sec, err)
	}

	setKey(t, c, ns, cfg, "greeting", "bye")
	expectRollouts(t, c, ns, map[string]int{"web": 2})
	second, secretAgain := pinned()
	if second == first || secretAgain != secretSnapshot || snapshotSays(second) != "bye" {
		t.Fatalf("after the change: the template names %s (was %s) and %s (was %s)", second, first, secretAgain, secretSnapshot)
	}

	if out, err := c.Kubectl(t.Context(), nil, "rollout", "undo", "deployment/web", "-n", ns); err != nil {
		t.Fatalf("kubectl rollout undo: %v: %s", err, out)
	}
	waitFor(t, 30*time.Second, "the undo to reach the template", func() bool { got, _ := pinned(); return got == first })
	expectRollouts(t, c, ns, map[string]int{"web": 2}) // the first ReplicaSet again, no third
	if current := currentReplicaSetNames(t, c, ns, "web"); current != first {
		t.Fatalf("after the undo the scaled ReplicaSet names %q, want the first snapshot %s", current, first)
	}
	e := explainOne(t, c, ns, "deployment/web")
	if e.Verdict != confighash.VerdictUpToDate || !strings.Contains(e.Why, "returned to an earlier revision") || e.Sources[0].Snapshot != first || e.Sources[0].RollsTo != "" {
		t.Fatalf("explain after the undo: %s (%s), %s runs %q and rolls to %q; want up to date on the first snapshot", e.Verdict, e.Why, e.Sources[0].Name, e.Sources[0].Snapshot, e.Sources[0].RollsTo)
	}

	patch := []byte(`{"metadata":{"labels":{"team":"a"}}}`)
	if _, err := c.Client.AppsV1().Deployments(ns).Patch(t.Context(), "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(quietPeriod)
	expectRollouts(t, c, ns, map[string]int{"web": 2})
	if got, _ := pinned(); got != first {
		t.Fatalf("an unrelated write moved the template to %s, from the first snapshot %s", got, first)
	}
	if got := snapshotSays(first); got != "hello" { // still there, with the old data
		t.Fatalf("after the undo the first snapshot says %q, want hello", got)
	}

	setKey(t, c, ns, cfg, "greeting", "again")
	expectRollouts(t, c, ns, map[string]int{"web": 3})
	if third, _ := pinned(); third == first || third == second || snapshotSays(third) != "again" {
		t.Fatalf("the next change: the template names %s", third)
	}
}

// pinnedWeb starts confighash and creates a pinned Deployment web, its ConfigMap
// app-config (envFrom) holding key=value and its Secret db (volume), changed by
// change when set; it returns once web has rolled out.
func pinnedWeb(t *testing.T, key, value string, change func(*appsv1.Deployment)) (*cluster.Cluster, string, confighash.SourceRef) {
	c, ns, cfg := withAppConfig(t, key, value)
	createSecret(t, c, ns, "db", map[string]string{"password": "one"})
	tmpl := fixtures.EnvFromTemplate(cfg.Name)
	tmpl.Spec.Volumes = fixtures.SecretVolumeTemplate("db").Spec.Volumes
	d := fixtures.AnnotatedDeployment("web", map[string]string{confighash.AnnotationInject: "true", confighash.AnnotationPin: "true"}, tmpl)
	if change != nil {
		change(d)
	}
	createDeployment(t, c, ns, d)
	expectRollouts(t, c, ns, map[string]int{"web": 1})
	return c, ns, cfg
}

// withAppConfig starts confighash and makes a labelled namespace with the ConfigMap
// app-config holding key=value.
func withAppConfig(t *testing.T, key, value string) (*cluster.Cluster, string, confighash.SourceRef) {
	c := sharedCluster(t)
	startWebhook(t, c)
	startWatcher(t, c)
	ns := labeledNamespace(t, c)
	cfg := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "app-config"}
	createConfigMap(t, c, ns, cfg.Name, map[string]string{key: value})
	return c, ns, cfg
}

// currentReplicaSetNames returns the ConfigMap the pod template of the Deployment's
// newest ReplicaSet by revision names.
func currentReplicaSetNames(t *testing.T, c *cluster.Cluster, ns, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	list, err := c.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var newest *appsv1.ReplicaSet
	for i := range list.Items {
		rs := &list.Items[i]
		if newest == nil || rs.Annotations["deployment.kubernetes.io/revision"] > newest.Annotations["deployment.kubernetes.io/revision"] {
			newest = rs
		}
	}
	return newest.Spec.Template.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name
}

// TestPinnedSnapshotsGoWithTheirRevisions: each ReplicaSet owns the snapshots its
// template names, so with revisionHistoryLimit 2 and five changes at most three
// snapshots of the ConfigMap are left, and deleting the Deployment leaves none.
func TestPinnedSnapshotsGoWithTheirRevisions(t *testing.T) {
	c, ns, cfg := pinnedWeb(t, "k", "0", func(d *appsv1.Deployment) { d.Spec.RevisionHistoryLimit = ptr.To(int32(2)) })

	snapshots := func(kind confighash.SourceKind) []string { return snapshotNames(t, c, ns, kind) }
	for i := 1; i <= 5; i++ {
		setKey(t, c, ns, cfg, "k", fmt.Sprint(i))
		waitFor(t, 30*time.Second, fmt.Sprintf("change %d to roll out", i), func() bool {
			got, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			name := got.Spec.Template.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name
			cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
			return err == nil && cm.Data["k"] == fmt.Sprint(i) && got.Status.ObservedGeneration == got.Generation
		})
	}
	// The Deployment lets go of a snapshot a minute after it was made, at the soonest.
	waitFor(t, 2*time.Minute, "the snapshots of revisions gone to be collected", func() bool { return len(snapshots(confighash.ConfigMap)) <= 3 })
	rsList, err := c.Client.AppsV1().ReplicaSets(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, rs := range rsList.Items {
		kept = append(kept, rs.Spec.Template.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name)
	}
	if got := snapshots(confighash.ConfigMap); len(got) != 3 || !sameSet(got, kept) {
		t.Errorf("ConfigMap snapshots %v, want those of the 3 ReplicaSets kept: %v", got, kept)
	}
	if got := snapshots(confighash.Secret); len(got) != 1 {
		t.Errorf("Secret snapshots %v, want the one its unchanged data has", got)
	}

	if err := c.Client.AppsV1().Deployments(ns).Delete(t.Context(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "every snapshot to be collected with the Deployment", func() bool {
		return len(snapshots(confighash.ConfigMap)) == 0 && len(snapshots(confighash.Secret)) == 0
	})
}

// TestAPinnedDeploymentShowsNoDriftToGitOps: a pinned Deployment applied server-side
// from a manifest that names its ConfigMap shows no drift to kubectl diff
// --server-side, before and after a change of the ConfigMap, and applying the
// manifest again rolls nothing: the webhook names the same snapshots again.
func TestAPinnedDeploymentShowsNoDriftToGitOps(t *testing.T) {
	c, ns, cfg := withAppConfig(t, "k", "0")
	manifest := pinnedManifest(t, ns, cfg)
	apply := func() {
		t.Helper()
		if out, err := c.Kubectl(t.Context(), manifest, "apply", "--server-side", "-f", "-"); err != nil {
			t.Fatalf("kubectl apply --server-side: %v: %s", err, out)
		}
	}
	noDrift := func(when string) {
		t.Helper()
		if out, err := c.Kubectl(t.Context(), manifest, "diff", "--server-side", "-f", "-"); err != nil {
			t.Fatalf("%s: kubectl diff --server-side shows drift: %v\n%s", when, err, out)
		}
	}
	apply()
	expectRollouts(t, c, ns, map[string]int{"web": 1})
	noDrift("after the apply")
	apply()
	expectRollouts(t, c, ns, map[string]int{"web": 1})

	setKey(t, c, ns, cfg, "k", "1")
	expectRollouts(t, c, ns, map[string]int{"web": 2})
	noDrift("after a change of the ConfigMap")
	apply()
	expectRollouts(t, c, ns, map[string]int{"web": 2})
}

// TestAPinnedStatefulSetAndDaemonSetRollBackToTheirOldData: the same with a
// StatefulSet and a DaemonSet, whose revisions are ControllerRevisions: each owns the
// snapshot its template names, and kubectl rollout undo brings the old snapshot back.
func TestAPinnedStatefulSetAndDaemonSetRollBackToTheirOldData(t *testing.T) {
	c, ns, cfg := withAppConfig(t, "k", "0")
	s := fixtures.StatefulSet("db", fixtures.EnvFromTemplate(cfg.Name))
	s.Annotations[confighash.AnnotationPin] = "true"
	if _, err := c.Client.AppsV1().StatefulSets(ns).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d := fixtures.DaemonSet("agent", fixtures.EnvFromTemplate(cfg.Name)) // opted in on its pod template
	d.Annotations = map[string]string{confighash.AnnotationPin: "true"}
	if _, err := c.Client.AppsV1().DaemonSets(ns).Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	names := func(workload string) string {
		t.Helper()
		var tmpl corev1.PodTemplateSpec
		if workload == "statefulset/db" {
			got, err := c.Client.AppsV1().StatefulSets(ns).Get(t.Context(), "db", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tmpl = got.Spec.Template
		} else {
			got, err := c.Client.AppsV1().DaemonSets(ns).Get(t.Context(), "agent", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tmpl = got.Spec.Template
		}
		return tmpl.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name
	}
	// The ControllerRevisions of db and of agent are named after them.
	ownedByARevisionOf := func(snapshot, app string) bool {
		cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), snapshot, metav1.GetOptions{})
		return err == nil && slices.ContainsFunc(cm.OwnerReferences, func(o metav1.OwnerReference) bool {
			return o.Kind == "ControllerRevision" && strings.HasPrefix(o.Name, app+"-")
		})
	}
	workloads := map[string]string{"statefulset/db": "db", "daemonset/agent": "agent"}
	first := map[string]string{}
	for w, app := range workloads {
		first[w] = names(w)
		waitFor(t, 30*time.Second, "a ControllerRevision of "+w+" to own "+first[w], func() bool { return ownedByARevisionOf(first[w], app) })
	}
	setKey(t, c, ns, cfg, "k", "1")
	for w, app := range workloads {
		waitFor(t, 30*time.Second, "the change to name a new snapshot in "+w, func() bool { return names(w) != first[w] })
		second := names(w)
		waitFor(t, 30*time.Second, "a ControllerRevision of "+w+" to own "+second, func() bool { return ownedByARevisionOf(second, app) })
	}

	for w := range workloads {
		if out, err := c.Kubectl(t.Context(), nil, "rollout", "undo", w, "-n", ns); err != nil {
			t.Fatalf("kubectl rollout undo %s: %v: %s", w, err, out)
		}
		waitFor(t, 30*time.Second, "the undo to name the first snapshot in "+w, func() bool { return names(w) == first[w] })
	}
	time.Sleep(quietPeriod)
	for w := range workloads {
		if got := names(w); got != first[w] {
			t.Errorf("after the undo %s moved to %s, from the first snapshot %s", w, got, first[w])
		}
		if cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), first[w], metav1.GetOptions{}); err != nil || cm.Data["k"] != "0" {
			t.Errorf("after the undo of %s its first snapshot %s: %v, %v; want it there with k=0", w, first[w], err, cm.Data)
		}
	}
}

// snapshotNames lists the names of the namespace's snapshots of the kind.
func snapshotNames(t *testing.T, c *cluster.Cluster, ns string, kind confighash.SourceKind) []string {
	t.Helper()
	raw, err := c.Client.CoreV1().RESTClient().Get().Namespace(ns).Resource(sourcecache.Resource(kind).Resource).
		Param("labelSelector", confighash.LabelSnapshotOf).DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []metav1.PartialObjectMetadata `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range list.Items {
		names = append(names, o.Name)
	}
	return names
}

// TestASnapshotNothingNamesIsSwept: a pinned create the API server refuses after the
// webhook made its snapshot leaves that snapshot with no owner; the watcher's sweep
// deletes it, and keeps the snapshots with no owner that a pinned Deployment names,
// which are owned again: the one its template names, and the one its old ReplicaSet
// names.
func TestASnapshotNothingNamesIsSwept(t *testing.T) {
	const sweep = 2 * time.Second
	c := sharedCluster(t)
	startWebhook(t, c)
	w := startWatcher(t, c, "--snapshot-sweep="+sweep.String())
	ns := labeledNamespace(t, c)
	// A name longer than a label value may be (63).
	config := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "app-config-" + strings.Repeat("x", 60)}
	createConfigMap(t, c, ns, config.Name, map[string]string{"k": "v"})
	createConfigMap(t, c, ns, "other", map[string]string{"k": "v"})
	pinned := map[string]string{confighash.AnnotationInject: "true", confighash.AnnotationPin: "true"}
	createDeployment(t, c, ns, fixtures.AnnotatedDeployment("web", pinned, fixtures.EnvFromTemplate(config.Name)))
	expectRollouts(t, c, ns, map[string]int{"web": 1})

	// Refused after admission: its selector does not match its template's labels.
	broken := fixtures.AnnotatedDeployment("broken", pinned, fixtures.EnvFromTemplate("other"))
	broken.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "elsewhere"}}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(t.Context(), broken, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("create of a Deployment whose selector misses its template: %v, want Invalid", err)
	}
	var orphan string
	for _, name := range snapshotNames(t, c, ns, confighash.ConfigMap) {
		cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cm.Labels[confighash.LabelSnapshotOf] == "other" {
			orphan = name
			if len(cm.OwnerReferences) > 0 {
				t.Fatalf("the refused create's snapshot has owners %v", cm.OwnerReferences)
			}
		}
	}
	if orphan == "" {
		t.Fatal("the refused create left no snapshot: nothing to sweep")
	}

	// web's snapshots lose their owners, as those of a workload the watcher never saw
	// would have none: the one its old ReplicaSet names, and the one its template names.
	old := currentReplicaSetNames(t, c, ns, "web")
	setKey(t, c, ns, config, "k", "w")
	expectRollouts(t, c, ns, map[string]int{"web": 2})
	named := currentReplicaSetNames(t, c, ns, "web")
	for _, name := range []string{old, named} {
		if _, err := c.Client.CoreV1().ConfigMaps(ns).Patch(t.Context(), name, types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	waitFor(t, 10*sweep, "the refused create's snapshot to be swept", func() bool {
		return !slices.Contains(snapshotNames(t, c, ns, confighash.ConfigMap), orphan)
	})
	time.Sleep(2 * sweep) // two more sweeps
	waitFor(t, 10*sweep, "the snapshot web's template names to be owned again", func() bool {
		cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), named, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the snapshot %s web's template names: %v", named, err)
		}
		return len(cm.OwnerReferences) > 0
	})
	if cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), old, metav1.GetOptions{}); err != nil {
		t.Errorf("the snapshot %s web's old ReplicaSet names: %v", old, err)
	} else if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].Kind != "ReplicaSet" {
		t.Errorf("the snapshot %s web's old ReplicaSet names is owned by %v, want that ReplicaSet again", old, cm.OwnerReferences)
	}
	if got := w.metric(t, "confighash_watcher_snapshots_swept_total"); got != 1 {
		t.Errorf("confighash_watcher_snapshots_swept_total = %v, want 1", got)
	}
	expectRollouts(t, c, ns, map[string]int{"web": 2})
}

// TestAPinnedRolloutKeepsItsOldDataThroughAnAbortAndAnUndo: an Argo Rollout's
// ReplicaSets own the snapshots their templates name, as a Deployment's do. No Argo
// controller runs here: the test makes each ReplicaSet as it would (owned by the
// Rollout, with its revision). An abort leaves the spec alone and scales the stable
// ReplicaSet back up: its snapshot is still there, owned by it. An undo (kubectl argo
// rollouts undo writes the old ReplicaSet's template back) names the old snapshot and
// stays there through an unrelated write; the next change rolls forward once.
func TestAPinnedRolloutKeepsItsOldDataThroughAnAbortAndAnUndo(t *testing.T) {
	installRolloutCRD(t, sharedCluster(t)) // before the watcher starts
	c, ns, cfg := withAppConfig(t, "k", "0")
	tmpl := fixtures.EnvFromTemplate(cfg.Name)
	tmpl.Labels = map[string]string{"app": "canary"}
	tmpl.Annotations = map[string]string{confighash.AnnotationPin: "true"}
	createRollout(t, c, ns, "canary", tmpl)
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	rollouts := dyn.Resource(rolloutGVR).Namespace(ns)
	// current returns the Rollout's generation and pod template.
	current := func() (int64, corev1.PodTemplateSpec) {
		t.Helper()
		u, err := rollouts.Get(t.Context(), "canary", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		raw, _, _ := unstructured.NestedMap(u.Object, "spec", "template")
		var tmpl corev1.PodTemplateSpec
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &tmpl); err != nil {
			t.Fatal(err)
		}
		return u.GetGeneration(), tmpl
	}
	names := func() string { _, tmpl := current(); return tmpl.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name }
	// newReplicaSet does what Argo's controller does for a new template.
	revision := 0
	newReplicaSet := func() *appsv1.ReplicaSet {
		t.Helper()
		u, err := rollouts.Get(t.Context(), "canary", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, tmpl := current()
		revision++
		hash := fmt.Sprint(revision)
		tmpl.Labels["rollouts-pod-template-hash"] = hash
		rs := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{
				Name: "canary-" + hash, Labels: tmpl.Labels,
				Annotations:     map[string]string{"rollout.argoproj.io/revision": hash},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: "canary", UID: u.GetUID(), Controller: ptr.To(true)}},
			},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(0)), Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}, Template: tmpl},
		}
		if rs, err = c.Client.AppsV1().ReplicaSets(ns).Create(t.Context(), rs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return rs
	}
	ownedBy := func(snapshot, replicaSet string) bool {
		cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), snapshot, metav1.GetOptions{})
		return err == nil && slices.ContainsFunc(cm.OwnerReferences, func(o metav1.OwnerReference) bool {
			return o.Kind == "ReplicaSet" && o.Name == replicaSet
		})
	}

	first := names()
	stable := newReplicaSet()
	waitFor(t, 30*time.Second, stable.Name+" to own "+first, func() bool { return ownedBy(first, stable.Name) })
	setKey(t, c, ns, cfg, "k", "1")
	waitFor(t, 30*time.Second, "the change to name a new snapshot", func() bool { return names() != first })
	second := names()
	canary := newReplicaSet()
	waitFor(t, 30*time.Second, canary.Name+" to own "+second, func() bool { return ownedBy(second, canary.Name) })

	// The abort: the stable ReplicaSet takes the pods back; the spec stays.
	if _, err := c.Client.AppsV1().ReplicaSets(ns).Patch(t.Context(), stable.Name, types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	generation, _ := current()
	time.Sleep(quietPeriod)
	if !ownedBy(first, stable.Name) {
		t.Fatalf("after the abort the stable ReplicaSet's snapshot %s is gone or not its own", first)
	}
	if got, _ := current(); got != generation {
		t.Fatalf("the abort moved the Rollout from generation %d to %d", generation, got)
	}

	// The undo: the stable ReplicaSet's template, without Argo's hash label, back in the spec.
	old := stable.Spec.Template.DeepCopy()
	delete(old.Labels, "rollouts-pod-template-hash")
	patch, _ := json.Marshal([]map[string]any{{"op": "replace", "path": "/spec/template", "value": old}})
	if _, err := rollouts.Patch(t.Context(), "canary", types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the undo to name the first snapshot", func() bool { return names() == first })
	if _, err := rollouts.Patch(t.Context(), "canary", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"a"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(quietPeriod)
	if got, _ := current(); names() != first || got != generation+1 {
		t.Fatalf("after the undo and an unrelated write: generation %d (want %d) naming %s (want %s)", got, generation+1, names(), first)
	}
	if cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), first, metav1.GetOptions{}); err != nil || cm.Data["k"] != "0" {
		t.Fatalf("after the undo the first snapshot %s: %v, %v; want it there with k=0", first, err, cm.Data)
	}

	setKey(t, c, ns, cfg, "k", "2")
	waitFor(t, 30*time.Second, "the next change to name a new snapshot", func() bool { n := names(); return n != first && n != second })
	time.Sleep(quietPeriod)
	if got, _ := current(); got != generation+2 {
		t.Fatalf("the next change: generation %d, want %d (one rollout forward)", got, generation+2)
	}
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// TestASnapshotGoneBeforeItsWorkloadOwnedItIsMadeAgain: a snapshot a pinned
// Deployment's template names, deleted while no watcher ran (as the garbage collector
// deletes one a replaced workload's revisions owned before the new one owns it), is
// made again, with the same data and owned by the Deployment, once a watcher checks
// it, and nothing rolls.
func TestASnapshotGoneBeforeItsWorkloadOwnedItIsMadeAgain(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	w := startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "app-config", map[string]string{"k": "v"})
	pinned := map[string]string{confighash.AnnotationInject: "true", confighash.AnnotationPin: "true"}
	createDeployment(t, c, ns, fixtures.AnnotatedDeployment("web", pinned, fixtures.EnvFromTemplate("app-config")))
	expectRollouts(t, c, ns, map[string]int{"web": 1})
	snapshot := currentReplicaSetNames(t, c, ns, "web")
	ownedByTheDeployment := func() bool {
		cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), snapshot, metav1.GetOptions{})
		return err == nil && cm.Data["k"] == "v" && slices.ContainsFunc(cm.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "Deployment" })
	}
	waitFor(t, 30*time.Second, "the Deployment to own "+snapshot, ownedByTheDeployment)

	w.stop(t)
	if err := c.Client.CoreV1().ConfigMaps(ns).Delete(t.Context(), snapshot, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	startWatcher(t, c)
	waitFor(t, 60*time.Second, snapshot+" to be made again and owned by the Deployment", ownedByTheDeployment)
	expectRollouts(t, c, ns, map[string]int{"web": 1})
	d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := d.Annotations[confighash.AnnotationRemakeSnapshots]; ok {
		t.Errorf("the webhook left the request %s=%q on the Deployment", confighash.AnnotationRemakeSnapshots, v)
	}
}

// TestAPinnedDeploymentReplacedWithTheSameDataKeepsItsSnapshot: kubectl replace
// --force deletes the Deployment, whose revisions own its snapshot, and creates it
// again with the same data: the new one names the same snapshot, which must outlive
// the old revisions, whether the garbage collector or the watcher comes first.
func TestAPinnedDeploymentReplacedWithTheSameDataKeepsItsSnapshot(t *testing.T) {
	c, ns, cfg := withAppConfig(t, "k", "0")
	manifest := pinnedManifest(t, ns, cfg)
	if out, err := c.Kubectl(t.Context(), manifest, "create", "-f", "-"); err != nil {
		t.Fatalf("kubectl create: %v: %s", err, out)
	}
	expectRollouts(t, c, ns, map[string]int{"web": 1})
	snapshot := currentReplicaSetNames(t, c, ns, "web")
	old, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a ReplicaSet to own "+snapshot, func() bool {
		cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), snapshot, metav1.GetOptions{})
		return err == nil && slices.ContainsFunc(cm.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "ReplicaSet" })
	})

	if out, err := c.Kubectl(t.Context(), manifest, "replace", "--force", "-f", "-"); err != nil {
		t.Fatalf("kubectl replace --force: %v: %s", err, out)
	}
	var replaced *appsv1.Deployment
	waitFor(t, 30*time.Second, "the replaced Deployment to roll out", func() bool {
		replaced, err = c.Client.AppsV1().Deployments(ns).Get(t.Context(), "web", metav1.GetOptions{})
		return err == nil && replaced.UID != old.UID && replaced.Status.ObservedGeneration == replaced.Generation
	})
	if got := replaced.Spec.Template.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name; got != snapshot {
		t.Fatalf("the replaced Deployment names %s, want the same snapshot %s", got, snapshot)
	}
	// Past the garbage collection of the old revisions, the snapshot is there, the new
	// Deployment's.
	waitFor(t, 60*time.Second, snapshot+" to be owned by the new Deployment and nothing of the old one", func() bool {
		cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), snapshot, metav1.GetOptions{})
		if err != nil || cm.Data["k"] != "0" {
			return false
		}
		var mine, theirs bool
		for _, o := range cm.OwnerReferences {
			mine = mine || o.UID == replaced.UID
			theirs = theirs || o.UID == old.UID
		}
		return mine && !theirs
	})
}

// pinnedManifest is the manifest of a pinned Deployment web in ns that uses cfg.
func pinnedManifest(t *testing.T, ns string, cfg confighash.SourceRef) []byte {
	t.Helper()
	d := fixtures.AnnotatedDeployment("web", map[string]string{confighash.AnnotationInject: "true", confighash.AnnotationPin: "true"}, fixtures.EnvFromTemplate(cfg.Name))
	d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	d.Namespace = ns
	manifest, err := yaml.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return manifest
}

// TestADeploymentNoLongerPinnedLetsGoOfItsSnapshots: a pinned Deployment told
// confighash.dev/pin: "false" rolls nothing then; its next change rolls it once to a
// template that names its sources, and once its pinned ReplicaSets are gone, so are
// its snapshots: it no longer owns them.
func TestADeploymentNoLongerPinnedLetsGoOfItsSnapshots(t *testing.T) {
	c, ns, cfg := pinnedWeb(t, "k", "0", func(d *appsv1.Deployment) { d.Spec.RevisionHistoryLimit = ptr.To(int32(1)) })
	if len(snapshotNames(t, c, ns, confighash.ConfigMap)) != 1 || len(snapshotNames(t, c, ns, confighash.Secret)) != 1 {
		t.Fatalf("pinned: snapshots %v and %v, want one of each source", snapshotNames(t, c, ns, confighash.ConfigMap), snapshotNames(t, c, ns, confighash.Secret))
	}

	no := "false"
	mergeAnnotations(t, c, ns, "Deployment", "web", map[string]*string{confighash.AnnotationPin: &no})
	expectRollouts(t, c, ns, map[string]int{"web": 1})

	setKey(t, c, ns, cfg, "k", "1")
	expectRollouts(t, c, ns, map[string]int{"web": 2})
	if got := currentReplicaSetNames(t, c, ns, "web"); got != cfg.Name {
		t.Fatalf("no longer pinned, the change rolled to a template naming %s, want %s", got, cfg.Name)
	}
	// One more change: the ReplicaSet history (1) drops the pinned revision.
	setKey(t, c, ns, cfg, "k", "2")
	waitFor(t, 30*time.Second, "the pinned ReplicaSet to be gone", func() bool {
		list, err := c.Client.AppsV1().ReplicaSets(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		return !slices.ContainsFunc(list.Items, func(rs appsv1.ReplicaSet) bool {
			return rs.Spec.Template.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name != cfg.Name
		})
	})
	// The Deployment lets go of a snapshot a minute after it was made, at the soonest.
	waitFor(t, 2*time.Minute, "the snapshots to be collected", func() bool {
		return len(snapshotNames(t, c, ns, confighash.ConfigMap)) == 0 && len(snapshotNames(t, c, ns, confighash.Secret)) == 0
	})
}
