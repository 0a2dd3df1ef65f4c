package e2e

import (
	"fmt"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// TestHostileRecreationRecordsCostTheWatcherLittle (issue 41, point 2): a namespace
// user makes 60 Secrets of the type of a Job's recreation record, labelled as one, of
// 900 KB each, in their own namespace, which confighash acts in. The watcher started
// after them lists their metadata alone and reads each, capped, when it looks at it:
// its peak RSS stays far under the 253 MiB it took when it listed them whole (34 MiB
// without them), the records are left as they are, and a real recreation in another
// namespace happens once.
func TestHostileRecreationRecordsCostTheWatcherLittle(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	victim, hostile := labeledNamespace(t, c), labeledNamespace(t, c)
	createConfigMap(t, c, victim, "cfg", map[string]string{"k": "0"})
	job := createJob(t, c, victim, runningJob("batch", map[string]string{confighash.ReloaderConfigMapReload: "cfg"}, fixtures.EnvFromTemplate("cfg")))

	tenant := secretsTenant(t, c, "record-maker", hostile)
	const records, size = 60, 900_000
	data := make([]byte, size)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	for i := range records {
		name := fmt.Sprintf("job-%02d", i)
		rec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: confighash.RecreationName(name), Labels: map[string]string{confighash.LabelRecreationOf: name},
				Annotations: map[string]string{confighash.AnnotationReplaces: "0000"}},
			Type: confighash.RecreationType, Immutable: ptr.To(true), Data: map[string][]byte{confighash.RecreationJobKey: data},
		}
		if _, err := tenant.CoreV1().Secrets(hostile).Create(t.Context(), rec, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the tenant's record %d: %v", i, err)
		}
	}

	w := startWatcher(t, c)
	waitQuiet(t, w)
	setKey(t, c, victim, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	now := waitRecreated(t, c, victim, "batch", job.UID, 30*time.Second)
	waitQuiet(t, w)
	expectRecreatedOnce(t, c, victim, "batch", job.UID, now)

	peak := peakRSSMiB(t, w.cmd.Process.Pid)
	t.Logf("watcher peak RSS with %d records of %d KB: %.1f MiB", records, size/1000, peak)
	if peak > 96 {
		t.Errorf("the watcher's peak RSS is %.0f MiB, want under 96 MiB (it was 253 MiB when it listed the records whole)", peak)
	}
	left, err := c.Client.CoreV1().Secrets(hostile).List(t.Context(), metav1.ListOptions{LabelSelector: confighash.LabelRecreationOf})
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != records {
		t.Errorf("%d of the tenant's %d records are left: they are not the watcher's to delete", len(left.Items), records)
	}
	if w.metric(t, "confighash_watcher_leader") != 1 {
		t.Error("the watcher no longer leads")
	}
}

// TestARefusedJobRecreationIsGivenUp (issue 41, point 5): a Job a foreign finalizer
// keeps after its delete cannot be recreated under its name. The watcher tries a few
// times, with backoff, then gives up: a Warning Event on the Job says why, the record
// of the recreation is deleted, and it is not tried again for the same data (it was
// tried forever, four API calls each time, and again at every start).
func TestARefusedJobRecreationIsGivenUp(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	w := startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	const finalizer = "example.com/keep"
	kept := runningJob("kept", map[string]string{confighash.ReloaderConfigMapReload: "cfg"}, fixtures.EnvFromTemplate("cfg"))
	kept.Finalizers = []string{finalizer}
	job := createJob(t, c, ns, kept)
	t.Cleanup(func() { // let the namespace go
		_, _ = c.Client.BatchV1().Jobs(ns).Patch(t.Context(), "kept", types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
	})

	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	start := time.Now()
	waitFor(t, 45*time.Second, "a Warning Event saying the recreation is given up", func() bool {
		events, err := c.Client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=kept,reason=RecreationFailed"})
		return err == nil && len(events.Items) == 1 && events.Items[0].Type == corev1.EventTypeWarning
	})
	t.Logf("given up after %s", time.Since(start).Round(100*time.Millisecond))
	waitQuiet(t, w)
	if _, err := c.Client.CoreV1().Secrets(ns).Get(t.Context(), confighash.RecreationName("kept"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the record of the given-up recreation is still there (%v)", err)
	}
	if now := getJob(t, c, ns, "kept"); now == nil || now.UID != job.UID {
		t.Fatal("the Job a finalizer keeps is gone or was replaced")
	}
	if got := w.metric(t, `confighash_watcher_touches_total{result="given_up"}`); got != 1 {
		t.Errorf("%v recreations given up, want 1", got)
	}
	if got := w.metric(t, `confighash_watcher_touches_total{result="error"}`); got < 5 || got > 6 {
		t.Errorf("%v failed attempts, want 5: the recreation is tried a bounded number of times", got)
	}
}

// secretsTenant returns a client acting as user, who may make and read Secrets, and
// edit Deployments, in the namespaces given and nothing else.
func secretsTenant(t testing.TB, c *cluster.Cluster, user string, namespaces ...string) kubernetes.Interface {
	t.Helper()
	client, _ := tenantClient(t, c, user, namespaces...)
	for _, ns := range namespaces {
		role, err := c.Client.RbacV1().Roles(ns).Get(t.Context(), user, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "create"}})
		if _, err := c.Client.RbacV1().Roles(ns).Update(t.Context(), role, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitAuthorized(t, c, user, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "secrets"}, true)
	}
	return client
}
