package webhook

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/confighash/confighash"
)

// stubReader answers from a fixed set of sources: the HTTP guard and the patch shape
// need no API server.
type stubReader struct {
	sources map[confighash.SourceRef]confighash.Source
	err     error
	panics  bool
}

func (s stubReader) Read(_ context.Context, _ string, refs []confighash.SourceRef, _ []confighash.Trigger) (map[confighash.SourceRef]confighash.Source, error) {
	if s.panics {
		panic("boom")
	}
	return s.sources, s.err
}

func (s stubReader) Names(_ context.Context, _ string, kind confighash.SourceKind) ([]string, error) {
	var names []string
	for ref, src := range s.sources {
		if ref.Kind == kind && src.Present {
			names = append(names, ref.Name)
		}
	}
	return names, s.err
}

func newMutator(t testing.TB, cfg Config) *Mutator {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newTestHandler(t testing.TB, reader SourceReader) (http.Handler, *PrometheusRecorder) {
	t.Helper()
	rec, err := NewPrometheusRecorder(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	key, err := confighash.NewKey(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHandler(newMutator(t, Config{Key: key, Vocabulary: confighash.Vocabulary{Reloader: true}, Reader: reader, Metrics: rec}), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return h, rec
}

// oneSourceHandler is a test handler whose reader holds one ConfigMap, cfg, which
// deploymentJSON uses whole; with the key it hashes with and the record an opted-in
// admission of deploymentJSON writes.
func oneSourceHandler(t testing.TB) (http.Handler, *PrometheusRecorder, confighash.Key, confighash.Record) {
	t.Helper()
	cfg := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}
	src := confighash.Source{SourceRef: cfg, Present: true, Data: confighash.Sums{{Key: "k", Sum: confighash.Sum{1}}}}
	sources := map[confighash.SourceRef]confighash.Source{cfg: src}
	h, rec := newTestHandler(t, stubReader{sources: sources})
	key, _ := confighash.NewKey(bytes.Repeat([]byte{1}, 32))
	ref := confighash.Reference{SourceRef: cfg, AllKeys: true}
	record := confighash.Record{{SourceRef: cfg, Digest: confighash.NamespacedDigest(key, "ns", ref, src), Seen: true}}
	return h, rec, key, record
}

const deploymentJSON = `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"ns","annotations":{%s}},
"spec":{"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"app","image":"app:1","envFrom":[{"configMapRef":{"name":"cfg"}}]}]}}}}`

// review is the AdmissionReview of the create of a Deployment.
func review(object string) []byte { return reviewOf("CREATE", object, "") }

// reviewUpdate is the AdmissionReview of an update from old to object.
func reviewUpdate(object, old string) []byte { return reviewOf("UPDATE", object, old) }

func reviewOf(operation, object, old string) []byte {
	// Marshalled from the API's types, in the API server's order: the uid first.
	request := &admissionv1.AdmissionRequest{
		UID: "1", Operation: admissionv1.Operation(operation), Namespace: "ns", Name: "web",
		Kind:     metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
		Resource: metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
		Object:   runtime.RawExtension{Raw: []byte(object)},
	}
	if old != "" {
		request.OldObject = runtime.RawExtension{Raw: []byte(old)}
	}
	b, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: request})
	return b
}

func post(h http.Handler, contentType string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, req)
	return rr
}

func decodeResponse(t *testing.T, rr *httptest.ResponseRecorder) *admissionv1.AdmissionResponse {
	t.Helper()
	if rr.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rr.Code, rr.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rr.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("not an AdmissionReview response: %v: %s", err, rr.Body)
	}
	if !out.Response.Allowed {
		t.Fatalf("denied: %+v; the webhook must never deny", out.Response)
	}
	return out.Response
}

func TestHandlerRefusesBadRequests(t *testing.T) {
	tests := []struct {
		name        string
		method      string
		contentType string
		body        []byte
		wantStatus  int
		reason      string
	}{
		{"a GET", http.MethodGet, "application/json", nil, http.StatusMethodNotAllowed, "method"},
		{"a wrong content type", http.MethodPost, "text/plain", review(`{}`), http.StatusUnsupportedMediaType, "content_type"},
		{"a body over the cap", http.MethodPost, "application/json", bytes.Repeat([]byte(" "), MaxBodyBytes+1), http.StatusRequestEntityTooLarge, "too_large"},
		{"not JSON", http.MethodPost, "application/json", []byte("{nope"), http.StatusBadRequest, "malformed"},
		{"a review without a request", http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), http.StatusBadRequest, "malformed"},
		// The guard once saw the first request and kubewebhook the last, null: a panic.
		{"a repeated request member", http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","object":{}},"request":null}`), http.StatusBadRequest, "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, rec := newTestHandler(t, stubReader{})
			req := httptest.NewRequest(tt.method, "/mutate", bytes.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.contentType)
			rr := httptest.NewRecorder()
			h.ServeHTTP(rr, req)
			if rr.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d", rr.Code, tt.wantStatus)
			}
			if n := testutil.ToFloat64(rec.badRequests.WithLabelValues(tt.reason)); n != 1 {
				t.Fatalf("bad_requests_total{reason=%q} = %v, want 1", tt.reason, n)
			}
		})
	}
}

