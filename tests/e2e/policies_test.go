package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/certs"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// policyCase is one write made with a component's credentials: one its code makes,
// which must pass, or one it never makes, which its policy must refuse.
type policyCase struct {
	what    string
	allowed bool
	write   func(ctx context.Context, dryRun []string) error
}

// installElsewhere applies the RBAC and admission policies of the self-signed
// variant, installed by an overlay into a new namespace, not confighash, and returns
// that namespace.
func installElsewhere(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	home := namespace(t, c, nil)
	base, err := filepath.Abs(filepath.Join("..", "..", "manifests", "variants", "self-signed"))
	if err != nil {
		t.Fatal(err)
	}
	overlay := t.TempDir()
	// kustomize takes a base by a relative path only.
	if base, err = filepath.Rel(overlay, base); err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: %s\nresources:\n- %s\n", home, base)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	rendered, err := c.Kubectl(t.Context(), nil, "kustomize", overlay)
	if err != nil {
		t.Fatal(err)
	}
	applyForTest(t, c, rbacOnly(t, rendered))
	return home
}

// impersonate returns a client that acts as the ServiceAccount, with its groups.
func impersonate(t *testing.T, c *cluster.Cluster, ns, sa string) kubernetes.Interface {
	t.Helper()
	client, _ := warnedClient(t, c, rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + sa,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	})
	return client
}

// checkPolicyCases waits until the API server enforces the policies (each refused
// write, dry run, is refused), then makes each write for real, in order.
func checkPolicyCases(t *testing.T, cases []policyCase) {
	t.Helper()
	dryRun := []string{metav1.DryRunAll}
	enforced := func() bool {
		for _, pc := range cases {
			if !pc.allowed && !refusedByPolicy(pc.write(t.Context(), dryRun)) {
				return false
			}
		}
		return true
	}
	// Bounded: a policy the API server never enforces shows below, case by case.
	for deadline := time.Now().Add(30 * time.Second); !enforced() && time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
	}
	var allowed, refused int
	for _, pc := range cases {
		if pc.allowed {
			allowed++
		} else {
			refused++
		}
		err := pc.write(t.Context(), nil)
		switch {
		case pc.allowed && err != nil:
			t.Errorf("%s: refused: %v", pc.what, err)
		case !pc.allowed && !refusedByPolicy(err):
			t.Errorf("%s: got %v, want a refusal by a ValidatingAdmissionPolicy", pc.what, err)
		}
	}
	t.Logf("%d writes allowed, %d variations refused", allowed, refused)
}

// refusedByPolicy says whether a write was refused by an admission policy, not by RBAC:
// each write the tests refuse is one the component's RBAC allows.
func refusedByPolicy(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy") &&
		!strings.Contains(err.Error(), "resulted in error") // a refusal the policy's message explains
}

// forbiddenByRBAC says whether a write was refused by RBAC, before any policy.
func forbiddenByRBAC(err error) bool {
	return apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "ValidatingAdmissionPolicy")
}

func patchDeployment(client kubernetes.Interface, ns, name string, pt types.PatchType, patch string) func(context.Context, []string) error {
	return func(ctx context.Context, dryRun []string) error {
		_, err := client.AppsV1().Deployments(ns).Patch(ctx, name, pt, []byte(patch), metav1.PatchOptions{DryRun: dryRun})
		return err
	}
}

func patchConfigMap(client kubernetes.Interface, ns, name, patch string) func(context.Context, []string) error {
	return func(ctx context.Context, dryRun []string) error {
		_, err := client.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: dryRun})
		return err
	}
}

// snapshotMeta is the metadata the webhook gives the snapshot of a source.
func snapshotMeta(name, source string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name,
		Labels:      map[string]string{confighash.LabelSnapshotOf: confighash.SnapshotOf(source)},
		Annotations: map[string]string{confighash.LabelSnapshotOf: source}}
}

