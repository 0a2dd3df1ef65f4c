package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/certs"
	"github.com/confighash/confighash/sourcecache"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
	"github.com/confighash/confighash/watches"
	"github.com/confighash/confighash/webhook"
)

func TestWebhookHashesEveryKindAndPodsCarryIt(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	ns := labeledNamespace(t, c)
	createEverySource(t, c, ns)
	key := hashKey(t, c)
	ctx := t.Context()

	d, err := c.Client.AppsV1().Deployments(ns).Create(ctx, fixtures.Deployment("web", 2, fixtures.EveryUseTemplate(nil)), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := expectedHash(t, c, key, ns, d.Annotations, &d.Spec.Template)
	if got := d.Spec.Template.Annotations[confighash.AnnotationHash]; got != want {
		t.Fatalf("Deployment hash = %q, want %q", got, want)
	}
	record, err := confighash.ParseRecord(d.Annotations[confighash.AnnotationSources])
	if err != nil {
		t.Fatalf("Deployment sources record: %v", err)
	}
	if len(record) != 9 {
		t.Fatalf("sources record has %d entries, want the 9 sources used: %s", len(record), record)
	}

	s, err := c.Client.AppsV1().StatefulSets(ns).Create(ctx, fixtures.StatefulSet("db", fixtures.EveryUseTemplate(nil)), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := c.Client.AppsV1().DaemonSets(ns).Create(ctx, fixtures.DaemonSet("agent", fixtures.EveryUseTemplate(nil)), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cj, err := c.Client.BatchV1().CronJobs(ns).Create(ctx, fixtures.CronJob("report", fixtures.EveryUseTemplate(nil)), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ro := createRollout(t, c, ns, "canary", fixtures.EveryUseTemplate(map[string]string{"app": "canary"}))
	roHash, _, _ := unstructuredString(ro.Object, "spec", "template", "metadata", "annotations", confighash.AnnotationHash)

	// Every kind uses the same sources in the same way, so every hash is the same.
	for kind, got := range map[string]string{
		"StatefulSet": s.Spec.Template.Annotations[confighash.AnnotationHash],
		"DaemonSet":   ds.Spec.Template.Annotations[confighash.AnnotationHash],
		"CronJob":     cj.Spec.JobTemplate.Spec.Template.Annotations[confighash.AnnotationHash],
		"Rollout":     roHash,
	} {
		if got != want {
			t.Errorf("%s hash = %q, want %q", kind, got, want)
		}
	}

	if err := c.WaitRolledOut(ctx, ns, "web"); err != nil {
		t.Fatal(err)
	}
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2 {
		t.Fatalf("pods = %d, want 2", len(pods.Items))
	}
	for _, p := range pods.Items {
		if got := p.Annotations[confighash.AnnotationHash]; got != want {
			t.Errorf("pod %s hash = %q, want %q", p.Name, got, want)
		}
	}
}

func unstructuredString(obj map[string]any, path ...string) (string, bool, error) {
	cur := any(obj)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[p]
	}
	s, ok := cur.(string)
	return s, ok, nil
}

func TestWebhookIsNotCalledForWhatDidNotOptIn(t *testing.T) {
	c := sharedCluster(t)
	w := startWebhook(t, c)
	ctx := t.Context()
	probes := w.metric(t, "confighash_webhook_mutations_total") // startWebhook's dry runs

	unlabeled := namespace(t, c, nil)
	createConfigMap(t, c, unlabeled, "cfg", map[string]string{"k": "v"})
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1",
		EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}}}
	inUnlabeled, err := c.Client.AppsV1().Deployments(unlabeled).Create(ctx, fixtures.Deployment("opted-in", 1, tmpl), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	labeled := labeledNamespace(t, c)
	createConfigMap(t, c, labeled, "cfg", map[string]string{"k": "v"})
	plain := fixtures.Deployment("plain", 1, tmpl)
	plain.Annotations = nil
	notOptedIn, err := c.Client.AppsV1().Deployments(labeled).Create(ctx, plain, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	for _, d := range []*appsv1.Deployment{inUnlabeled, notOptedIn} {
		if _, ok := d.Spec.Template.Annotations[confighash.AnnotationHash]; ok {
			t.Errorf("%s/%s got a hash", d.Namespace, d.Name)
		}
		if _, ok := d.Annotations[confighash.AnnotationSources]; ok {
			t.Errorf("%s/%s got a sources record", d.Namespace, d.Name)
		}
	}
	if n := w.metric(t, "confighash_webhook_mutations_total") - probes; n != 0 {
		t.Fatalf("the webhook admitted %v workloads; the API server must not call it for these", n)
	}
	if n := w.metric(t, "confighash_webhook_bad_requests_total"); n != 0 {
		t.Fatalf("bad requests = %v", n)
	}
}

func TestSpecChangeKeepsTheHashAndDryRunAgrees(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	ns := labeledNamespace(t, c)
	createEverySource(t, c, ns)
	ctx := t.Context()

	manifest := func(image string) []byte {
		d := fixtures.Deployment("web", 1, fixtures.EveryUseTemplate(nil))
		d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
		d.Namespace = ns
		d.Spec.Template.Spec.Containers[0].Image = image
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	templateHash := func(out []byte) string {
		var d appsv1.Deployment
		if err := json.Unmarshal(out, &d); err != nil {
			t.Fatalf("decode kubectl output: %v\n%s", err, out)
		}
		return d.Spec.Template.Annotations[confighash.AnnotationHash]
	}

	dry, err := c.Kubectl(ctx, manifest("example.com/app:1"), "apply", "--server-side", "--dry-run=server", "-o", "json", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	real, err := c.Kubectl(ctx, manifest("example.com/app:1"), "apply", "--server-side", "-o", "json", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	first := templateHash(real)
	if first == "" || templateHash(dry) != first {
		t.Fatalf("dry-run hash %q, real apply hash %q: want the same, non-empty", templateHash(dry), first)
	}

	changed, err := c.Kubectl(ctx, manifest("example.com/app:2"), "apply", "--server-side", "-o", "json", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	if got := templateHash(changed); got != first {
		t.Fatalf("after an image change the hash is %q, want it kept: %q", got, first)
	}
}

func TestConfigMapInTheSameApplyIsSeen(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	ns := labeledNamespace(t, c)
	key := hashKey(t, c)
	ctx := t.Context()

	apply := func(value string) *appsv1.Deployment {
		manifest := `apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: ` + ns + `}
data: {mode: "` + value + `"}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: ` + ns + `
  annotations: {` + confighash.AnnotationInject + `: "true"}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        image: example.com/app:1
        envFrom: [{configMapRef: {name: settings}}]
`
		// Server-side apply sends the Deployment even when it is unchanged, so it is
		// admitted again; a client-side apply would skip it (the watcher's case).
		if _, err := c.Kubectl(ctx, []byte(manifest), "apply", "--server-side", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	d := apply("blue")
	if got, want := d.Spec.Template.Annotations[confighash.AnnotationHash], expectedHash(t, c, key, ns, d.Annotations, &d.Spec.Template); got != want {
		t.Fatalf("hash after the first apply = %q, want %q (the ConfigMap created just before)", got, want)
	}
	first := d.Spec.Template.Annotations[confighash.AnnotationHash]
	d = apply("green")
	got := d.Spec.Template.Annotations[confighash.AnnotationHash]
	if got == first {
		t.Fatal("the hash did not change when the same apply changed the ConfigMap")
	}
	if want := expectedHash(t, c, key, ns, d.Annotations, &d.Spec.Template); got != want {
		t.Fatalf("hash after the second apply = %q, want %q", got, want)
	}
}

func TestSourceWrittenJustBeforeAnUpdateIsHashedWithItsNewData(t *testing.T) {
	c := sharedCluster(t)
	w := startWebhook(t, c)
	ns := labeledNamespace(t, c)
	key := hashKey(t, c)
	ctx := t.Context()
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	createSecret(t, c, ns, "creds", map[string]string{"k": "0"})
	tmpl := fixtures.EnvFromTemplate("cfg")
	tmpl.Spec.Volumes = []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}}}
	createDeployment(t, c, ns, fixtures.Deployment("web", 0, tmpl))
	cacheReads := func() float64 { return w.metric(t, `confighash_webhook_source_reads_total{from="cache"`) }
	before := cacheReads()
	// Each round writes a source and, with no pause, updates the Deployment: the
	// webhook's informer has had no time to see the write.
	const rounds = 20
	for i := 1; i <= rounds; i++ {
		ref := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}
		if i%2 == 0 {
			ref = confighash.SourceRef{Kind: confighash.Secret, Name: "creds"}
		}
		setKey(t, c, ns, ref, "k", fmt.Sprint(i))
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"example.com/round":"%d"}}}`, i)
		d, err := c.Client.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := d.Spec.Template.Annotations[confighash.AnnotationHash], expectedHash(t, c, key, ns, d.Annotations, &d.Spec.Template); got != want {
			t.Fatalf("round %d: hash %q, want %q: the %s written just before was not seen", i, got, want, ref)
		}
	}
	// The cache, proven current, answered for most reads: the cheap path is taken.
	if n := cacheReads() - before; n < rounds {
		t.Errorf("%v of %d source reads came from the cache; want most", n, 2*rounds)
	}
}

func TestReaderReadsLiveWhatAStaleCacheCannotProve(t *testing.T) {
	c := sharedCluster(t)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "changed", map[string]string{"k": "old"})
	createConfigMap(t, c, ns, "deleted", map[string]string{"k": "v"})
	createConfigMap(t, c, ns, "unchanged", map[string]string{"k": "v"})

	// A cache that stops watching once synced: it keeps what it saw, and never sees
	// what follows, as an informer that lags would not for a while.
	sources := newSources(t, c, ns)
	rec := &readCounter{}
	reader := webhook.NewCachedReader(sources, webhook.NewLiveReader(c.Client, watches.Door{}, sourcecache.Filter{}, rec, nil), webhook.NewVersions(metadata.NewForConfigOrDie(c.Config), watches.Door{}, sourcecache.Filter{}, 5*time.Second, rec), rec)
	watching, stopWatching := context.WithCancel(t.Context())
	go func() { _ = sources.Run(watching) }()
	if !sources.WaitSynced(watching) {
		t.Fatal("cache did not sync")
	}
	stopWatching()
	updateConfigMap(t, c, ns, "changed", func(cm *corev1.ConfigMap) { cm.Data["k"] = "new" })
	if err := c.Client.CoreV1().ConfigMaps(ns).Delete(t.Context(), "deleted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	created := createConfigMap(t, c, ns, "created", map[string]string{"k": "v"})

	ref := func(name string) confighash.SourceRef {
		return confighash.SourceRef{Kind: confighash.ConfigMap, Name: name}
	}
	got, err := reader.Read(t.Context(), ns, []confighash.SourceRef{ref("changed"), ref("deleted"), ref("unchanged"), ref("created")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	changed, err := c.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), "changed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := confighash.SourceOfConfigMap(changed); !slices.Equal(got[ref("changed")].Data, want.Data) {
		t.Error("a ConfigMap changed after the cache stopped was read from the stale cache")
	}
	if want := confighash.SourceOfConfigMap(created); !got[ref("created")].Present || !slices.Equal(got[ref("created")].Data, want.Data) {
		t.Error("a ConfigMap created after the cache stopped was not read")
	}
	if got[ref("deleted")].Present {
		t.Error("a ConfigMap deleted after the cache stopped was read as present")
	}
	if !got[ref("unchanged")].Present {
		t.Error("the unchanged ConfigMap was read as absent")
	}
	if n := rec.reads[webhook.ReadFromCache]; n != 2 {
		t.Errorf("%v reads from the cache, want 2: the unchanged and the deleted ConfigMap, which the list proves absent", n)
	}
}

// readCounter counts source reads by where they were read from.
type readCounter struct {
	webhook.NoopRecorder
	mu    sync.Mutex
	reads map[string]int
}

func (r *readCounter) SourceRead(_ confighash.SourceKind, from string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reads == nil {
		r.reads = map[string]int{}
	}
	r.reads[from]++
}

// createBeforeItsSecret creates Deployment "web" mounting the Secret "issued-tls",
// then the Secret, as cert-manager or External Secrets would some time later. The
// watcher, which must run, finds that the pods, which could not start without the
// Secret, hold its data, and records it as a baseline. It returns the Deployment as
// created and as recorded.
func createBeforeItsSecret(t *testing.T, c *cluster.Cluster, ns string) (created, recorded *appsv1.Deployment) {
	t.Helper()
	ctx := t.Context()
	created, err := c.Client.AppsV1().Deployments(ns).Create(ctx, fixtures.Deployment("web", 1, fixtures.SecretVolumeTemplate("issued-tls")), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createSecret(t, c, ns, "issued-tls", map[string]string{"tls.crt": "cert", "tls.key": "key"})
	waitFor(t, 30*time.Second, "the Secret recorded as a baseline", func() bool {
		recorded, err = c.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && strings.HasSuffix(recorded.Annotations[confighash.AnnotationSources], ",baseline")
	})
	return created, recorded
}

func TestDeploymentCreatedBeforeItsSecretRollsOnce(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	startWatcher(t, c)
	ns := labeledNamespace(t, c)

	created, _ := createBeforeItsSecret(t, c, ns)
	if got, want := created.Annotations[confighash.AnnotationSources], "v2 secret/issued-tls=absent"; got != want {
		t.Fatalf("sources record = %q, want %q", got, want)
	}
	// The pods could not start without the Secret: its arrival does not roll them.
	expectReplicaSets(t, c, ns, "web", 1)
	// An unrelated admission rolls nothing either; the Secret's change rolls once.
	relabel(t, c, ns, "web", "shop")
	expectReplicaSets(t, c, ns, "web", 1)
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.Secret, Name: "issued-tls"}, "tls.crt", "renewed")
	expectReplicaSets(t, c, ns, "web", 2)
}

func TestWritesSucceedWhileTheWebhookIsDown(t *testing.T) {
	c := sharedCluster(t)
	w := startWebhook(t, c)
	ns := labeledNamespace(t, c)
	w.stop(t)

	tmpl := fixtures.PlainTemplate()
	d, err := c.Client.AppsV1().Deployments(ns).Create(t.Context(), fixtures.Deployment("web", 1, tmpl), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create with the webhook down: %v; failurePolicy Ignore must let it through", err)
	}
	if _, ok := d.Spec.Template.Annotations[confighash.AnnotationHash]; ok {
		t.Fatal("a hash was written with the webhook down")
	}
}

func TestRenewedCertificateIsServedWithoutRestart(t *testing.T) {
	c := sharedCluster(t)
	w := startWebhook(t, c)
	before := w.servedCertificateSerial(t)
	pid := w.cmd.Process.Pid

	renewed := w.issue(t)
	wantSerial := certSerial(t, renewed.CertPEM)
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return w.servedCertificateSerial(t) == wantSerial, nil
	}); err != nil {
		t.Fatalf("served certificate is still %s, want the renewed %s", before, wantSerial)
	}
	if w.cmd.Process.Pid != pid || w.cmd.ProcessState != nil {
		t.Fatal("the webhook restarted")
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return w.metric(t, "confighash_certificate_loads_total") == 2, nil
	}); err != nil {
		t.Fatalf("certificate loads = %v, want 2", w.metric(t, "confighash_certificate_loads_total"))
	}

	// Admission still works through the API server with the new certificate.
	ns := labeledNamespace(t, c)
	tmpl := fixtures.PlainTemplate()
	d, err := c.Client.AppsV1().Deployments(ns).Create(t.Context(), fixtures.Deployment("web", 1, tmpl), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Spec.Template.Annotations[confighash.AnnotationHash]; !ok {
		t.Fatal("no hash after the certificate renewal")
	}
}

func TestTouchReadsFromTheCacheOnlyWhenItIsFreshEnough(t *testing.T) {
	c := sharedCluster(t)
	w := startWebhook(t, c)
	ns := labeledNamespace(t, c)
	key := hashKey(t, c)
	ctx := t.Context()
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "1"})
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1",
		EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}}}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, fixtures.Deployment("web", 1, tmpl), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	liveReads := func() float64 {
		return w.metric(t, `confighash_webhook_source_reads_total{from="live",kind="ConfigMap"}`)
	}
	cacheReads := func() float64 {
		return w.metric(t, `confighash_webhook_source_reads_total{from="cache",kind="ConfigMap"}`)
	}
	// A create names no version: a consistent list proves the cache current, or the
	// source is read live.
	if liveReads()+cacheReads() != 1 {
		t.Fatalf("at creation: %v live reads and %v cache reads, want 1 read", liveReads(), cacheReads())
	}
	created := cacheReads()

	touch := func(trigger string) *appsv1.Deployment {
		patch := `{"metadata":{"annotations":{"` + confighash.AnnotationTrigger + `":"` + trigger + `"}}}`
		d, err := c.Client.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	cm, err := c.Client.CoreV1().ConfigMaps(ns).Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"k": "2"}}, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Give the webhook's informer time to see the update, as the watcher's own
	// informer saw it before touching.
	time.Sleep(time.Second)
	d := touch("ConfigMap/cfg@" + cm.ResourceVersion)
	if got, want := d.Spec.Template.Annotations[confighash.AnnotationHash], expectedHash(t, c, key, ns, d.Annotations, &d.Spec.Template); got != want {
		t.Fatalf("hash after the touch = %q, want %q", got, want)
	}
	if n := cacheReads() - created; n != 1 {
		t.Fatalf("cache reads = %v, want 1: the cache held the triggering version", n)
	}

	// A trigger newer than anything the cache holds cannot be answered from it. (The
	// Deployment controller's own updates name no new trigger and read live too.)
	before := liveReads()
	d = touch("ConfigMap/cfg@999999999")
	if n := cacheReads() - created; n != 1 || liveReads() <= before {
		t.Fatalf("after a touch the cache cannot prove fresh: %v cache reads (want 1), live reads %v then %v", n, before, liveReads())
	}
	if got, want := d.Spec.Template.Annotations[confighash.AnnotationHash], expectedHash(t, c, key, ns, d.Annotations, &d.Spec.Template); got != want {
		t.Fatalf("hash after the second touch = %q, want %q", got, want)
	}
}

func TestReplaceThatDropsTheRecordKeepsItAndDoesNotRoll(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	startWatcher(t, c)
	ns := labeledNamespace(t, c)
	ctx := t.Context()

	_, d := createBeforeItsSecret(t, c, ns)
	record := d.Annotations[confighash.AnnotationSources]
	expectReplicaSets(t, c, ns, "web", 1)

	// A replace with the manifest as a tool renders it: neither our annotation on the
	// metadata nor the hash on the pod template.
	current, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	replaced := fixtures.Deployment("web", 1, fixtures.SecretVolumeTemplate("issued-tls"))
	replaced.ResourceVersion = current.ResourceVersion
	d, err = c.Client.AppsV1().Deployments(ns).Update(ctx, replaced, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Annotations[confighash.AnnotationSources]; got != record {
		t.Fatalf("sources record after replace = %q, want it carried over: %q", got, record)
	}
	expectReplicaSets(t, c, ns, "web", 1)
}

func TestPatchCABundleSetsEveryWebhook(t *testing.T) {
	c := sharedCluster(t)
	w := startWebhook(t, c)
	other, err := certs.NewAuthority("other-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := certs.PatchCABundle(t.Context(), c.Client, webhookConfigName, other.CertPEM); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), webhookConfigName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(cfg.Webhooks[0].ClientConfig.CABundle) != string(other.CertPEM) {
		t.Fatal("caBundle not replaced")
	}
	// The API server no longer trusts the webhook's certificate: it fails open.
	time.Sleep(1500 * time.Millisecond)
	ns := labeledNamespace(t, c)
	tmpl := fixtures.PlainTemplate()
	d, err := c.Client.AppsV1().Deployments(ns).Create(t.Context(), fixtures.Deployment("web", 1, tmpl), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Spec.Template.Annotations[confighash.AnnotationHash]; ok {
		t.Fatal("hashed through a webhook whose CA the API server does not trust")
	}
	// And back: with the right CA, admission works again.
	if err := certs.PatchCABundle(t.Context(), c.Client, webhookConfigName, w.ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	waitAdmitting(t, c, ns)
	d, err = c.Client.AppsV1().Deployments(ns).Create(t.Context(), fixtures.Deployment("web-2", 1, tmpl), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Spec.Template.Annotations[confighash.AnnotationHash]; !ok {
		t.Fatal("no hash after restoring the caBundle")
	}
}

func TestSelfSignedWebhookSetsItsOwnCABundle(t *testing.T) {
	c := sharedCluster(t)
	ctx := t.Context()
	ports, err := cluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	// The certificate names localhost; the API server dials it.
	url := fmt.Sprintf("https://localhost:%d", ports[0])
	api := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	_ = api.Delete(ctx, webhookConfigName, metav1.DeleteOptions{})
	if _, err := api.Create(ctx, webhook.Configuration(webhookConfigName, admissionregistrationv1.WebhookClientConfig{URL: &url}, defaultScope()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), webhookConfigName, metav1.DeleteOptions{}) })
	const secret = "confighash-webhook-tls-e2e"
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Secrets(installNamespace).Delete(context.Background(), secret, metav1.DeleteOptions{})
	})

	startComponent(t, c, "webhook", fmt.Sprintf("--listen-address=127.0.0.1:%d", ports[0]),
		"--tls-self-signed-secret="+secret, "--tls-dns-names=localhost", "--webhook-configuration="+webhookConfigName)
	cfg, err := api.Get(ctx, webhookConfigName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Client.CoreV1().Secrets(installNamespace).Get(ctx, secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cfg.Webhooks[0].ClientConfig.CABundle, s.Data["ca.crt"]) {
		t.Fatal("the caBundle is not the CA the webhook created")
	}
	ns := labeledNamespace(t, c)
	waitAdmitting(t, c, ns)
	d, err := c.Client.AppsV1().Deployments(ns).Create(ctx, fixtures.Deployment("web", 1, fixtures.PlainTemplate()), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Spec.Template.Annotations[confighash.AnnotationHash]; !ok {
		t.Fatal("no hash: the API server could not call the self-signed webhook")
	}
}

// TestFaultCertificateRotationUnderAStreamOfAdmissionsFailsNoCall: creates keep arriving
// through the API server while the serving certificate is renewed five times; every
// one is hashed, so no call to the webhook failed (failing open would leave it bare).
func TestFaultCertificateRotationUnderAStreamOfAdmissionsFailsNoCall(t *testing.T) {
	c := sharedCluster(t)
	w := startWebhook(t, c)
	ns := labeledNamespace(t, c)
	stop := make(chan struct{})
	results := make(chan bool, 10000)
	go func() {
		defer close(results)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			d, err := c.Client.AppsV1().Deployments(ns).Create(t.Context(), fixtures.Deployment(fmt.Sprintf("web-%d", i), 0, fixtures.PlainTemplate()),
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			results <- err == nil && d.Spec.Template.Annotations[confighash.AnnotationHash] != ""
		}
	}()
	for range 5 {
		time.Sleep(500 * time.Millisecond)
		w.issue(t)
	}
	time.Sleep(time.Second) // past the last reload
	close(stop)
	calls, failed := 0, 0
	for ok := range results {
		calls++
		if !ok {
			failed++
		}
	}
	if got := w.metric(t, "confighash_certificate_loads_total"); got < 2 {
		t.Fatalf("certificate loads = %v: the rotations were not picked up", got)
	}
	if calls < 20 || failed != 0 {
		t.Fatalf("%d of %d admissions during five certificate rotations were not hashed", failed, calls)
	}
	t.Logf("%d admissions during five rotations, none failed; %v certificates loaded", calls, w.metric(t, "confighash_certificate_loads_total"))
}

// everywhere is a gate that knows no namespace: the door reads every one whole.
type everywhere struct{}

func (everywhere) Known(string) bool           { return false }
func (everywhere) Mode(string) confighash.Mode { return confighash.ModeOff }
func (everywhere) HasSynced() bool             { return true }

// newSources is a cache of the sources of the namespaces, or of every one.
func newSources(tb testing.TB, c *cluster.Cluster, namespaces ...string) *sourcecache.Cache {
	tb.Helper()
	s, err := sourcecache.New(c.Client, watches.Door{Namespaces: namespaces, Gate: everywhere{}}, sourcecache.Filter{}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
