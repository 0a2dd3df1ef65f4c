package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// secretsStore writes what the Secrets Store CSI driver writes, as it writes it (its
// pkg/secrets-store and pkg/rotation, v1.5): on each pod's mount of the class a
// SecretProviderClassPodStatus named pod-namespace-class, owned by the pod, with the
// versions the provider gave, and the synced Secret if it does not exist; on a
// rotation, each status updated with the new versions and then the synced Secret
// patched, pod by pod. No provider runs: the "provider" is a version and a value.
type secretsStore struct {
	t                    testing.TB
	c                    *cluster.Cluster
	dyn                  dynamic.Interface
	ns, class, synced    string
	mu                   sync.Mutex
	version, secretValue string
}

func (s *secretsStore) current() (string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, s.secretValue
}

// status is a pod status as the driver writes it.
func (s *secretsStore) status(pod *corev1.Pod, version string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "secrets-store.csi.x-k8s.io/v1", "kind": "SecretProviderClassPodStatus",
		"metadata": map[string]any{
			"name": pod.Name + "-" + s.ns + "-" + s.class, "namespace": s.ns,
			"labels":          map[string]any{"internal.secrets-store.csi.k8s.io/node-name": pod.Spec.NodeName},
			"ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "Pod", "name": pod.Name, "uid": string(pod.UID)}},
		},
		"status": map[string]any{
			"podName": pod.Name, "secretProviderClassName": s.class, "mounted": true,
			"targetPath": "/var/lib/kubelet/pods/" + string(pod.UID) + "/volumes/kubernetes.io~csi/secrets/mount",
			"objects":    []any{map[string]any{"id": "secret/db-password", "version": version}},
		},
	}}
	return u
}