// TestWatcherServiceAccountMakesOnlyTheWatchersWrites: with the install's RBAC and
// policies, in a namespace other than confighash, the watcher's ServiceAccount touches,
// heals, renames a pinned workload's sources to their snapshots, owns and deletes
// snapshots, recreates Jobs, starts a CronJob's Job, creates its hash key and Events.
// Each variation just outside one of those writes is refused by a policy, after its
// RBAC allowed it: another namespace (one confighash does not act in, kube-system, its
// own, even labelled), another field (replicas, image, schedule, other annotations, a
// pod pointed at another object, env or envFrom dropped, repeated or reordered),
// another type (a Secret that is not its key or a record, a key that is not an
// immutable Opaque Secret), a Job beyond Pod Security's baseline, another object
// (a ConfigMap that is not a snapshot, a Job confighash did not hash).
func TestWatcherServiceAccountMakesOnlyTheWatchersWrites(t *testing.T) {
	c := sharedCluster(t)
	ctx := t.Context()
	home := installElsewhere(t, c)
	ns, off := labeledNamespace(t, c), namespace(t, c, nil)
	privileged := namespace(t, c, map[string]string{confighash.InjectionLabel: confighash.InjectionEnabled, "pod-security.kubernetes.io/enforce": "privileged"})
	// Its own namespace, even where confighash is told to act in it.
	if _, err := c.Client.CoreV1().Namespaces().Patch(ctx, home, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+confighash.InjectionLabel+`":"`+confighash.InjectionEnabled+`"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{ns, off, home} {
		createConfigMap(t, c, in, "cfg", map[string]string{"k": "0"})
	}
	createSecret(t, c, ns, "db", map[string]string{"password": "0"})
	// Every kind of use a pinned pod spec renames, two of each where a list holds them:
	// Secret volumes, envFrom, env keys, a ConfigMap volume and a projected one.
	tmpl := fixtures.SecretVolumeTemplate("db")
	cfgRef, dbRef := corev1.LocalObjectReference{Name: "cfg"}, corev1.LocalObjectReference{Name: "db"}
	tmpl.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: cfgRef}}, {SecretRef: &corev1.SecretEnvSource{LocalObjectReference: dbRef}}}
	tmpl.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: "K", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: cfgRef, Key: "k"}}},
		{Name: "P", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: dbRef, Key: "password"}}},
	}
	tmpl.Spec.Volumes = append(tmpl.Spec.Volumes,
		corev1.Volume{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: cfgRef}}},
		corev1.Volume{Name: "projected", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: cfgRef}}, {Secret: &corev1.SecretProjection{LocalObjectReference: dbRef}}}}}})
	createDeployment(t, c, ns, fixtures.Deployment("web", 1, tmpl))
	for _, in := range []string{off, home} {
		createDeployment(t, c, in, fixtures.Deployment("web", 1, fixtures.EnvFromTemplate("cfg")))
	}
	// Paused for a pause period, Reloader's way, paused by its owner, and to be paused:
	// the writes allowed are made, so each case of a pause writes its own Deployment,
	// the one allowed last.
	for name, mark := range map[string]map[string]string{"held": {confighash.ReloaderPausedAt: "2026-01-02T03:04:05Z"}, "stopped": nil, "pausable": nil} {
		d := fixtures.AnnotatedDeployment(name, mark, fixtures.EnvFromTemplate("cfg"))
		d.Spec.Paused = name != "pausable"
		createDeployment(t, c, ns, d)
	}
	web, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cron := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly"}, Spec: batchv1.CronJobSpec{
		Schedule: "0 3 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: fixtures.EnvFromTemplate("cfg")}},
	}}
	cron.Spec.JobTemplate.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	if _, err := c.Client.BatchV1().CronJobs(ns).Create(ctx, cron, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := impersonate(t, c, home, "confighash-watcher")
	// An Argo Rollout restarted for its data, Reloader's way.
	createRollout(t, c, ns, "canary", fixtures.EnvFromTemplate("cfg"))
	patchRollout := func(patch string) func(context.Context, []string) error {
		return func(ctx context.Context, dryRun []string) error {
			req := w.CoreV1().RESTClient().Patch(types.MergePatchType).AbsPath("/apis/argoproj.io/v1alpha1/namespaces", ns, "rollouts", "canary").Body([]byte(patch))
			for _, d := range dryRun {
				req = req.Param("dryRun", d)
			}
			return req.Do(ctx).Error()
		}
	}
	restartedHash := confighash.RestartedMark("v1:"+strings.Repeat("1", 64), "v1:"+strings.Repeat("0", 64))
	hashedTemplate := fixtures.EnvFromTemplate("cfg")
	hashedTemplate.Annotations = map[string]string{confighash.AnnotationHash: "v1:00"}
	for _, in := range []string{ns, off} {
		for name, tmpl := range map[string]corev1.PodTemplateSpec{"hashed": hashedTemplate, "plain": fixtures.EnvFromTemplate("cfg")} {
			if _, err := c.Client.BatchV1().Jobs(in).Create(ctx, fixtures.Job(name, nil, tmpl), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	record := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: confighash.RecreationName("hashed"), Labels: map[string]string{confighash.LabelRecreationOf: "hashed"}},
		Type: confighash.RecreationType, Immutable: ptr.To(true)}
	if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, record, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const replaced = "0f0e0d0c-0b0a-0908-0706-050403020100"
	recreated := map[string]string{confighash.AnnotationRecreatedFrom: replaced}
	jobIn := func(in, name string, annotations map[string]string, tmpl corev1.PodTemplateSpec, owners ...metav1.OwnerReference) func(context.Context, []string) error {
		return func(ctx context.Context, dryRun []string) error {
			j := fixtures.Job(name, annotations, tmpl)
			j.OwnerReferences = owners
			_, err := w.BatchV1().Jobs(in).Create(ctx, j, metav1.CreateOptions{DryRun: dryRun})
			return err
		}
	}
	job := func(name string, annotations map[string]string, tmpl corev1.PodTemplateSpec, owners ...metav1.OwnerReference) func(context.Context, []string) error {
		return jobIn(ns, name, annotations, tmpl, owners...)
	}
	// hashedWith is the hashed template with a change of pod security.
	hashedWith := func(change func(*corev1.PodSpec)) corev1.PodTemplateSpec {
		tmpl := *hashedTemplate.DeepCopy()
		change(&tmpl.Spec)
		return tmpl
	}
	privilegedPod := hashedWith(func(s *corev1.PodSpec) {
		s.HostPID = true
		s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		s.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
	})
	deleteJobIn := func(in, name string) func(context.Context, []string) error {
		return func(ctx context.Context, dryRun []string) error {
			return w.BatchV1().Jobs(in).Delete(ctx, name, metav1.DeleteOptions{DryRun: dryRun})
		}
	}
	createSecretIn := func(in string, s *corev1.Secret) func(context.Context, []string) error {
		return func(ctx context.Context, dryRun []string) error {
			_, err := w.CoreV1().Secrets(in).Create(ctx, s, metav1.CreateOptions{DryRun: dryRun})
			return err
		}
	}
	event := func(in string) func(context.Context, []string) error {
		return func(ctx context.Context, dryRun []string) error {
			_, err := w.CoreV1().Events(in).Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "web."},
				InvolvedObject: corev1.ObjectReference{Kind: "Deployment", Namespace: in, Name: "web"}, Reason: "ConfigChanged", Message: "rolling", Type: corev1.EventTypeNormal},
				metav1.CreateOptions{DryRun: dryRun})
			return err
		}
	}
	hashKey := func(typ corev1.SecretType, immutable bool) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "confighash-hash-key"}, Type: typ, Immutable: ptr.To(immutable), Data: map[string][]byte{"key": []byte("k")}}
	}
	otherRecord := record.DeepCopy()
	otherRecord.Name = "stolen"
	nightly, err := c.Client.BatchV1().CronJobs(ns).Get(ctx, "nightly", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byNightly := *metav1.NewControllerRef(nightly, batchv1.SchemeGroupVersion.WithKind("CronJob"))
	for _, name := range []string{"cfg-0123456789abcdef", "cfg-fedcba9876543210"} {
		snapshot := &corev1.ConfigMap{ObjectMeta: snapshotMeta(name, "cfg"), Immutable: ptr.To(true), Data: map[string]string{"k": "0"}}
		if _, err := c.Client.CoreV1().ConfigMaps(ns).Create(ctx, snapshot, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	snapshotElsewhere := &corev1.ConfigMap{ObjectMeta: snapshotMeta("cfg-0123456789abcdef", "cfg"), Immutable: ptr.To(true), Data: map[string]string{"k": "0"}}
	if _, err := c.Client.CoreV1().ConfigMaps(off).Create(ctx, snapshotElsewhere, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	merge, jsonPatch := types.MergePatchType, types.JSONPatchType
	touch := `{"metadata":{"annotations":{"confighash.dev/trigger":"ConfigMap/cfg@1"}}}`
	owner := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":%q}]}}`, web.UID)
	env := `/spec/template/spec/containers/0/env`
	envK := `{"name":"K","valueFrom":{"configMapKeyRef":{"name":"cfg","key":"k"}}}`
	envP := `{"name":"P","valueFrom":{"secretKeyRef":{"name":"db","key":"password"}}}`
	envFrom := `/spec/template/spec/containers/0/envFrom`
	fromCfg, fromDB := `{"configMapRef":{"name":"cfg"}}`, `{"secretRef":{"name":"db"}}`
	sources := `/spec/template/spec/volumes/2/projected/sources`
	checkPolicyCases(t, []policyCase{
		{"a touch (a confighash.dev/ annotation on the metadata)", true, patchDeployment(w, ns, "web", merge, touch)},
		{"a heal (the pod template's hash and the record)", true,
			patchDeployment(w, ns, "web", merge, `{"metadata":{"annotations":{"confighash.dev/sources":"configmap/cfg=0123456789abcdef"}},"spec":{"template":{"metadata":{"annotations":{"confighash.dev/hash":"v1:00"}}}}}`)},
		{"a heal of a CronJob's pod template", true, func(ctx context.Context, dryRun []string) error {
			_, err := w.BatchV1().CronJobs(ns).Patch(ctx, "nightly", merge, []byte(`{"spec":{"jobTemplate":{"spec":{"template":{"metadata":{"annotations":{"confighash.dev/hash":"v1:00"}}}}}}}`), metav1.PatchOptions{DryRun: dryRun})
			return err
		}},
		{"a pinned workload's sources renamed to their snapshots, with its pins, as the webhook does in a touch", true,
			patchDeployment(w, ns, "web", jsonPatch, `[{"op":"replace","path":"/spec/template/spec/volumes/0/secret/secretName","value":"db-0123456789abcdef"},`+
				`{"op":"replace","path":"`+envFrom+`/0/configMapRef/name","value":"cfg-0123456789abcdef"},`+
				`{"op":"replace","path":"`+envFrom+`/1/secretRef/name","value":"db-0123456789abcdef"},`+
				`{"op":"replace","path":"`+env+`/0/valueFrom/configMapKeyRef/name","value":"cfg-0123456789abcdef"},`+
				`{"op":"replace","path":"`+env+`/1/valueFrom/secretKeyRef/name","value":"db-0123456789abcdef"},`+
				`{"op":"replace","path":"/spec/template/spec/volumes/1/configMap/name","value":"cfg-0123456789abcdef"},`+
				`{"op":"replace","path":"`+sources+`/0/configMap/name","value":"cfg-0123456789abcdef"},`+
				`{"op":"replace","path":"`+sources+`/1/secret/name","value":"db-0123456789abcdef"},`+
				`{"op":"add","path":"/spec/template/metadata/annotations/confighash.dev~1pinned","value":"configmap/cfg=0123456789abcdef secret/db=0123456789abcdef"}]`)},
		{"a pinned source renamed to its next snapshot", true,
			patchDeployment(w, ns, "web", jsonPatch, `[{"op":"replace","path":"/spec/template/spec/volumes/0/secret/secretName","value":"db-fedcba9876543210"}]`)},
		{"a revision made an owner of a snapshot", true, patchConfigMap(w, ns, "cfg-0123456789abcdef", owner)},
		{"a snapshot none owns deleted", true, func(ctx context.Context, dryRun []string) error {
			return w.CoreV1().ConfigMaps(ns).Delete(ctx, "cfg-fedcba9876543210", metav1.DeleteOptions{DryRun: dryRun})
		}},

		{"the record of a Job's recreation", true, createSecretIn(ns, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: confighash.RecreationName("other"),
			Labels: map[string]string{confighash.LabelRecreationOf: "other"}}, Type: confighash.RecreationType, Immutable: ptr.To(true)})},
		{"the record of a Job's recreation deleted", true, func(ctx context.Context, dryRun []string) error {
			return w.CoreV1().Secrets(ns).Delete(ctx, record.Name, metav1.DeleteOptions{DryRun: dryRun})
		}},
		{"a Job confighash hashed deleted", true, deleteJobIn(ns, "hashed")},
		{"a Job made again in place of one", true, job("again", recreated, hashedTemplate)},
		{"a privileged Job made again where the namespace enforces privileged", true, jobIn(privileged, "again", recreated, privilegedPod)},
		{"a CronJob's Job started", true, job("nightly-0123456789", map[string]string{"cronjob.kubernetes.io/instantiate": "manual"}, hashedTemplate, byNightly)},
		{"an Event on a workload", true, event(ns)},
		{"an Event in its own namespace", true, event(home)},
		{"its hash key, created in its namespace", true, createSecretIn(home, hashKey(corev1.SecretTypeOpaque, true))},

		// Another namespace.
		{"a touch where confighash does not act", false, patchDeployment(w, off, "web", merge, touch)},
		{"a touch in its own namespace, labelled for injection", false, patchDeployment(w, home, "web", merge, touch)},
		{"a Job made again where confighash does not act", false, jobIn(off, "again", recreated, hashedTemplate)},
		{"a Job made again in kube-system", false, jobIn(metav1.NamespaceSystem, "again", recreated, hashedTemplate)},
		{"a Job made again in its own namespace", false, jobIn(home, "again", recreated, hashedTemplate)},
		{"a hashed Job deleted where confighash does not act", false, deleteJobIn(off, "hashed")},
		{"a snapshot deleted where confighash does not act", false, func(ctx context.Context, dryRun []string) error {
			return w.CoreV1().ConfigMaps(off).Delete(ctx, snapshotElsewhere.Name, metav1.DeleteOptions{DryRun: dryRun})
		}},
		{"a record made where confighash does not act", false, createSecretIn(off, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: confighash.RecreationName("hashed"),
			Labels: map[string]string{confighash.LabelRecreationOf: "hashed"}}, Type: confighash.RecreationType, Immutable: ptr.To(true)})},
		{"an Event where confighash does not act", false, event(off)},
		{"an Event in kube-system", false, event(metav1.NamespaceSystem)},

		// Another field.
		{"a Deployment's replicas set", false, patchDeployment(w, ns, "web", merge, `{"spec":{"replicas":5}}`)},
		{"a Deployment paused without the mark", false, patchDeployment(w, ns, "pausable", merge, `{"spec":{"paused":true}}`)},
		{"a Deployment paused with a mark that is no time", false,
			patchDeployment(w, ns, "pausable", merge, `{"metadata":{"annotations":{"`+confighash.ReloaderPausedAt+`":"soon"}},"spec":{"paused":true}}`)},
		{"the paused-at mark written without a pause", false,
			patchDeployment(w, ns, "pausable", merge, `{"metadata":{"annotations":{"`+confighash.ReloaderPausedAt+`":"2026-11-29T22:00:00Z"}}}`)},
		{"a pause with its replicas set", false,
			patchDeployment(w, ns, "pausable", merge, `{"metadata":{"annotations":{"`+confighash.ReloaderPausedAt+`":"2026-11-29T22:00:00Z"}},"spec":{"paused":true,"replicas":5}}`)},
		{"a Deployment paused for its pause period with a touch, the time in its paused-at mark", true,
			patchDeployment(w, ns, "pausable", merge, `{"metadata":{"annotations":{"confighash.dev/trigger":"ConfigMap/cfg@1","`+confighash.ReloaderPausedAt+`":"2026-11-29T22:00:00Z"}},"spec":{"paused":true}}`)},
		{"a Deployment its pause period paused, resumed but still marked", false, patchDeployment(w, ns, "held", merge, `{"spec":{"paused":false}}`)},
		{"a pause period's mark moved", false,
			patchDeployment(w, ns, "held", merge, `{"metadata":{"annotations":{"`+confighash.ReloaderPausedAt+`":"2030-01-01T00:00:00Z"}}}`)},
		{"a Deployment its owner paused, resumed", false,
			patchDeployment(w, ns, "stopped", merge, `{"metadata":{"annotations":{"`+confighash.ReloaderPausedAt+`":null}},"spec":{"paused":false}}`)},
		{"a Deployment its pause period paused, resumed and unmarked", true,
			patchDeployment(w, ns, "held", merge, `{"metadata":{"annotations":{"`+confighash.ReloaderPausedAt+`":null}},"spec":{"paused":false}}`)},
		{"an Argo Rollout's restartAt set without the mark", false, patchRollout(`{"spec":{"restartAt":"2026-11-29T22:00:00Z"}}`)},
		{"an Argo Rollout's restartAt set to no time", false,
			patchRollout(`{"metadata":{"annotations":{"` + confighash.AnnotationRestartedHash + `":"` + restartedHash + `"}},"spec":{"restartAt":"soon"}}`)},
		{"an Argo Rollout restarted, its replicas set", false,
			patchRollout(`{"metadata":{"annotations":{"` + confighash.AnnotationRestartedHash + `":"` + restartedHash + `"}},"spec":{"restartAt":"2026-11-29T22:00:00Z","replicas":5}}`)},
		{"an Argo Rollout's pods restarted (spec.restartAt), with the mark of their hash", true,
			patchRollout(`{"metadata":{"annotations":{"` + confighash.AnnotationRestartedHash + `":"` + restartedHash + `"}},"spec":{"restartAt":"2026-11-29T22:00:00Z"}}`)},
		{"an Argo Rollout's restartAt removed", false,
			patchRollout(`{"metadata":{"annotations":{"` + confighash.AnnotationRestartedHash + `":null}},"spec":{"restartAt":null}}`)},
		{"a pod template's image changed", false,
			patchDeployment(w, ns, "web", jsonPatch, `[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"example.com/evil:1"}]`)},
		{"an annotation of another domain on the metadata", false,
			patchDeployment(w, ns, "web", merge, `{"metadata":{"annotations":{"example.com/owner":"evil"}}}`)},
		{"a label on the pod template", false,
			patchDeployment(w, ns, "web", merge, `{"spec":{"template":{"metadata":{"labels":{"evil":"1"}}}}}`)},
		{"an annotation of another domain on the pod template", false,
			patchDeployment(w, ns, "web", merge, `{"spec":{"template":{"metadata":{"annotations":{"example.com/x":"1"}}}}}`)},
		{"a pinned source pointed at another object's snapshot", false,
			patchDeployment(w, ns, "web", jsonPatch, `[{"op":"replace","path":"/spec/template/spec/volumes/0/secret/secretName","value":"other-0123456789abcdef"}]`)},
		{"an environment variable's key changed", false,
			patchDeployment(w, ns, "web", jsonPatch, `[{"op":"replace","path":"`+env+`/0/valueFrom/configMapKeyRef/key","value":"other"}]`)},
		{"a projected volume pointed at another ConfigMap", false,
			patchDeployment(w, ns, "web", jsonPatch, `[{"op":"replace","path":"`+sources+`/0/configMap/name","value":"other"}]`)},
		{"a ConfigMap volume pointed at another ConfigMap", false,
			patchDeployment(w, ns, "web", jsonPatch, `[{"op":"replace","path":"/spec/template/spec/volumes/1/configMap/name","value":"other"}]`)},
		{"an environment variable added", false,
			patchDeployment(w, ns, "web", jsonPatch, `[{"op":"add","path":"`+env+`/-","value":{"name":"X","value":"1"}}]`)},
		{"an environment variable dropped", false, patchDeployment(w, ns, "web", jsonPatch, `[{"op":"remove","path":"`+env+`/1"}]`)},
		{"environment variables reordered", false, patchDeployment(w, ns, "web", jsonPatch, `[{"op":"replace","path":"`+env+`","value":[`+envP+`,`+envK+`]}]`)},
		{"an environment variable repeated in place of another", false,
			patchDeployment(w, ns, "web", jsonPatch, `[{"op":"replace","path":"`+env+`","value":[`+envK+`,`+envK+`]}]`)},
		{"envFrom reordered", false, patchDeployment(w, ns, "web", jsonPatch, `[{"op":"replace","path":"`+envFrom+`","value":[`+fromDB+`,`+fromCfg+`]}]`)},
		{"an envFrom source repeated in place of another", false,
			patchDeployment(w, ns, "web", jsonPatch, `[{"op":"replace","path":"`+envFrom+`","value":[`+fromCfg+`,`+fromCfg+`]}]`)},
		{"an envFrom source dropped", false, patchDeployment(w, ns, "web", jsonPatch, `[{"op":"remove","path":"`+envFrom+`/1"}]`)},
		{"a projected volume's sources reordered", false,
			patchDeployment(w, ns, "web", jsonPatch, `[{"op":"replace","path":"`+sources+`","value":[{"secret":{"name":"db"}},{"configMap":{"name":"cfg"}}]}]`)},
		{"a CronJob's schedule changed", false, func(ctx context.Context, dryRun []string) error {
			_, err := w.BatchV1().CronJobs(ns).Patch(ctx, "nightly", merge, []byte(`{"spec":{"schedule":"* * * * *"}}`), metav1.PatchOptions{DryRun: dryRun})
			return err
		}},
		{"a ConfigMap's data updated", false, patchConfigMap(w, ns, "cfg", `{"data":{"k":"evil"}}`)},
		{"owner references set on a ConfigMap that is not a snapshot", false, patchConfigMap(w, ns, "cfg", owner)},
		{"a snapshot's label changed", false, patchConfigMap(w, ns, "cfg-0123456789abcdef", `{"metadata":{"labels":{"confighash.dev/snapshot-of":"other"}}}`)},

		// Another object, or a Job beyond its level.
		{"a plain ConfigMap deleted", false, func(ctx context.Context, dryRun []string) error {
			return w.CoreV1().ConfigMaps(ns).Delete(ctx, "cfg", metav1.DeleteOptions{DryRun: dryRun})
		}},
		{"a plain Secret deleted", false, func(ctx context.Context, dryRun []string) error {
			return w.CoreV1().Secrets(ns).Delete(ctx, "db", metav1.DeleteOptions{DryRun: dryRun})
		}},
		{"a Job confighash did not hash deleted", false, deleteJobIn(ns, "plain")},
		{"a Job made that replaces none", false, job("miner", nil, hashedTemplate)},
		{"a Job made in place of one that is not a UID", false, job("again", map[string]string{confighash.AnnotationRecreatedFrom: "0000"}, hashedTemplate)},
		{"a Job made in place of one, without the hash", false, job("again", recreated, fixtures.EnvFromTemplate("cfg"))},
		{"a Job instantiated by hand that no CronJob owns", false, job("miner", map[string]string{"cronjob.kubernetes.io/instantiate": "manual"}, hashedTemplate)},
		{"a CronJob's Job under a name not of its hash", false, job("nightly-miner", map[string]string{"cronjob.kubernetes.io/instantiate": "manual"}, hashedTemplate, byNightly)},
		{"a privileged Job with the host's PID namespace and root filesystem", false, job("again", recreated, privilegedPod)},
		{"a privileged container", false, job("again", recreated, hashedWith(func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}))},
		{"a Job on the host's network", false, job("again", recreated, hashedWith(func(s *corev1.PodSpec) { s.HostNetwork = true }))},
		{"a Job mounting a host path", false, job("again", recreated, hashedWith(func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}))},
		{"a Job adding SYS_ADMIN", false, job("again", recreated, hashedWith(func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}
		}))},
		{"a CronJob's privileged Job", false, job("nightly-0123456789", map[string]string{"cronjob.kubernetes.io/instantiate": "manual"}, privilegedPod, byNightly)},

		// Another name or type.
		{"a record of a recreation under another name", false, createSecretIn(ns, otherRecord)},
		{"a Secret of another type under a record's name", false, createSecretIn(ns, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: confighash.RecreationName("x"),
			Labels: map[string]string{confighash.LabelRecreationOf: "x"}}, Immutable: ptr.To(true)})},
		{"a Secret other than its hash key created in its namespace", false, createSecretIn(home, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "stolen"}})},
		{"its hash key as a service account token", false, createSecretIn(home, func() *corev1.Secret {
			s := hashKey(corev1.SecretTypeServiceAccountToken, true)
			s.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
			return s
		}())},
		{"its hash key, mutable", false, createSecretIn(home, hashKey(corev1.SecretTypeOpaque, false))},
		{"its hash key's name, outside its namespace", false, createSecretIn(ns, hashKey(corev1.SecretTypeOpaque, true))},
	})
}

