package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
	"github.com/confighash/confighash/watches"
)

// maxAdmissionAlloc is the memory one admission may allocate at the limits below.
const maxAdmissionAlloc = 64 << 20

// admitAtTheLimit posts the workload to a handler reading objs live, and returns the
// response, how long it took and how much it allocated.
func admitAtTheLimit(t *testing.T, annotations map[string]string, tmpl corev1.PodSpec, objs ...kruntime.Object) (*responseSummary, time.Duration, uint64) {
	t.Helper()
	client := fake.NewClientset(objs...)
	h, _ := newTestHandler(t, NewLiveReader(client, watches.Door{}, sourcecache.Filter{}, nil, nil))
	if tmpl.Containers == nil {
		tmpl.Containers = []corev1.Container{{Name: "app", Image: "app:1"}}
	}
	d := map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "ns", "annotations": annotations},
		"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]string{"app": "web"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]string{"app": "web"}}, "spec": tmpl}},
	}
	raw, _ := json.Marshal(d)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	resp := decodeResponse(t, post(h, "application/json", review(string(raw))))
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	s := &responseSummary{warnings: strings.Join(resp.Warnings, "\n")}
	for _, op := range jsonPatch(t, resp) {
		if v, ok := op["value"].(map[string]any); ok && op["path"] == "/spec/template/metadata/annotations" {
			s.hash, _ = v[confighash.AnnotationHash].(string)
		}
	}
	return s, took, after.TotalAlloc - before.TotalAlloc
}

type responseSummary struct{ warnings, hash string }

func secret(name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: data}
}

func secretVolumes(names ...string) corev1.PodSpec {
	spec := corev1.PodSpec{}
	for i, n := range names {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: fmt.Sprintf("v%d", i), VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: n}}})
	}
	return spec
}

// TestAdmissionAtTheLimits: hostile and large inputs each answer within the budget,
// allocate under maxAdmissionAlloc, and either hash or say why not; never a partial
// hash. The first case is the reproduction: 5,000 names took 11.5 s and 260 MiB.
func TestAdmissionAtTheLimits(t *testing.T) {
	manyNames := make([]string, 5000)
	for i := range manyNames {
		manyNames[i] = fmt.Sprintf("secret-%d", i)
	}
	longNames := make([]string, 0, 1100)
	for i := 0; len(strings.Join(longNames, ",")) < 256<<10; i++ {
		longNames = append(longNames, fmt.Sprintf("%0240d", i))
	}
	bigConfigMap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "ns"}, Data: map[string]string{}}
	for i := range 10000 {
		bigConfigMap.Data[fmt.Sprintf("key-%d", i)] = "v"
	}
	// One key more than digests are kept of: 50,000 fit in 1 MiB.
	tooManyKeys := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "huge", Namespace: "ns"}, Data: map[string]string{}}
	for i := range confighash.MaxSourceKeys + 1 {
		tooManyKeys.Data[fmt.Sprintf("key-%d", i)] = "v"
	}
	var twoHundred []kruntime.Object
	var twoHundredNames []string
	for i := range 200 {
		name := fmt.Sprintf("s-%d", i)
		twoHundred = append(twoHundred, secret(name, map[string][]byte{"k": []byte("v")}))
		twoHundredNames = append(twoHundredNames, name)
	}
	maxName := strings.Repeat("a", 253)
	inject := map[string]string{confighash.AnnotationInject: "true"}
	tests := []struct {
		name        string
		annotations map[string]string
		spec        corev1.PodSpec
		objs        []kruntime.Object
		hashed      bool
		warning     string
	}{
		{"5,000 included names", map[string]string{confighash.AnnotationIncludeSecrets: strings.Join(manyNames, ",")}, corev1.PodSpec{}, nil, false, "not hashed: too many sources: annotation confighash.dev/include-secrets: the list has more than the 256 entries allowed"},
		{"an annotation of 256 KiB", map[string]string{confighash.AnnotationIncludeSecrets: strings.Join(longNames, ",")}, corev1.PodSpec{}, nil, false, "longer than the 65536 bytes allowed; the workload is left as it is"},
		{"a ConfigMap of 10,000 keys", inject, corev1.PodSpec{Volumes: []corev1.Volume{{Name: "b", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "big"}}}}}},
			[]kruntime.Object{bigConfigMap}, true, ""},
		{"a ConfigMap of 10,001 keys", inject, corev1.PodSpec{Volumes: []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "huge"}}}}}},
			[]kruntime.Object{tooManyKeys}, false, "not hashed: source too large: ConfigMap/huge has more than the 10000 keys whose digests confighash keeps"},
		{"a 1 MiB Secret", inject, secretVolumes("large"), []kruntime.Object{secret("large", map[string][]byte{"blob": make([]byte, 1<<20)})}, true, ""},
		{"200 sources", inject, secretVolumes(twoHundredNames...), twoHundred, true, ""},
		{"names of the maximum length", inject, secretVolumes(maxName), []kruntime.Object{secret(maxName, map[string][]byte{"k": []byte("v")})}, true, ""},
		{"binary data", inject, secretVolumes("bin"), []kruntime.Object{secret("bin", map[string][]byte{"b": {0, 0xff, 0xfe, 0}})}, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, took, alloc := admitAtTheLimit(t, tt.annotations, tt.spec, tt.objs...)
			if took > Budget {
				t.Errorf("took %v, over the %v budget", took, Budget)
			}
			if alloc > maxAdmissionAlloc {
				t.Errorf("allocated %d MiB, over %d MiB", alloc>>20, maxAdmissionAlloc>>20)
			}
			if (got.hash != "") != tt.hashed || !strings.Contains(got.warnings, tt.warning) {
				t.Fatalf("hash %q, warnings %q; want hashed %v with a warning containing %q", got.hash, got.warnings, tt.hashed, tt.warning)
			}
			t.Logf("%v, %d KiB allocated", took.Round(time.Millisecond), alloc>>10)
		})
	}
}

