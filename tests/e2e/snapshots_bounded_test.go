package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
	"github.com/confighash/confighash/webhook"
)

// forger posts AdmissionReviews straight to the webhook, as any pod that can reach its
// Service can, and returns the webhook's warnings.
type forger struct {
	client *http.Client
	url    string
}

func newForger(t *testing.T, w *webhookProcess) *forger {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(w.ca.CertPEM) {
		t.Fatal("the test CA does not parse")
	}
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 8}
	t.Cleanup(transport.CloseIdleConnections)
	return &forger{client: &http.Client{Transport: transport, Timeout: 15 * time.Second}, url: "https://" + w.addr + webhook.Path}
}

// post sends a review of the object and returns its warnings.
func (f *forger) post(t *testing.T, op admissionv1.Operation, ns string, obj, old runtime.Object) []string {
	raw := func(o runtime.Object) runtime.RawExtension {
		if o == nil {
			return runtime.RawExtension{}
		}
		b, err := json.Marshal(o)
		if err != nil {
			t.Error(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID(fmt.Sprintf("forged-%d", time.Now().UnixNano())), Operation: op, Namespace: ns,
			Kind:     metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Resource: metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
			Object:   raw(obj), OldObject: raw(old),
		},
	}
	body, _ := json.Marshal(review)
	resp, err := f.client.Post(f.url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Errorf("post a forged review: %v", err)
		return nil
	}
	defer resp.Body.Close()
	var answer admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || answer.Response == nil {
		t.Errorf("the webhook's answer to a forged review: %v", err)
		return nil
	}
	return answer.Response.Warnings
}

// ownedBy counts the namespace's labelled Secrets an owner reference with this UID owns.
func ownedBy(t *testing.T, c *cluster.Cluster, ns string, uid types.UID) int {
	t.Helper()
	list, err := c.Client.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{LabelSelector: confighash.LabelSnapshotOf})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range list.Items {
		if slices.ContainsFunc(s.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == uid }) {
			n++
		}
	}
	return n
}

// snapshotsHeld returns the namespace's labelled Secrets and the bytes of their data.
func snapshotsHeld(t *testing.T, c *cluster.Cluster, ns string) (count int, size int) {
	t.Helper()
	list, err := c.Client.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{LabelSelector: confighash.LabelSnapshotOf})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		for k, v := range s.Data {
			size += len(k) + len(v)
		}
	}
	return len(list.Items), size
}