// TestWebhookServiceAccountMakesOnlyTheWebhooksWrites: with the install's RBAC and
// policies, in a namespace other than confighash, the webhook's ServiceAccount creates
// a snapshot of a ConfigMap and of a TLS Secret, its hash key and sets its webhook
// configuration's caBundle; it cannot create a bootstrap token or service account
// token Secret, an object under a name that is not a snapshot's or not its source's,
// its hash key elsewhere, or change its webhook configuration otherwise. Each refused
// write passed its RBAC before the policy.
func TestWebhookServiceAccountMakesOnlyTheWebhooksWrites(t *testing.T) {
	c := sharedCluster(t)
	ctx := t.Context()
	home := installElsewhere(t, c)
	ns, off := labeledNamespace(t, c), namespace(t, c, nil)
	// Its configuration, calling nothing: no namespace carries the label it selects.
	configs := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	_, err := configs.Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "confighash"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "hash.confighash.dev", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/mutate")},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"confighash-policies-test": "never"}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = configs.Delete(context.Background(), "confighash", metav1.DeleteOptions{}) })

	wh := impersonate(t, c, home, "confighash-webhook")
	configMap := func(in string, cm *corev1.ConfigMap) func(context.Context, []string) error {
		return func(ctx context.Context, dryRun []string) error {
			_, err := wh.CoreV1().ConfigMaps(in).Create(ctx, cm, metav1.CreateOptions{DryRun: dryRun})
			return err
		}
	}
	secret := func(in string, s *corev1.Secret) func(context.Context, []string) error {
		return func(ctx context.Context, dryRun []string) error {
			_, err := wh.CoreV1().Secrets(in).Create(ctx, s, metav1.CreateOptions{DryRun: dryRun})
			return err
		}
	}
	patchConfiguration := func(patch string) func(context.Context, []string) error {
		return func(ctx context.Context, dryRun []string) error {
			_, err := wh.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, "confighash", types.JSONPatchType, []byte(patch), metav1.PatchOptions{DryRun: dryRun})
			return err
		}
	}
	caBundle, err := certs.NewAuthority("new-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{"k": []byte("v")}
	tlsData := map[string][]byte{corev1.TLSCertKey: []byte("c"), corev1.TLSPrivateKeyKey: []byte("k")}
	bootstrap := map[string][]byte{"token-id": []byte("abcdef"), "token-secret": []byte("0123456789abcdef")}
	checkPolicyCases(t, []policyCase{
		{"the snapshot of a ConfigMap", true,
			configMap(ns, &corev1.ConfigMap{ObjectMeta: snapshotMeta("cfg-0123456789abcdef", "cfg"), Immutable: ptr.To(true), Data: map[string]string{"k": "v"}})},
		{"the snapshot of a TLS Secret", true,
			secret(ns, &corev1.Secret{ObjectMeta: snapshotMeta("tls-0123456789abcdef", "tls"), Immutable: ptr.To(true), Type: corev1.SecretTypeTLS, Data: tlsData})},
		{"the snapshot of a source whose name is longer than a label value", true,
			secret(ns, &corev1.Secret{ObjectMeta: snapshotMeta(strings.Repeat("a", 70)+"-0123456789abcdef", strings.Repeat("a", 70)), Immutable: ptr.To(true), Data: data})},
		{"its hash key, in its own namespace", true, secret(home, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "confighash-hash-key"}, Immutable: ptr.To(true), Data: data})},
		{"its self-signed certificate, in its own namespace", true,
			secret(home, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "confighash-webhook-tls"}, Type: corev1.SecretTypeTLS, Data: tlsData})},
		{"the caBundle of its webhook configuration", true,
			patchConfiguration(fmt.Sprintf(`[{"op":"add","path":"/webhooks/0/clientConfig/caBundle","value":%q}]`, base64.StdEncoding.EncodeToString(caBundle.CertPEM)))},

		{"an immutable, labelled bootstrap token Secret in kube-system", false,
			secret(metav1.NamespaceSystem, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-abcdef", Labels: map[string]string{confighash.LabelSnapshotOf: "x"}},
				Immutable: ptr.To(true), Type: corev1.SecretTypeBootstrapToken, Data: bootstrap})},
		{"a bootstrap token Secret with a snapshot's name, label and annotation", false,
			secret(ns, &corev1.Secret{ObjectMeta: snapshotMeta("tok-0123456789abcdef", "tok"), Immutable: ptr.To(true), Type: corev1.SecretTypeBootstrapToken, Data: bootstrap})},
		{"a service account token Secret as a snapshot", false,
			secret(ns, &corev1.Secret{ObjectMeta: func() metav1.ObjectMeta {
				m := snapshotMeta("sa-0123456789abcdef", "sa")
				m.Annotations[corev1.ServiceAccountNameKey] = "default"
				return m
			}(), Immutable: ptr.To(true), Type: corev1.SecretTypeServiceAccountToken})},
		{"a snapshot whose name is not of the snapshot form", false,
			configMap(ns, &corev1.ConfigMap{ObjectMeta: snapshotMeta("cfg", "cfg"), Immutable: ptr.To(true), Data: map[string]string{"k": "v"}})},
		{"a snapshot named for another source than it says", false,
			configMap(ns, &corev1.ConfigMap{ObjectMeta: snapshotMeta("app-0123456789abcdef", "cfg"), Immutable: ptr.To(true), Data: map[string]string{"k": "v"}})},
		{"a snapshot labelled for another source than it says", false,
			configMap(ns, &corev1.ConfigMap{ObjectMeta: func() metav1.ObjectMeta {
				m := snapshotMeta("cfg-1111111111111111", "cfg")
				m.Labels[confighash.LabelSnapshotOf] = "app"
				return m
			}(), Immutable: ptr.To(true)})},
		{"its hash key's name, outside its namespace", false, secret(ns, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "confighash-hash-key"}, Immutable: ptr.To(true), Data: data})},
		{"its hash key as a service account token", false, secret(home, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "confighash-hash-key",
			Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}}, Immutable: ptr.To(true), Type: corev1.SecretTypeServiceAccountToken})},
		{"its hash key, mutable", false, secret(home, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "confighash-hash-key"}, Data: data})},
		{"its certificate as an Opaque Secret", false, secret(home, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "confighash-webhook-tls"}, Data: tlsData})},
		{"a snapshot where confighash does not act", false,
			configMap(off, &corev1.ConfigMap{ObjectMeta: snapshotMeta("cfg-0123456789abcdef", "cfg"), Immutable: ptr.To(true), Data: map[string]string{"k": "v"}})},
		{"a snapshot in kube-system", false,
			configMap(metav1.NamespaceSystem, &corev1.ConfigMap{ObjectMeta: snapshotMeta("cfg-0123456789abcdef", "cfg"), Immutable: ptr.To(true), Data: map[string]string{"k": "v"}})},
		{"a snapshot in its own namespace", false,
			configMap(home, &corev1.ConfigMap{ObjectMeta: snapshotMeta("cfg-0123456789abcdef", "cfg"), Immutable: ptr.To(true), Data: map[string]string{"k": "v"}})},
		{"its webhook configuration's failure policy", false,
			patchConfiguration(`[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Fail"}]`)},
		{"its webhook configuration's URL", false,
			patchConfiguration(`[{"op":"replace","path":"/webhooks/0/clientConfig/url","value":"https://evil.example.com/"}]`)},
	})
}