// mountNew mounts the class for each scheduled pod that mounts it and has no status.
func (s *secretsStore) mountNew(ctx context.Context) error {
	pods, err := s.c.Client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	version, value := s.current()
	for i := range pods.Items {
		pod := &pods.Items[i]
		mounts := slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool {
			return v.CSI != nil && v.CSI.Driver == confighash.SecretsStoreDriver && v.CSI.VolumeAttributes["secretProviderClass"] == s.class
		})
		if !mounts || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil {
			continue
		}
		_, err := s.dyn.Resource(sourcecache.PodStatuses).Namespace(s.ns).Create(ctx, s.status(pod, version), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s.synced}, StringData: map[string]string{"password": value}}
		if _, err := s.c.Client.CoreV1().Secrets(s.ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// run mounts for new pods every 100 ms until ctx is done.
func (s *secretsStore) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := s.mountNew(ctx); err != nil && ctx.Err() == nil {
			s.t.Errorf("the fake driver: %v", err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// rotate gives the provider a new version, then rotates each pod's mount: its status
// updated, then the synced Secret patched; pause between pods. A rotation that finds
// the versions unchanged still rewrites the status, as a remount does.
func (s *secretsStore) rotate(version, value string, pause time.Duration) {
	s.t.Helper()
	s.mu.Lock()
	s.version, s.secretValue = version, value
	s.mu.Unlock()
	api := s.dyn.Resource(sourcecache.PodStatuses).Namespace(s.ns)
	list, err := api.List(s.t.Context(), metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	for i := range list.Items {
		st := &list.Items[i]
		objects := []any{map[string]any{"id": "secret/db-password", "version": version}}
		if err := unstructured.SetNestedSlice(st.Object, objects, "status", "objects"); err != nil {
			s.t.Fatal(err)
		}
		if _, err := api.Update(s.t.Context(), st, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			s.t.Fatal(err)
		}
		patch := fmt.Sprintf(`{"stringData":{"password":%q}}`, value)
		if _, err := s.c.Client.CoreV1().Secrets(s.ns).Patch(s.t.Context(), s.synced, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			s.t.Fatal(err)
		}
		time.Sleep(pause)
	}
}

// csiTemplate mounts the SecretProviderClass class through the driver.
func csiTemplate(class string) corev1.PodTemplateSpec {
	tmpl := fixtures.PlainTemplate()
	tmpl.Spec.Volumes = []corev1.Volume{{Name: "secrets", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
		Driver: confighash.SecretsStoreDriver, VolumeAttributes: map[string]string{"secretProviderClass": class}}}}}
	return tmpl
}

func TestSecretProviderClassRotationRollsEachWorkloadOnce(t *testing.T) {
	c := sharedCluster(t)
	if err := c.InstallSecretsStoreCRDs(t.Context()); err != nil {
		t.Fatal(err)
	}
	startWebhook(t, c, "--enable-csi-integration")
	startWatcher(t, c, "--enable-csi-integration")
	ns := labeledNamespace(t, c)
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	// The class as a user writes it, syncing the password to Secret db-synced.
	spc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "secrets-store.csi.x-k8s.io/v1", "kind": "SecretProviderClass",
		"metadata": map[string]any{"name": "vault-db"},
		"spec": map[string]any{"provider": "vault", "parameters": map[string]any{"roleName": "app"},
			"secretObjects": []any{map[string]any{"secretName": "db-synced", "type": "Opaque",
				"data": []any{map[string]any{"objectName": "db-password", "key": "password"}}}}},
	}}
	if _, err := dyn.Resource(sourcecache.PodStatuses.GroupVersion().WithResource("secretproviderclasses")).Namespace(ns).Create(t.Context(), spc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	driver := &secretsStore{t: t, c: c, dyn: dyn, ns: ns, class: "vault-db", synced: "db-synced", version: "1", secretValue: "s3cret-1"}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { driver.run(ctx) })
	defer func() { stop(); wg.Wait() }()

	// mounted mounts the class; synced also reads the synced Secret in its env, as many
	// charts do. The driver writes the statuses and the Secret once their pods exist.
	synced := csiTemplate("vault-db")
	synced.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "DB_PASSWORD", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db-synced"}, Key: "password"}}}}
	for name, tmpl := range map[string]corev1.PodTemplateSpec{"mounted": csiTemplate("vault-db"), "synced": synced} {
		if _, err := c.Client.AppsV1().Deployments(ns).Create(t.Context(), fixtures.Deployment(name, 2, tmpl), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "the driver to mount for the 4 pods", func() bool {
		l, err := dyn.Resource(sourcecache.PodStatuses).Namespace(ns).List(t.Context(), metav1.ListOptions{})
		return err == nil && len(l.Items) == 4
	})
	// The first mounts and the Secret's creation are what the pods started with.
	expectRollouts(t, c, ns, map[string]int{"mounted": 1, "synced": 1})

	// A pass that finds the versions unchanged rolls nothing.
	driver.rotate("1", "s3cret-1", 50*time.Millisecond)
	expectRollouts(t, c, ns, map[string]int{"mounted": 1, "synced": 1})

	// A rotation, seen pod by pod, with the synced Secret patched after each: one
	// rollout each, and none when the new pods mount the new version.
	driver.rotate("2", "s3cret-2", 150*time.Millisecond)
	expectRollouts(t, c, ns, map[string]int{"mounted": 2, "synced": 2})
	time.Sleep(time.Second) // the new pods' mounts
	expectRollouts(t, c, ns, map[string]int{"mounted": 2, "synced": 2})
	d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), "synced", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	record, err := confighash.ParseRecord(d.Annotations[confighash.AnnotationSources])
	if err != nil || !slices.ContainsFunc(record, func(e confighash.RecordEntry) bool {
		return e.Kind == confighash.SecretProviderClass && e.Name == "vault-db"
	}) ||
		!slices.ContainsFunc(record, func(e confighash.RecordEntry) bool { return e.Kind == confighash.Secret && e.Name == "db-synced" }) {
		t.Fatalf("synced's record %q: want SecretProviderClass vault-db and Secret db-synced", d.Annotations[confighash.AnnotationSources])
	}
	out, stderr, status := explain(t, c, "deployment/synced", "-n", ns, "--enable-csi-integration")
	if status != 0 || len(out) != 1 || out[0].Verdict != confighash.VerdictUpToDate || out[0].Hash != d.Spec.Template.Annotations[confighash.AnnotationHash] {
		t.Fatalf("explain deployment/synced: status %d, %+v, %s; want up to date, with the hash the template carries", status, out, stderr)
	}
}