// TestForgedReviewsMakeAtMostTheBoundedSnapshotsAndTheSweepTakesThem: 1,000 pinned
// CREATE reviews posted straight to the webhook, each naming one more absent key of a
// 30 KB non-Opaque Secret (copied whole) and carrying the UID of an existing Deployment,
// leave one snapshot, holding the Secret's real data: a snapshot is named by the data
// it copies, and the webhook copies only what it reads (the cap, 10 here, is never
// reached); a review of a Secret that does not exist makes nothing. A forged CREATE's
// UID owns nothing, and the owner a forged UPDATE gives, an existing Deployment by its
// name and UID that uses nothing of the Secret, holds nothing: the sweep deletes them
// all.
func TestForgedReviewsMakeAtMostTheBoundedSnapshotsAndTheSweepTakesThem(t *testing.T) {
	const sweep, maxCount, forged = 2 * time.Second, 10, 1000
	c := sharedCluster(t)
	wh := startWebhook(t, c, fmt.Sprintf("--snapshot-max-count=%d", maxCount))
	ns := labeledNamespace(t, c)
	value := bytes.Repeat([]byte("s"), 30<<10)
	big := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "big"}, Type: "example.com/big", Data: map[string][]byte{"v": value}}
	if _, err := c.Client.CoreV1().Secrets(ns).Create(t.Context(), big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	victim := fixtures.Deployment("victim", 0, fixtures.PlainTemplate())
	createDeployment(t, c, ns, victim)
	stored, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), "victim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pinned := map[string]string{confighash.AnnotationInject: "true", confighash.AnnotationPin: "true"}
	f := newForger(t, wh)
	// post forges a review of a pinned Deployment that uses a key of a Secret and
	// carries the victim's UID.
	post := func(op admissionv1.Operation, name, secret, key string) []string {
		tmpl := fixtures.PlainTemplate()
		tmpl.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "V", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}}}
		d := fixtures.AnnotatedDeployment(name, pinned, tmpl)
		d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
		d.Namespace, d.UID = ns, stored.UID
		var old runtime.Object
		if op == admissionv1.Update {
			// An update of its image: its pods start anew, with the current data.
			was := d.DeepCopy()
			was.Spec.Template.Spec.Containers[0].Image = "example.com/app:0"
			old = was
		}
		return f.post(t, op, ns, d, old)
	}

	// The victim's own name and UID, in an update: the webhook takes an update's UID
	// as the owner, but the victim uses nothing of big.
	post(admissionv1.Update, "victim", "big", "y")
	if owned := ownedBy(t, c, ns, stored.UID); owned != 1 {
		t.Fatalf("the forged update made %d snapshots owned by the victim, want 1", owned)
	}

	var mu sync.Mutex
	capped := 0
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				warnings := post(admissionv1.Create, fmt.Sprintf("forged-%d", i), "big", fmt.Sprintf("x%d", i))
				if slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "not pinned this time") }) {
					mu.Lock()
					capped++
					mu.Unlock()
				}
			}
		})
	}
	for i := range forged {
		work <- i
	}
	close(work)
	wg.Wait()
	post(admissionv1.Create, "ghost-user", "ghost", "v")

	count, size := snapshotsHeld(t, c, ns)
	t.Logf("%d forged pinned reviews left %d snapshots holding %d bytes; %d were admitted unpinned", forged, count, size, capped)
	if count != 1 || capped != 0 {
		t.Errorf("%d forged reviews of one datum left %d snapshots and %d were admitted unpinned, want one snapshot", forged, count, capped)
	}
	list, err := c.Client.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{LabelSelector: confighash.LabelSnapshotOf})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		if s.Annotations[confighash.LabelSnapshotOf] != "big" || !bytes.Equal(s.Data["v"], value) {
			t.Errorf("the snapshot %s is of %q with %d bytes, want a copy of big", s.Name, s.Annotations[confighash.LabelSnapshotOf], len(s.Data["v"]))
		}
	}
	if owned := ownedBy(t, c, ns, stored.UID); owned != 1 {
		t.Errorf("%d snapshots are owned by the victim's UID, want the forged update's alone: a create's UID owns nothing", owned)
	}

	// Started now, so that what the reviews wrote is counted whole first.
	w := startWatcher(t, c, "--snapshot-sweep="+sweep.String())
	waitFor(t, 15*sweep, "the forged snapshots to be swept", func() bool {
		n, _ := snapshotsHeld(t, c, ns)
		return n == 0
	})
	if got := w.metric(t, "confighash_watcher_snapshot_sweep_requests_total"); got == 0 {
		t.Error("the sweeps made no API calls, by their metric")
	}
	if _, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), "victim", metav1.GetOptions{}); err != nil {
		t.Errorf("the victim Deployment: %v", err)
	}
}