// TestWebhookWithAClientCAAnswersOnlyTheAPIServer: given the CA of the client
// certificate the API server presents (AdmissionConfiguration), the webhook still
// hashes what the API server sends it, and a forged pinned review POSTed without that
// certificate, or with one of another CA, is refused during the handshake and makes no
// snapshot; the same review with the API server's certificate makes one.
func TestWebhookWithAClientCAAnswersOnlyTheAPIServer(t *testing.T) {
	c := sharedCluster(t)
	ca := c.WebhookClientCA()
	if ca == "" {
		t.Skip("the control plane was started without a client certificate for webhooks; start it again")
	}
	wh := startWebhook(t, c, "--client-ca-file="+ca, "--client-allowed-names=kube-apiserver-webhook-client")
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	createSecret(t, c, ns, "db", map[string]string{"password": "0"})
	createDeployment(t, c, ns, fixtures.Deployment("web", 1, fixtures.EnvFromTemplate("cfg")))
	if templateHash(t, c, ns, "web") == "" {
		t.Fatal("no hash: the API server's admission did not reach the webhook")
	}

	forged := fixtures.Deployment("forged", 1, fixtures.SecretVolumeTemplate("db"))
	forged.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	forged.Namespace = ns
	forged.Annotations[confighash.AnnotationPin] = "true"
	review := createReview(t, forged)
	post := func(cert *tls.Certificate) error {
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(wh.ca.CertPEM)
		tlsConfig := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if cert != nil {
			tlsConfig.Certificates = []tls.Certificate{*cert}
		}
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
		resp, err := client.Post("https://"+wh.addr+"/mutate", "application/json", bytes.NewReader(review))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	}
	snapshots := func() int {
		l, err := c.Client.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{LabelSelector: confighash.LabelSnapshotOf})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}

	other, err := certs.NewAuthority("another-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherClient, err := other.Issue(certs.Leaf{CommonName: "kube-apiserver-webhook-client", Client: true, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	otherCert, err := tls.X509KeyPair(otherClient.CertPEM, otherClient.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	for what, cert := range map[string]*tls.Certificate{"no client certificate": nil, "another CA's certificate": &otherCert} {
		if err := post(cert); err == nil {
			t.Errorf("a review with %s was answered", what)
		}
	}
	if n := snapshots(); n != 0 {
		t.Fatalf("forged reviews without the API server's certificate made %d snapshots", n)
	}

	kubeconfig, err := clientcmd.LoadFromFile(filepath.Join(c.Dir, "webhook-client.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	apiServer, err := tls.X509KeyPair(kubeconfig.AuthInfos["*"].ClientCertificateData, kubeconfig.AuthInfos["*"].ClientKeyData)
	if err != nil {
		t.Fatal(err)
	}
	if err := post(&apiServer); err != nil {
		t.Fatalf("the review with the API server's certificate: %v", err)
	}
	if n := snapshots(); n != 1 {
		t.Fatalf("the review with the API server's certificate made %d snapshots, want 1: the forged review could not have made one", n)
	}
}

// The messages of the policy that holds the watcher's writes of pods.
const (
	podsOnlyPatched     = "the confighash watcher only patches pods, never creates, deletes or evicts one, nor writes a subresource"
	podsInPlaceOnly     = "the confighash watcher patches only the pods restarted in place, labelled confighash.dev/restart=in-place or reload"
	podsTokenOnly       = "the confighash watcher changes only a pod's confighash.dev/restart-token and confighash.dev/restart-nudge annotations, and never removes them"
	podsTokenForm       = "the confighash watcher writes a restart token of the form v1:<64 hex digits> <restarts so far>"
	podsNudgeCopy       = "the confighash watcher writes a pod's confighash.dev/restart-nudge only as a copy of its restart token"
	writesWhereItActs   = "confighash writes only in the namespaces it acts in"
	restartTokenPattern = "v1:%064x 0"
)

// saying wants a write refused with message: a refusal that says something else, or
// any other error, comes back as a plain error, which is no policy's refusal.
func saying(message string, write func(context.Context, []string) error) func(context.Context, []string) error {
	return func(ctx context.Context, dryRun []string) error {
		err := write(ctx, dryRun)
		if err != nil && !strings.Contains(err.Error(), message) {
			return fmt.Errorf("refused without saying %q: %v", message, err)
		}
		return err
	}
}

// TestWatcherServiceAccountRestartsOnlyPodsInPlace: with the install's RBAC and
// policies, in a namespace other than confighash, the watcher's ServiceAccount writes
// the restart token of a pod labelled confighash.dev/restart=in-place, changed or
// added, as the watcher does (a merge patch naming the pod's uid and resourceVersion),
// and its restart-nudge, a copy of its token. Every variation is refused by a policy,
// with its message: a nudge that is not the token, another annotation, a
// label, the spec, the token removed or of another form, a pod without the label, a
// pod where confighash does not act or in its own namespace; and, once a grant beyond
// the install's lets RBAC through, a pod deleted, created or evicted, and a write of
// its status or ephemeral containers. Without that grant RBAC refuses those first.
func TestWatcherServiceAccountRestartsOnlyPodsInPlace(t *testing.T) {
	c := sharedCluster(t)
	ctx := t.Context()
	home := installElsewhere(t, c)
	ns, off := labeledNamespace(t, c), namespace(t, c, nil)
	inPlace := map[string]string{confighash.LabelRestart: confighash.RestartInPlace.String()}
	token := map[string]string{confighash.AnnotationRestartToken: fmt.Sprintf(restartTokenPattern, 1), "example.com/owner": "team-a"}
	pod := func(in, name string, labels, annotations map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}}}
		if in == "" {
			return p
		}
		created, err := c.Client.CoreV1().Pods(in).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	pod(ns, "web", inPlace, token)
	pod(ns, "fresh", inPlace, nil)
	pod(ns, "missed", inPlace, token)
	pod(ns, "nudged", inPlace, map[string]string{confighash.AnnotationRestartToken: token[confighash.AnnotationRestartToken], confighash.AnnotationRestartNudge: token[confighash.AnnotationRestartToken]})
	pod(ns, "plain", nil, token)
	pod(ns, "reloads", map[string]string{confighash.LabelRestart: confighash.RestartReload.String()}, token)
	pod(ns, "mislabelled", map[string]string{confighash.LabelRestart: "rollout"}, token)
	pod(off, "web", inPlace, token)
	pod(home, "web", inPlace, token)

	w := impersonate(t, c, home, "confighash-watcher")
	merge := types.MergePatchType
	patch := func(in, name, body string, subresources ...string) func(context.Context, []string) error {
		return func(ctx context.Context, dryRun []string) error {
			_, err := w.CoreV1().Pods(in).Patch(ctx, name, merge, []byte(body), metav1.PatchOptions{DryRun: dryRun, FieldManager: "confighash-watcher"}, subresources...)
			return err
		}
	}
	setToken := func(value string) string {
		return fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, confighash.AnnotationRestartToken, value)
	}
	setNudge := func(value string) string {
		return fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, confighash.AnnotationRestartNudge, value)
	}
	next := fmt.Sprintf(restartTokenPattern, 2)
	// restart writes the token as the watcher does: on the pod it read, named by its uid
	// and resourceVersion (kwok may write its status in between: read it again).
	restart := func(in, name, value string) func(context.Context, []string) error {
		return func(ctx context.Context, dryRun []string) error {
			for {
				p, err := c.Client.CoreV1().Pods(in).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				body := fmt.Sprintf(`{"metadata":{"uid":%q,"resourceVersion":%q,"annotations":{%q:%q}}}`, p.UID, p.ResourceVersion, confighash.AnnotationRestartToken, value)
				err = patch(in, name, body)(ctx, dryRun)
				if !apierrors.IsConflict(err) {
					return err
				}
			}
		}
	}
	create := func(ctx context.Context, dryRun []string) error {
		_, err := w.CoreV1().Pods(ns).Create(ctx, pod("", "miner", inPlace, token), metav1.CreateOptions{DryRun: dryRun})
		return err
	}
	deletePod := func(ctx context.Context, dryRun []string) error {
		return w.CoreV1().Pods(ns).Delete(ctx, "web", metav1.DeleteOptions{DryRun: dryRun})
	}
	evict := func(ctx context.Context, dryRun []string) error {
		return w.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, DeleteOptions: &metav1.DeleteOptions{DryRun: dryRun}})
	}
	status := patch(ns, "web", `{"status":{"phase":"Failed"}}`, "status")
	debug := patch(ns, "web", `{"spec":{"ephemeralContainers":[{"name":"debug","image":"example.com/shell:1","targetContainerName":"app"}]}}`, "ephemeralcontainers")
	beyondRBAC := map[string]func(context.Context, []string) error{
		"a pod created": create, "a pod deleted": deletePod, "a pod evicted": evict,
		"a pod's status written": status, "an ephemeral container added": debug,
	}
	for what, write := range beyondRBAC {
		if err := write(ctx, []string{metav1.DryRunAll}); !forbiddenByRBAC(err) {
			t.Errorf("%s with the install's RBAC: got %v, want a refusal by RBAC", what, err)
		}
	}

	// A grant beyond the install's, as a cluster admin might add: the policy still holds.
	grant := fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: %[1]s-pods-beyond}
