package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	kwhmodel "github.com/slok/kubewebhook/v2/pkg/model"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
	"github.com/confighash/confighash/watches"
	"github.com/confighash/confighash/webhook"
)

var testKey = bytes.Repeat([]byte("k"), 32)

func explainSources() (*corev1.ConfigMap, *corev1.Secret) {
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "shop"}, Data: map[string]string{"a": "1", "b": "2"}}
	sec := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"}, Data: map[string][]byte{"password": []byte("s3cret"), "user": []byte("app")}}
	return cm, sec
}

func explainDeployment(spec corev1.PodSpec, annotations map[string]string) *appsv1.Deployment {
	if annotations == nil {
		annotations = map[string]string{confighash.AnnotationInject: "true"}
	}
	spec.Containers = append(spec.Containers, corev1.Container{Name: "app", Image: "app:1"})
	return &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Annotations: annotations},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}, Spec: spec}}}
}

// webhookHash is the hash the webhook writes at the creation of d, reading cm and sec.
func webhookHash(t *testing.T, d *appsv1.Deployment, cm *corev1.ConfigMap, sec *corev1.Secret) string {
	t.Helper()
	key, _ := confighash.NewKey(testKey)
	client := fake.NewClientset(cm, sec)
	m, err := webhook.New(webhook.Config{Key: key, Vocabulary: confighash.Vocabulary{Reloader: true},
		Reader: webhook.NewLiveReader(client, watches.Door{}, sourcecache.Filter{}, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(d)
	resp, err := m.Review(t.Context(), kwhmodel.AdmissionReview{ID: "1", Namespace: "shop", Operation: kwhmodel.OperationCreate, NewObjectRaw: raw})
	if err != nil {
		t.Fatal(err)
	}
	var ops []struct {
		Path  string
		Value any
	}
	if err := json.Unmarshal(resp.(*kwhmodel.MutatingAdmissionResponse).JSONPatchPatch, &ops); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if v, ok := op.Value.(map[string]any); ok && op.Path == "/spec/template/metadata/annotations" {
			return v[confighash.AnnotationHash].(string)
		}
		if strings.HasSuffix(op.Path, "confighash.dev~1hash") {
			return op.Value.(string)
		}
	}
	t.Fatalf("the webhook wrote no hash: %s", resp.(*kwhmodel.MutatingAdmissionResponse).JSONPatchPatch)
	return ""
}

func writeYAML(t *testing.T, name string, objs ...any) string {
	t.Helper()
	var docs []string
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func explainJSON(t *testing.T, args ...string) ([]confighash.Explanation, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), append([]string{"explain", "-o", "json"}, args...), &stdout, &stderr)
	var out []confighash.Explanation
	if stdout.Len() > 0 {
		if jerr := json.Unmarshal(stdout.Bytes(), &out); jerr != nil {
			t.Fatalf("not JSON: %v\n%s", jerr, stdout.String())
		}
	}
	return out, err
}

// TestOfflineHashIsTheWebhooks: for every way a pod template can use a source, the
// hash explain computes from manifests and the key is the one the webhook writes.
func TestOfflineHashIsTheWebhooks(t *testing.T) {
	lor := func(n string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: n} }
	withEnv := func(env ...corev1.EnvVar) corev1.PodSpec {
		return corev1.PodSpec{InitContainers: []corev1.Container{{Name: "init", Image: "init:1", Env: env}}}
	}
	tests := []struct {
		name        string
		spec        corev1.PodSpec
		annotations map[string]string
	}{
		{"a ConfigMap key in an env var of an init container", withEnv(corev1.EnvVar{Name: "A", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: lor("cfg"), Key: "a"}}}), nil},
		{"a Secret key in an env var", withEnv(corev1.EnvVar{Name: "P", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: lor("db"), Key: "password"}}}), nil},
		{"envFrom of both kinds", corev1.PodSpec{InitContainers: []corev1.Container{{Name: "init", Image: "i", EnvFrom: []corev1.EnvFromSource{
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: lor("cfg")}}, {SecretRef: &corev1.SecretEnvSource{LocalObjectReference: lor("db")}}}}}}, nil},
		{"volumes, whole and with items", corev1.PodSpec{Volumes: []corev1.Volume{
			{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: lor("cfg"), Items: []corev1.KeyToPath{{Key: "b", Path: "b"}}}}},
			{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db"}}}}}, nil},
		{"projected volumes", corev1.PodSpec{Volumes: []corev1.Volume{{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: lor("cfg")}}, {Secret: &corev1.SecretProjection{LocalObjectReference: lor("db"), Items: []corev1.KeyToPath{{Key: "user", Path: "u"}}}}}}}}}}, nil},
		{"an optional source that does not exist", corev1.PodSpec{Volumes: []corev1.Volume{{Name: "m", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: lor("missing"), Optional: ptr.To(true)}}}}}, nil},
		{"Reloader's named list of an unused Secret", corev1.PodSpec{}, map[string]string{confighash.ReloaderSecretReload: "d[a-z]"}},
	}
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, testKey, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cm, sec := explainSources()
			d := explainDeployment(tt.spec, tt.annotations)
			want := webhookHash(t, d, cm, sec)
			got, err := explainJSON(t, "--file", writeYAML(t, "deploy.yaml", d), "--with", writeYAML(t, "sources.yaml", cm, sec), "--hash-key-file", keyFile)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].Hash != want || !got[0].OptedIn {
				t.Fatalf("explain = %+v, want the webhook's hash %s", got, want)
			}
		})
	}
}