func jsonPatch(t *testing.T, resp *admissionv1.AdmissionResponse) []map[string]any {
	t.Helper()
	if len(resp.Patch) == 0 {
		return nil
	}
	raw := resp.Patch
	if decoded, err := base64.StdEncoding.DecodeString(string(raw)); err == nil {
		raw = decoded
	}
	var ops []map[string]any
	if err := json.Unmarshal(raw, &ops); err != nil {
		t.Fatalf("patch %s: %v", raw, err)
	}
	return ops
}

func TestHandlerPatchesOnlyTheTwoAnnotations(t *testing.T) {
	cfg := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}
	h, rec := newTestHandler(t, stubReader{sources: map[confighash.SourceRef]confighash.Source{cfg: {SourceRef: cfg, Present: true}}})
	resp := decodeResponse(t, post(h, "application/json", review(strings.Replace(deploymentJSON, "%s", `"`+confighash.AnnotationInject+`":"true"`, 1))))
	ops := jsonPatch(t, resp)
	paths := map[string]bool{}
	for _, op := range ops {
		paths[op["path"].(string)] = true
	}
	want := []string{"/metadata/annotations/confighash.dev~1sources", "/spec/template/metadata/annotations"}
	if len(ops) != len(want) || !paths[want[0]] || !paths[want[1]] {
		t.Fatalf("patch = %v, want exactly the operations on %v", ops, want)
	}
	if n := testutil.ToFloat64(rec.mutations.WithLabelValues("Deployment", string(ResultPatched))); n != 1 {
		t.Fatalf("mutations_total{patched} = %v, want 1", n)
	}
	// The create is counted in the series exported from the start, spelled as the API
	// server spells operations.
	if n := testutil.CollectAndCount(rec.duration); n != 2 {
		t.Errorf("admission_duration_seconds has %d series, want CREATE and UPDATE only", n)
	}
}