rules:
- {apiGroups: [""], resources: [pods], verbs: [create, delete]}
- {apiGroups: [""], resources: [pods/eviction], verbs: [create]}
- {apiGroups: [""], resources: [pods/status, pods/ephemeralcontainers], verbs: [patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: %[1]s-pods-beyond}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[1]s-pods-beyond}
subjects:
- {kind: ServiceAccount, name: confighash-watcher, namespace: %[1]s}
`, home)
	applyForTest(t, c, []byte(grant))

	checkPolicyCases(t, []policyCase{
		{"a restart: the token of a pod restarted in place, changed", true, restart(ns, "web", next)},
		{"a pod's first token, added", true, restart(ns, "fresh", next)},
		{"the token of a pod that reloads its files", true, restart(ns, "reloads", next)},
		{"a nudge: a pod's token copied into its restart-nudge", true, patch(ns, "missed", setNudge(token[confighash.AnnotationRestartToken]))},

		// Another field of the pod.
		{"another annotation", false, saying(podsTokenOnly, patch(ns, "web", `{"metadata":{"annotations":{"example.com/owner":"evil"}}}`))},
		{"another annotation beside the token", false,
			saying(podsTokenOnly, patch(ns, "web", fmt.Sprintf(`{"metadata":{"annotations":{"example.com/x":"1",%q:%q}}}`, confighash.AnnotationRestartToken, next)))},
		{"the token removed", false, saying(podsTokenOnly, patch(ns, "web", fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, confighash.AnnotationRestartToken)))},
		{"a label added", false, saying(podsTokenOnly, patch(ns, "web", `{"metadata":{"labels":{"evil":"1"}}}`))},
		{"the in-place label removed", false, saying(podsTokenOnly, patch(ns, "web", `{"metadata":{"labels":{"confighash.dev/restart":null}}}`))},
		{"owner references set", false, saying(podsTokenOnly, patch(ns, "web", `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"x","uid":"0f0e0d0c-0b0a-0908-0706-050403020100"}]}}`))},
		{"the spec's activeDeadlineSeconds set", false, saying(podsTokenOnly, patch(ns, "web", `{"spec":{"activeDeadlineSeconds":1}}`))},
		{"a container's image changed", false, saying(podsTokenOnly, func(ctx context.Context, dryRun []string) error {
			_, err := w.CoreV1().Pods(ns).Patch(ctx, "web", types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/containers/0/image","value":"example.com/evil:1"}]`), metav1.PatchOptions{DryRun: dryRun})
			return err
		})},
		{"a token of another form", false, saying(podsTokenForm, patch(ns, "web", setToken("v1:"+strings.Repeat("x", 64))))},
		{"a token too long", false, saying(podsTokenForm, patch(ns, "web", setToken(next+strings.Repeat("0", 4096))))},
		{"a nudge that is not the pod's token", false, saying(podsNudgeCopy, patch(ns, "missed", setNudge(next)))},
		{"a nudge of anything else", false, saying(podsNudgeCopy, patch(ns, "missed", setNudge(strings.Repeat("x", 4096))))},
		{"a nudge beside a new token it does not copy", false,
			saying(podsNudgeCopy, patch(ns, "missed", fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`, confighash.AnnotationRestartToken, next, confighash.AnnotationRestartNudge, fmt.Sprintf(restartTokenPattern, 3))))},
		{"the nudge removed", false, saying(podsTokenOnly, patch(ns, "nudged", fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, confighash.AnnotationRestartNudge)))},
		{"the nudge of a pod without the in-place label", false, saying(podsInPlaceOnly, patch(ns, "plain", setNudge(token[confighash.AnnotationRestartToken])))},

		// Another pod.
		{"the token of a pod without the in-place label", false, saying(podsInPlaceOnly, restart(ns, "plain", next))},
		{"the token of a pod whose label says neither in-place nor reload", false, saying(podsInPlaceOnly, restart(ns, "mislabelled", next))},
		{"the token of a pod where confighash does not act", false, saying(writesWhereItActs, restart(off, "web", next))},
		{"the token of a pod in its own namespace", false, saying(writesWhereItActs, restart(home, "web", next))},

		// Another operation or subresource, once RBAC allows it.
		{"a pod created", false, saying(podsOnlyPatched, create)},
		{"a pod deleted", false, saying(podsOnlyPatched, deletePod)},
		{"a pod evicted", false, saying(podsOnlyPatched, evict)},
		{"a pod's status written", false, saying(podsOnlyPatched, status)},
		{"an ephemeral container added", false, saying(podsOnlyPatched, debug)},
	})
	if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "missed", metav1.GetOptions{}); err != nil || p.Annotations[confighash.AnnotationRestartNudge] != token[confighash.AnnotationRestartToken] {
		t.Errorf("the nudged pod: %v, want its restart-nudge its token", err)
	}
	for name, want := range map[string]string{"web": next, "fresh": next} {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Annotations[confighash.AnnotationRestartToken]; got != want {
			t.Errorf("pod %s has token %q, want %q", name, got, want)
		}
		if name == "web" && p.Annotations["example.com/owner"] != token["example.com/owner"] {
			t.Errorf("pod %s's other annotations changed: %v", name, p.Annotations)
		}
	}
}