// TestKeysThatDifferOnlyInCaseCountApart: a change to "Key" rolls, and so does a
// change to "key"; each gives its own hash.
func TestKeysThatDifferOnlyInCaseCountApart(t *testing.T) {
	hash := func(upper, lower string) string {
		got, _, _ := admitAtTheLimit(t, map[string]string{confighash.AnnotationInject: "true"}, secretVolumes("s"),
			secret("s", map[string][]byte{"Key": []byte(upper), "key": []byte(lower)}))
		return got.hash
	}
	base, upper, lower := hash("1", "1"), hash("2", "1"), hash("1", "2")
	if base == "" || base == upper || base == lower || upper == lower {
		t.Fatalf("hashes %q, %q, %q: want three different ones", base, upper, lower)
	}
}

// blockingReader answers only when the admission gives up: a slow API server.
type blockingReader struct{ stubReader }

func (blockingReader) Read(ctx context.Context, _ string, _ []confighash.SourceRef, _ []confighash.Trigger) (map[confighash.SourceRef]confighash.Source, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestFaultSlowReadsGetAnAnswerWithinTheBudget: the webhook answers "allowed,
// unchanged" with a warning before the API server's timeout, rather than never.
func TestFaultSlowReadsGetAnAnswerWithinTheBudget(t *testing.T) {
	h, rec := newTestHandler(t, blockingReader{})
	start := time.Now()
	resp := decodeResponse(t, post(h, "application/json", review(strings.Replace(deploymentJSON, "%s", `"`+confighash.AnnotationInject+`":"true"`, 1))))
	took := time.Since(start)
	if took < Budget || took > Timeout-500*time.Millisecond {
		t.Fatalf("answered after %v; want after the %v budget, well before the %v timeout", took, Budget, Timeout)
	}
	if len(jsonPatch(t, resp)) != 0 || !strings.Contains(strings.Join(resp.Warnings, "\n"), "could not be read within 4s") {
		t.Fatalf("patch %v, warnings %q; want none and the budget named", jsonPatch(t, resp), resp.Warnings)
	}
	if n := testutil.ToFloat64(rec.mutations.WithLabelValues("Deployment", string(ResultError))); n != 1 {
		t.Fatalf("mutations_total{error} = %v, want 1", n)
	}
}