// TestAPinnedWorkloadBeyondTheCapIsAdmittedUnpinned: with room for one snapshot in the
// namespace, a second pinned Deployment is created unpinned: its template names its
// ConfigMap itself and carries the hash, the user sees a warning, the watcher an Event,
// and no snapshot is made for it.
func TestAPinnedWorkloadBeyondTheCapIsAdmittedUnpinned(t *testing.T) {
	c := sharedCluster(t)
	wh := startWebhook(t, c, "--snapshot-max-count=1")
	startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "first", map[string]string{"k": "1"})
	createConfigMap(t, c, ns, "second", map[string]string{"k": "2"})
	pinned := map[string]string{confighash.AnnotationInject: "true", confighash.AnnotationPin: "true"}
	createDeployment(t, c, ns, fixtures.AnnotatedDeployment("web", pinned, fixtures.EnvFromTemplate("first")))
	waitFor(t, 10*time.Second, "the first snapshot", func() bool { return len(snapshotNames(t, c, ns, confighash.ConfigMap)) == 1 })

	client, warned := warnedClient(t, c)
	created, err := client.AppsV1().Deployments(ns).Create(t.Context(), fixtures.AnnotatedDeployment("api", pinned, fixtures.EnvFromTemplate("second")), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !warned.has("not pinned this time: the namespace has 1 snapshots, and 1 more would exceed its cap of 1") {
		t.Errorf("the create's warnings %q do not say it was not pinned", warned.all())
	}
	tmpl := created.Spec.Template
	if got := tmpl.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name; got != "second" {
		t.Errorf("the unpinned template names %q, want the ConfigMap second itself", got)
	}
	if tmpl.Annotations[confighash.AnnotationHash] == "" || tmpl.Annotations[confighash.AnnotationPinned] != "" {
		t.Errorf("the unpinned template's annotations %v: want a hash and no pins", tmpl.Annotations)
	}
	if created.Annotations[confighash.AnnotationNotPinned] == "" {
		t.Errorf("the unpinned Deployment does not say why it is not pinned: %v", created.Annotations)
	}
	if got := wh.metric(t, `confighash_webhook_snapshots_capped_total{limit="count"}`); got != 1 {
		t.Errorf(`confighash_webhook_snapshots_capped_total{limit="count"} = %v, want 1`, got)
	}
	waitFor(t, 10*time.Second, "a NotPinned Event", func() bool {
		events, err := c.Client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=NotPinned,involvedObject.name=api"})
		return err == nil && len(events.Items) > 0
	})
	expectRollouts(t, c, ns, map[string]int{"web": 1, "api": 1})
	if got := snapshotNames(t, c, ns, confighash.ConfigMap); len(got) != 1 {
		t.Errorf("snapshots %v, want web's alone", got)
	}
}

// TestTheSweepDeletesOnlySnapshotsConfighashMade: a ConfigMap restored from a
// snapshot's YAML under another name, and a plain ConfigMap a user labelled as a
// snapshot, carry the label and have no owner; neither is a snapshot confighash made,
// and both survive the sweeps.
func TestTheSweepDeletesOnlySnapshotsConfighashMade(t *testing.T) {
	const sweep = 2 * time.Second
	c := sharedCluster(t)
	startWebhook(t, c)
	w := startWatcher(t, c, "--snapshot-sweep="+sweep.String())
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "app", map[string]string{"k": "v"})
	pinned := map[string]string{confighash.AnnotationInject: "true", confighash.AnnotationPin: "true"}
	createDeployment(t, c, ns, fixtures.AnnotatedDeployment("web", pinned, fixtures.EnvFromTemplate("app")))
	var made []string
	waitFor(t, 10*time.Second, "web's snapshot", func() bool {
		made = snapshotNames(t, c, ns, confighash.ConfigMap)
		return len(made) == 1
	})
	snapshot, err := c.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), made[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	restored := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-restored", Labels: snapshot.Labels, Annotations: snapshot.Annotations},
		Immutable: snapshot.Immutable, Data: snapshot.Data}
	labelled := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mine", Labels: map[string]string{confighash.LabelSnapshotOf: "app"},
		Annotations: map[string]string{confighash.LabelSnapshotOf: "app"}}, Data: map[string]string{"k": "mine"}}
	for _, cm := range []*corev1.ConfigMap{restored, labelled} {
		if _, err := c.Client.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Old enough to sweep after one interval; then three sweeps, of two lists each at
	// least: a snapshot nothing holds would be deleted at the second.
	time.Sleep(sweep)
	calls := w.metric(t, "confighash_watcher_snapshot_sweep_requests_total")
	waitFor(t, 10*sweep, "three sweeps more", func() bool { return w.metric(t, "confighash_watcher_snapshot_sweep_requests_total") >= calls+6 })
	for _, name := range []string{"app-restored", "mine", made[0]} {
		if _, err := c.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{}); err != nil {
			t.Errorf("after the sweeps, %s: %v", name, err)
		}
	}
	if got := w.metric(t, "confighash_watcher_snapshots_swept_total"); got != 0 {
		t.Errorf("confighash_watcher_snapshots_swept_total = %v, want 0", got)
	}
}