func TestHandlerAllowsUnchangedWhenItCannotHash(t *testing.T) {
	optedIn := review(strings.Replace(deploymentJSON, "%s", `"`+confighash.AnnotationInject+`":"true","`+confighash.AnnotationOnly+`":"pods"`, 1))
	tests := []struct {
		name        string
		reader      stubReader
		body        []byte
		wantWarning string
		wantResult  Result
		wantPanics  float64
	}{
		{"a failed read", stubReader{err: errors.New("etcd is down")}, optedIn, "could not read the sources: etcd is down; the hash was not updated", ResultError, 0},
		{"a panic while reading", stubReader{panics: true}, optedIn, "internal error, allowed unchanged: boom", ResultError, 1},
		{"an object that is not a workload", stubReader{}, review(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}`), "", ResultSkipped, 0},
		{"a Rollout with a workloadRef", stubReader{}, review(`{"apiVersion":"argoproj.io/v1alpha1","kind":"Rollout","metadata":{"name":"r","annotations":{"confighash.dev/inject":"true"}},
"spec":{"workloadRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"},"template":{"metadata":{},"spec":{}}}}`),
			"not hashed: no pod template of its own: the Rollout uses the pod template of Deployment/web through workloadRef; opt that in instead", ResultSkipped, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, rec := newTestHandler(t, tt.reader)
			resp := decodeResponse(t, post(h, "application/json", tt.body))
			if ops := jsonPatch(t, resp); len(ops) != 0 {
				t.Fatalf("patch = %v, want none", ops)
			}
			if tt.wantWarning != "" && !strings.Contains(strings.Join(resp.Warnings, "\n"), warningPrefix+tt.wantWarning) {
				t.Fatalf("warnings = %q, want one containing %q", resp.Warnings, tt.wantWarning)
			}
			if n := testutil.ToFloat64(rec.panics); n != tt.wantPanics {
				t.Fatalf("panics_total = %v, want %v", n, tt.wantPanics)
			}
			var total float64
			for _, kind := range []string{"Deployment", "unknown"} {
				total += testutil.ToFloat64(rec.mutations.WithLabelValues(kind, string(tt.wantResult)))
			}
			if total != 1 {
				t.Fatalf("mutations_total{result=%q} = %v, want 1", tt.wantResult, total)
			}
		})
	}
}

func TestHandlerWarnsAboutBadAnnotationsAndStillHashes(t *testing.T) {
	cfg := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}
	h, _ := newTestHandler(t, stubReader{sources: map[confighash.SourceRef]confighash.Source{cfg: {SourceRef: cfg, Present: true}}})
	body := review(strings.Replace(deploymentJSON, "%s", `"`+confighash.AnnotationInject+`":"true","`+confighash.AnnotationExcludeSecrets+`":"other/db"`, 1))
	resp := decodeResponse(t, post(h, "application/json", body))
	if !strings.Contains(strings.Join(resp.Warnings, "\n"), `"other/db": references are same-namespace only`) {
		t.Fatalf("warnings = %q, want the cross-namespace reference named", resp.Warnings)
	}
	if len(jsonPatch(t, resp)) == 0 {
		t.Fatal("no patch: a bad annotation must not stop the hash")
	}
}

func TestHandlerSendsNoPatchWhenNothingChanged(t *testing.T) {
	h, rec, key, record := oneSourceHandler(t)
	obj := strings.Replace(deploymentJSON, "%s", `"`+confighash.AnnotationInject+`":"true","`+confighash.AnnotationSources+`":"`+record.Text(confighash.FormNamespaced)+`"`, 1)
	obj = strings.Replace(obj, `"labels":{"app":"web"}`, `"labels":{"app":"web"},"annotations":{"`+confighash.AnnotationHash+`":"`+record.Hash(key)+`"}`, 1)

	resp := decodeResponse(t, post(h, "application/json", review(obj)))
	if ops := jsonPatch(t, resp); len(ops) != 0 {
		t.Fatalf("patch = %v, want none for an object that already carries its hash and record", ops)
	}
	if n := testutil.ToFloat64(rec.mutations.WithLabelValues("Deployment", string(ResultUnchanged))); n != 1 {
		t.Fatalf("mutations_total{unchanged} = %v, want 1", n)
	}
}

// TestHandlerHashesTheSourcesAReloaderPatternMatches: Reloader's named list with a
// regular expression counts the existing sources whose whole name matches, and only
// those: a workload that names sources does not count the others it uses.
func TestHandlerHashesTheSourcesAReloaderPatternMatches(t *testing.T) {
	present := func(name string) confighash.Source {
		return confighash.Source{SourceRef: confighash.SourceRef{Kind: confighash.ConfigMap, Name: name}, Present: true}
	}
	sources := map[confighash.SourceRef]confighash.Source{}
	for _, name := range []string{"cfg", "app-a", "app-b", "my-app-c"} {
		sources[confighash.SourceRef{Kind: confighash.ConfigMap, Name: name}] = present(name)
	}
	h, _ := newTestHandler(t, stubReader{sources: sources})
	body := review(strings.Replace(deploymentJSON, "%s", `"`+confighash.ReloaderConfigMapReload+`":"app-.*"`, 1))
	resp := decodeResponse(t, post(h, "application/json", body))
	var record string
	for _, op := range jsonPatch(t, resp) {
		if op["path"] == "/metadata/annotations/confighash.dev~1sources" {
			record, _ = op["value"].(string)
		}
	}
	// cfg, used but not counted by a reload list alone, is recorded as not counting.
	if !strings.HasPrefix(record, "v2 configmap/app-a=") || !strings.Contains(record, " configmap/app-b=") ||
		!strings.HasSuffix(record, ",baseline,uncounted") || strings.Count(record, "configmap/") != 3 {
		t.Fatalf("sources record = %q, want configmap/app-a and configmap/app-b counted, configmap/cfg not", record)
	}
}

// TestHandlerAdoption: an update that meets a running workload for the first time is
// left to the watcher; an adopted workload keeps its pod template without a hash until
// its sources change.
func TestHandlerAdoption(t *testing.T) {
	h, rec, key, record := oneSourceHandler(t)
	with := func(annotations string) string { return strings.Replace(deploymentJSON, "%s", annotations, 1) }
	inject := `"` + confighash.AnnotationInject + `":"true"`
	paths := func(body []byte) []string {
		var out []string
		for _, op := range jsonPatch(t, decodeResponse(t, post(h, "application/json", body))) {
			out = append(out, op["op"].(string)+" "+op["path"].(string))
		}
		return out
	}

	// Opted in by an update that changes nothing else: deferred, no patch.
	if ops := paths(reviewUpdate(with(inject), with(``))); len(ops) != 0 {
		t.Errorf("first meeting: patch %v, want none", ops)
	}
	if n := testutil.ToFloat64(rec.mutations.WithLabelValues("Deployment", string(ResultDeferred))); n != 1 {
		t.Errorf("mutations_total{deferred} = %v, want 1", n)
	}
	// The same update with a new image rolls anyway: hashed now.
	if ops := paths(reviewUpdate(strings.Replace(with(inject), "app:1", "app:2", 1), with(``))); len(ops) != 2 {
		t.Errorf("first meeting with a pod template change: patch %v, want the record and the hash", ops)
	}
	// Adopted at the current hash: nothing to write, the template stays without one.
	adopted := inject + `,"` + confighash.AnnotationSources + `":"` + record.Text(confighash.FormNamespaced) + `","` + confighash.AnnotationAdopted + `":"` + record.Hash(key) + `"`
	if ops := paths(reviewUpdate(with(adopted), with(adopted))); len(ops) != 0 {
		t.Errorf("adopted and current: patch %v, want none", ops)
	}
	// An apply that replaced the whole object dropped the adoption: carried over.
	if ops := paths(reviewUpdate(with(inject), with(adopted))); !slices.Equal(ops, []string{
		"add /metadata/annotations/confighash.dev~1sources", "add /metadata/annotations/confighash.dev~1adopted",
	}) {
		t.Errorf("adoption dropped by a replace: patch %v, want the record and the adoption back", ops)
	}
	// Adopted at another hash: a change is due; hashed, and the adoption removed.
	stale := strings.Replace(adopted, record.Hash(key), "v1:"+strings.Repeat("0", 64), 1)
	if ops := paths(reviewUpdate(with(stale), with(stale))); !slices.Equal(ops, []string{
		"remove /metadata/annotations/confighash.dev~1adopted", "add /spec/template/metadata/annotations",
	}) {
		t.Errorf("adopted before a change: patch %v, want the adoption removed and the hash added", ops)
	}
}

// FuzzAdmissionHandler: any body is answered 200 with an allowed review, or refused
// with a 4xx; never a panic (a 500), never a denial. Bodies are capped, so memory is.
func FuzzAdmissionHandler(f *testing.F) {
	valid := review(strings.Replace(deploymentJSON, "%s", `"`+confighash.AnnotationInject+`":"true"`, 1))
	f.Add(valid)
	f.Add(valid[:len(valid)/2])
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","object":{}},"request":null}`))
	f.Add([]byte(`{"request":{"uid":"1","object":{"metadata":{"annotations":{"confighash.dev/inject":"true"}},"spec":{"template":7}}}}`))
	f.Add([]byte(`{"request":{"uid":"1","kind":{"group":"apps","version":"v1","kind":"Deployment"},"object":[[[[[[[[[[[[]]]]]]]]]]]]}}`))
	f.Add([]byte(`{"request":{"uid":["1"]}}`))
	f.Add([]byte(strings.Repeat("[", 10000)))
	cfg := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}
	h, _ := newTestHandler(f, stubReader{sources: map[confighash.SourceRef]confighash.Source{cfg: {SourceRef: cfg, Present: true}}})
	f.Fuzz(func(t *testing.T, body []byte) {
		rr := post(h, "application/json", body)
		switch {
		case rr.Code == http.StatusOK:
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rr.Body.Bytes(), &out); err != nil || out.Response == nil || !out.Response.Allowed {
				t.Fatalf("200 without an allowed review: %s", rr.Body)
			}
		case rr.Code >= 400 && rr.Code < 500:
		default:
			t.Fatalf("status %d for %q: %s", rr.Code, body, rr.Body)
		}
	})
}