// TestOfflineTellsWhichWorkloadsAChangeRolls: given the sources before and after, the
// workloads that use a changed key would roll, the others not.
func TestOfflineTellsWhichWorkloadsAChangeRolls(t *testing.T) {
	cm, sec := explainSources()
	usesA := explainDeployment(corev1.PodSpec{Volumes: []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Items: []corev1.KeyToPath{{Key: "a", Path: "a"}}}}}}}, nil)
	usesA.Name = "uses-a"
	usesB := usesA.DeepCopy()
	usesB.Name = "uses-b"
	usesB.Spec.Template.Spec.Volumes[0].ConfigMap.Items[0].Key = "b"
	manifests := writeYAML(t, "chart.yaml", usesA, usesB)
	old := writeYAML(t, "old.yaml", cm, sec)
	cm.Data["a"] = "changed"
	changed := writeYAML(t, "new.yaml", cm, sec)

	got, err := explainJSON(t, "--file", manifests, "--with-old", old, "--with", changed, "--fail-on-rollout")
	var exit *exitError
	if !errors.As(err, &exit) || exit.code != 1 {
		t.Fatalf("error = %v, want exit status 1: a workload rolls", err)
	}
	verdicts := map[string]string{}
	for _, e := range got {
		verdicts[e.Name] = e.Verdict
	}
	if verdicts["uses-a"] != confighash.VerdictRollout || verdicts["uses-b"] != confighash.VerdictUpToDate {
		t.Fatalf("verdicts = %v; want uses-a to roll, uses-b not", verdicts)
	}
	if _, err := explainJSON(t, "--file", manifests, "--with-old", old, "--with", old, "--fail-on-rollout"); err != nil {
		t.Fatalf("no change: error %v, want none", err)
	}
}

// TestOfflineReadsTheNamespaceWithTheSelectors: a Namespace among the manifests is read
// as the components read it: labelled all, it opts a workload without annotations in;
// with the selectors of an install that changed them, the injection label alone does
// not.
func TestOfflineReadsTheNamespaceWithTheSelectors(t *testing.T) {
	cm, sec := explainSources()
	plain := explainDeployment(corev1.PodSpec{Volumes: []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}, map[string]string{})
	all := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{confighash.InjectionLabel: confighash.InjectionEvery}}}
	files := []string{"--file", writeYAML(t, "app.yaml", all, plain), "--with", writeYAML(t, "sources.yaml", cm, sec)}
	got, err := explainJSON(t, files...)
	if err != nil || len(got) != 1 || !got[0].OptedIn || !strings.Contains(got[0].OptIn, "every workload") {
		t.Fatalf("in a namespace labelled all: %+v, %v; want it opted in by its namespace", got, err)
	}
	got, err = explainJSON(t, append(files, "--every-workload-namespace-selector", "team=all")...)
	if err != nil || len(got) != 1 || got[0].OptedIn {
		t.Fatalf("with another selector: %+v, %v; want it not opted in", got, err)
	}
}

func TestExplainBadInputIsOneLineAndStatus2(t *testing.T) {
	dir := t.TempDir()
	invalid := filepath.Join(dir, "invalid.yaml")
	_ = os.WriteFile(invalid, []byte("kind: Deployment\n  metadata: [\n"), 0o600)
	onlySources := filepath.Join(dir, "cm.yaml")
	_ = os.WriteFile(onlySources, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"), 0o600)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"an unreadable file", []string{"--file", filepath.Join(dir, "nope.yaml")}, "read " + filepath.Join(dir, "nope.yaml") + ": no such file or directory"},
		{"invalid YAML", []string{"--file", invalid}, "document 1 is not valid YAML or JSON"},
		{"no workload in the files", []string{"--file", onlySources}, "no workload"},
		{"an unknown kind", []string{"job/x", "-n", "shop", "--kubeconfig", invalid}, "kubeconfig"},
		{"a bad output", []string{"-o", "yaml", "--file", onlySources}, `-o "yaml": want table or json`},
		{"an unknown flag", []string{"--frobnicate"}, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), append([]string{"explain"}, tt.args...), &stdout, &stderr)
			var exit *exitError
			if !errors.As(err, &exit) || exit.code != 2 || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error = %v, want one line with %q and exit status 2", err, tt.want)
			}
		})
	}
}
