package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/fixtures"
)

// TestEqualSecretsInTwoNamespacesHaveDifferentDigests: secret/db holding the same
// password in two namespaces has a different digest in each workload's sources
// record, and a different pod-template hash: comparing them tells nothing of the
// Secret (issue 32, point 3).
func TestEqualSecretsInTwoNamespacesHaveDifferentDigests(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	var digests, hashes []string
	for _, ns := range []string{labeledNamespace(t, c), labeledNamespace(t, c)} {
		createSecret(t, c, ns, "db", map[string]string{"password": "hunter2"})
		createDeployment(t, c, ns, fixtures.AnnotatedDeployment("api", map[string]string{confighash.AnnotationInject: "true"}, fixtures.SecretVolumeTemplate("db")))
		d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), "api", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		text := d.Annotations[confighash.AnnotationSources]
		record, err := confighash.ParseRecord(text)
		if err != nil || len(record) != 1 || !record[0].Seen {
			t.Fatalf("%s: sources record %q, %v; want secret/db recorded", ns, text, err)
		}
		digests, hashes = append(digests, record[0].Digest.String()), append(hashes, d.Spec.Template.Annotations[confighash.AnnotationHash])
		t.Logf("%s: %s=%q, hash %s", ns, confighash.AnnotationSources, text, hashes[len(hashes)-1])
	}
	if digests[0] == digests[1] || hashes[0] == hashes[1] {
		t.Fatalf("digests %v, hashes %v: equal Secrets in two namespaces must not have equal digests or hashes", digests, hashes)
	}
}

// TestReferencesToAbsentKeysOfOneSecretMakeOneSnapshot: 20 updates of a pinned
// Deployment, each referencing one more absent key of one unchanged 30 KB Secret,
// each roll it, and leave one snapshot of the Secret: a snapshot is named by the data
// it copies (issue 32, point 2; 21 copies before).
func TestReferencesToAbsentKeysOfOneSecretMakeOneSnapshot(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createSecret(t, c, ns, "big", map[string]string{"k": strings.Repeat("x", 30<<10)})
	use := func(key string) corev1.EnvVar {
		return corev1.EnvVar{Name: strings.ToUpper(key), ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "big"}, Key: key, Optional: ptr.To(key != "k")}}}
	}
	tmpl := fixtures.PlainTemplate()
	tmpl.Spec.Containers[0].Env = []corev1.EnvVar{use("k")}
	web := fixtures.AnnotatedDeployment("web", map[string]string{confighash.AnnotationInject: "true", confighash.AnnotationPin: "true"}, tmpl)
	web.Spec.RevisionHistoryLimit = ptr.To(int32(30)) // every revision kept, and what it names
	createDeployment(t, c, ns, web)
	for i := range 20 {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			d.Spec.Template.Spec.Containers[0].Env = append(d.Spec.Template.Spec.Containers[0].Env, use(fmt.Sprintf("x%d", i)))
			_, err = c.Client.AppsV1().Deployments(ns).Update(t.Context(), d, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
		// Each its own rollout: a template replaced before its ReplicaSet is made makes none.
		waitFor(t, 30*time.Second, fmt.Sprintf("web's rollout %d", i+2), func() bool { return replicaSets(t, c, ns, "web") == i+2 })
	}
	snapshots := snapshotNames(t, c, ns, confighash.Secret)
	t.Logf("snapshots of secret/big after 20 updates: %d", len(snapshots))
	if len(snapshots) != 1 {
		t.Fatalf("snapshots of secret/big: %v, want one", snapshots)
	}
}

// TestAnObjectUnderASnapshotsNameIsNotUsedUnlessItIsTheSnapshot: an object made
// beforehand under the name a snapshot gets, mutable, or immutable and labelled but
// holding other data, is never pinned to: the admission goes through unpinned with a
// warning, and nothing rolls to it (issue 32, point 5).
func TestAnObjectUnderASnapshotsNameIsNotUsedUnlessItIsTheSnapshot(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	ns := labeledNamespace(t, c)
	key := hashKey(t, c)
	client, warned := warnedClient(t, c)
	for _, tc := range []struct {
		name      string
		immutable bool
		data      string
	}{
		{"mutable", false, "the same"},
		{"other-data", true, "other"},
	} {
		source := createConfigMap(t, c, ns, tc.name, map[string]string{"k": "the same"})
		ref := confighash.Reference{SourceRef: confighash.SourceRef{Kind: confighash.ConfigMap, Name: tc.name}, AllKeys: true}
		snapshot := confighash.SnapshotName(tc.name, confighash.SnapshotDigest(key, ns, ref, confighash.SourceOfConfigMap(source)))
		planted := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: snapshot, Labels: map[string]string{confighash.LabelSnapshotOf: tc.name},
			Annotations: map[string]string{confighash.LabelSnapshotOf: tc.name}}, Immutable: ptr.To(tc.immutable), Data: map[string]string{"k": tc.data}}
		if _, err := c.Client.CoreV1().ConfigMaps(ns).Create(t.Context(), planted, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		d := fixtures.AnnotatedDeployment(tc.name, map[string]string{confighash.AnnotationInject: "true", confighash.AnnotationPin: "true"}, fixtures.EnvFromTemplate(tc.name))
		created, err := client.AppsV1().Deployments(ns).Create(t.Context(), d, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := created.Spec.Template.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name; got != tc.name {
			t.Errorf("%s: the pod template names %s, want %s itself: the object under the snapshot's name is not its snapshot", tc.name, got, tc.name)
		}
		if !warned.has(snapshot + " exists but is not its snapshot") {
			t.Errorf("%s: warnings %q, want one naming %s", tc.name, warned.all(), snapshot)
		}
	}
	expectRollouts(t, c, ns, map[string]int{"mutable": 1, "other-data": 1})
}