// modes is a namespace gate for tests.
type modes map[string]confighash.Mode

func (m modes) Mode(ns string) confighash.Mode { return m[ns] }

func (m modes) Pacing(string) (confighash.Pacing, error) { return confighash.Pacing{}, nil }

// TestAReviewForANamespaceConfighashDoesNotActInReadsNothing: posted straight to the
// webhook by a pod, a review of a namespace that is not enabled learns nothing.
func TestAReviewForANamespaceConfighashDoesNotActInReadsNothing(t *testing.T) {
	key, _ := confighash.NewKey(bytes.Repeat([]byte{1}, 32))
	m := newMutator(t, Config{Key: key, Reader: stubReader{panics: true}, Gate: modes{"ns": confighash.ModeOff}})
	h, err := NewHandler(m, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	resp := decodeResponse(t, post(h, "application/json", review(strings.Replace(deploymentJSON, "%s", `"`+confighash.AnnotationInject+`":"true"`, 1))))
	if len(jsonPatch(t, resp)) != 0 || len(resp.Warnings) != 0 {
		t.Fatalf("patch %v, warnings %q: want nothing read and nothing said", jsonPatch(t, resp), resp.Warnings)
	}
	m = newMutator(t, Config{Key: key, Reader: stubReader{}, Gate: modes{"ns": confighash.ModeOptedIn}})
	if h, err = NewHandler(m, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	if resp := decodeResponse(t, post(h, "application/json", review(strings.Replace(deploymentJSON, "%s", `"`+confighash.AnnotationInject+`":"true"`, 1)))); len(jsonPatch(t, resp)) == 0 {
		t.Fatal("no patch in an enabled namespace")
	}
}

// TestEachFailOpenIsLogged: an admission let through unchanged for an error or a panic
// is a log line naming the workload, besides the warning its writer sees.
func TestEachFailOpenIsLogged(t *testing.T) {
	optedIn := review(strings.Replace(deploymentJSON, "%s", `"`+confighash.AnnotationInject+`":"true"`, 1))
	for _, reader := range []stubReader{{err: errors.New("etcd is down")}, {panics: true}} {
		var log bytes.Buffer
		key, _ := confighash.NewKey(bytes.Repeat([]byte{1}, 32))
		h, err := NewHandler(newMutator(t, Config{Key: key, Reader: reader, Log: zerolog.New(&log)}), zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		post(h, "application/json", optedIn)
		line := log.String()
		if !strings.Contains(line, "allowed unchanged (failed open)") || !strings.Contains(line, `"namespace":"ns"`) || !strings.Contains(line, `"name":"web"`) {
			t.Errorf("log %q, want a failed-open line naming ns/web", line)
		}
	}
}

// TestHandlerSaysAWorkloadThatAsksForRestartInPlaceRollsInstead: where the install
// restarts no pod in place, a workload whose pod template asks for it is hashed, to
// roll, and the user is told why at the write.
func TestHandlerSaysAWorkloadThatAsksForRestartInPlaceRollsInstead(t *testing.T) {
	h, _ := newTestHandler(t, stubReader{sources: map[confighash.SourceRef]confighash.Source{{Kind: confighash.ConfigMap, Name: "cfg"}: {SourceRef: confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, Present: true}}})
	obj := strings.Replace(deploymentJSON, `"template":{"metadata":{"labels":{"app":"web"}}`, `"template":{"metadata":{"labels":{"app":"web"},"annotations":{"`+confighash.AnnotationRestart+`":"in-place"}}`, 1)
	resp := decodeResponse(t, post(h, "application/json", review(strings.Replace(obj, "%s", "", 1))))
	if !strings.Contains(strings.Join(resp.Warnings, "\n"), warningPrefix+confighash.AnnotationRestart+": this install restarts no pod in place") {
		t.Fatalf("warnings = %q, want why it rolls instead", resp.Warnings)
	}
	if len(jsonPatch(t, resp)) == 0 {
		t.Fatal("no patch: it must be hashed, to roll")
	}
}

// TestHandlerTellsAnUnpinnedWorkloadItCannotRevert: a workload that asks a failed
// rollout to revert it, and is not pinned, has nothing to go back to: it is told at
// the write, and hashed as any other; a pinned one is told nothing.
func TestHandlerTellsAnUnpinnedWorkloadItCannotRevert(t *testing.T) {
	cfg := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}
	h, _ := newTestHandler(t, stubReader{sources: map[confighash.SourceRef]confighash.Source{cfg: {SourceRef: cfg, Present: true}}})
	want := warningPrefix + confighash.AnnotationOnFailure + ": an unpinned workload has nothing to go back to"
	for annotations, told := range map[string]bool{
		fmt.Sprintf(`%q:"true",%q:"revert"`, confighash.AnnotationInject, confighash.AnnotationOnFailure):                                     true,
		fmt.Sprintf(`%q:"true",%q:"revert",%q:"true"`, confighash.AnnotationInject, confighash.AnnotationOnFailure, confighash.AnnotationPin): false,
	} {
		resp := decodeResponse(t, post(h, "application/json", review(fmt.Sprintf(deploymentJSON, annotations))))
		if got := strings.Contains(strings.Join(resp.Warnings, "\n"), want); got != told {
			t.Errorf("%s: warnings %q; told it cannot revert: %v, want %v", annotations, resp.Warnings, got, told)
		}
		if told && len(jsonPatch(t, resp)) == 0 {
			t.Errorf("%s: not hashed", annotations)
		}
	}
}