// countedAPIServer serves the API server to one client through a proxy on loopback
// that counts its requests, but for watches, Leases and Events.
type countedAPIServer struct {
	kubeconfig string
	calls      atomic.Int64
}

func startCountedAPIServer(t *testing.T, c *cluster.Cluster) *countedAPIServer {
	t.Helper()
	p := &countedAPIServer{}
	p.kubeconfig = proxyAPIServer(t, c, func(r *http.Request) bool {
		if r.URL.Query().Get("watch") != "true" && !strings.Contains(r.URL.Path, "/leases") && !strings.Contains(r.URL.Path, "/events") {
			p.calls.Add(1)
		}
		return true
	})
	return p
}

// TestTheSweepsCallsDoNotGrowWithSnapshotsTimesWorkloads: 100 snapshots of a
// ConfigMap that 10 Deployments use, owned and named by nothing, are swept with a
// bounded number of API calls: each Deployment's revisions are read once a sweep, not
// once per snapshot, and a sweep makes at most 200 calls. (Before, each sweep read
// every user's revisions for every snapshot: 2 + 100 x 10 x 2 calls.)
func TestTheSweepsCallsDoNotGrowWithSnapshotsTimesWorkloads(t *testing.T) {
	const sweep, snapshots, users = 2 * time.Second, 100, 10
	c := sharedCluster(t)
	startWebhook(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "app", map[string]string{"k": "v"})
	for i := range users {
		createDeployment(t, c, ns, fixtures.AnnotatedDeployment(fmt.Sprintf("user-%d", i), map[string]string{confighash.AnnotationInject: "true"}, fixtures.EnvFromTemplate("app")))
	}
	key := hashKey(t, c)
	for i := range snapshots {
		// Each as the webhook makes it: immutable, named by its data, sealed.
		cm := &corev1.ConfigMap{Immutable: ptr.To(true), Data: map[string]string{"k": fmt.Sprint(i)}}
		whole := confighash.Reference{SourceRef: confighash.SourceRef{Kind: confighash.ConfigMap, Name: "app"}, AllKeys: true}
		name := confighash.SnapshotName("app", confighash.SnapshotDigest(key, ns, whole, confighash.SourceOfConfigMap(cm)))
		cm.ObjectMeta = metav1.ObjectMeta{Name: name, Labels: map[string]string{confighash.LabelSnapshotOf: "app"},
			Annotations: map[string]string{confighash.LabelSnapshotOf: "app", confighash.AnnotationSeal: confighash.SnapshotSeal(key, confighash.ConfigMap, ns, name)}}
		if _, err := c.Client.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	expectRollouts(t, c, ns, map[string]int{"user-0": 1})
	api := startCountedAPIServer(t, c)
	start := time.Now()
	startWatcher(t, c, "--snapshot-sweep="+sweep.String(), "--kubeconfig="+api.kubeconfig)
	waitFor(t, 30*sweep, "the snapshots to be swept", func() bool { return len(snapshotNames(t, c, ns, confighash.ConfigMap)) == 0 })
	calls, sweeps := api.calls.Load(), time.Since(start)/sweep
	t.Logf("%d snapshots with %d users swept in about %d sweeps with %d API calls", snapshots, users, sweeps, calls)
	if limit := int64(sweeps+1) * 200; calls > limit {
		t.Errorf("%d API calls in about %d sweeps, more than 200 a sweep", calls, sweeps)
	}
}
