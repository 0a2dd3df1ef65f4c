package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/confighash/confighash"
)

// heldReader holds every Read until release is closed, and counts those waiting.
type heldReader struct {
	stubReader
	waiting atomic.Int32
	release chan struct{}
}

func (h *heldReader) Read(ctx context.Context, ns string, refs []confighash.SourceRef, t []confighash.Trigger) (map[confighash.SourceRef]confighash.Source, error) {
	h.waiting.Add(1)
	<-h.release
	return h.stubReader.Read(ctx, ns, refs, t)
}

// countingBody is a request body that counts the bytes read from it.
type countingBody struct {
	r    io.Reader
	read atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *countingBody) Close() error { return nil }

// guardedHandler is a handler whose reader holds reads until the returned function
// is called, with the bounds given (zero: the defaults).
func guardedHandler(t *testing.T, maxInFlight int, maxBytes int64) (http.Handler, *PrometheusRecorder, *heldReader) {
	t.Helper()
	rec, err := NewPrometheusRecorder(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := confighash.NewKey(bytes.Repeat([]byte{1}, 32))
	cfg := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}
	reader := &heldReader{stubReader: stubReader{sources: map[confighash.SourceRef]confighash.Source{cfg: {SourceRef: cfg, Present: true}}}, release: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-reader.release:
		default:
			close(reader.release)
		}
	})
	m := newMutator(t, Config{Key: key, Reader: reader, Metrics: rec, MaxInFlight: maxInFlight, MaxInFlightBytes: maxBytes})
	h, err := NewHandler(m, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return h, rec, reader
}

var optedIn = strings.Replace(deploymentJSON, "%s", `"`+confighash.AnnotationInject+`":"true"`, 1)

// postBody posts body with the Content-Length given (-1: unknown), and returns the
// response and how many bytes of the body were read.
func postBody(h http.Handler, body []byte, length int64) (*httptest.ResponseRecorder, int64) {
	req := httptest.NewRequest(http.MethodPost, "/mutate", nil)
	b := &countingBody{r: bytes.NewReader(body)}
	req.Body, req.ContentLength = b, length
	req.Header.Set("Content-Type", "application/json")
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, req)
	return rr, b.read.Load()
}

// holdAdmissions posts n reviews that wait in the reader, and returns once they do.
func holdAdmissions(t *testing.T, h http.Handler, reader *heldReader, n int, body []byte) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	before := int(reader.waiting.Load())
	for range n {
		wg.Go(func() { postBody(h, body, int64(len(body))) })
	}
	waitUntil(t, func() bool { return int(reader.waiting.Load()) == before+n })
	return &wg
}

// TestAdmissionsBeyondTheBoundAreAllowedAtOnceWithTheirUID: with one admission in
// flight and a bound of one, the next is answered allowed, unchanged, with a warning,
// echoing its uid, after reading only the first bytes of its body; counted.
func TestAdmissionsBeyondTheBoundAreAllowedAtOnceWithTheirUID(t *testing.T) {
	h, rec, reader := guardedHandler(t, 1, 0)
	wg := holdAdmissions(t, h, reader, 1, review(optedIn))

	padded := reviewOf("CREATE", strings.Replace(optedIn, `"web"`, `"web","padding":"`+strings.Repeat("x", 1<<20)+`"`, 1), "")
	rr, read := postBody(h, padded, int64(len(padded)))
	resp := decodeResponse(t, rr)
	if resp.UID != "1" || len(jsonPatch(t, resp)) != 0 || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "too many admissions at once") {
		t.Fatalf("shed: uid %q, patch %v, warnings %q; want uid 1, no patch, one warning", resp.UID, jsonPatch(t, resp), resp.Warnings)
	}
	if read > shedPrefixBytes {
		t.Errorf("read %d bytes of a shed review, want at most %d", read, shedPrefixBytes)
	}
	if n := testutil.ToFloat64(rec.shed.WithLabelValues(shedCount)); n != 1 {
		t.Errorf("admissions_shed_total{limit=count} = %v, want 1", n)
	}
	close(reader.release)
	wg.Wait()
	// The bound is free again: the next one is admitted.
	if ops := jsonPatch(t, decodeResponse(t, post(h, "application/json", review(optedIn)))); len(ops) == 0 {
		t.Fatal("after the held admission ended, the next one was not hashed")
	}
}

// TestAShedReviewWithoutItsUIDInItsFirstBytesGets429: a caller that hides the uid
// behind kilobytes of padding is told to retry, which the API server's failurePolicy
// Ignore takes as allowed.
func TestAShedReviewWithoutItsUIDInItsFirstBytesGets429(t *testing.T) {
	h, rec, reader := guardedHandler(t, 1, 0)
	wg := holdAdmissions(t, h, reader, 1, review(optedIn))
	defer func() { close(reader.release); wg.Wait() }()
	late := []byte(`{"padding":"` + strings.Repeat("x", 2*shedPrefixBytes) + `","request":{"uid":"2"}}`)
	for _, body := range [][]byte{late, []byte(`{"request":{"uid":`), []byte(`not json`), []byte(`{"request":{"uid":""}}`)} {
		rr, read := postBody(h, body, int64(len(body)))
		if rr.Code != http.StatusTooManyRequests || rr.Header().Get("Retry-After") == "" {
			t.Errorf("%.40q: status %d, Retry-After %q; want 429 with a Retry-After", body, rr.Code, rr.Header().Get("Retry-After"))
		}
		if read > shedPrefixBytes {
			t.Errorf("read %d bytes, want at most %d", read, shedPrefixBytes)
		}
	}
	if n := testutil.ToFloat64(rec.shed.WithLabelValues(shedCount)); n != 4 {
		t.Errorf("admissions_shed_total{limit=count} = %v, want 4", n)
	}
}

// TestLargeReviewsAreShedWhileSmallOnesPass: the bytes in flight are bounded too: with
// a small review in flight and room for one review at the cap, a review at the cap is
// shed by bytes, and other small ones pass.
func TestLargeReviewsAreShedWhileSmallOnesPass(t *testing.T) {
	h, rec, reader := guardedHandler(t, 100, MaxBodyBytes)
	small := review(optedIn)
	wg := holdAdmissions(t, h, reader, 10, small)
	large := review(optedIn)
	large = append(large[:len(large)-1], append(bytes.Repeat([]byte(" "), MaxBodyBytes-len(large)), '}')...)
	rr, read := postBody(h, large, int64(len(large)))
	if resp := decodeResponse(t, rr); resp.UID != "1" || len(resp.Warnings) != 1 {
		t.Fatalf("a large review beyond the bytes in flight: uid %q, warnings %q; want shed", resp.UID, resp.Warnings)
	}
	if read > shedPrefixBytes {
		t.Errorf("read %d bytes of a shed review, want at most %d", read, shedPrefixBytes)
	}
	// Unknown length: weighs the cap, shed too.
	if rr, _ := postBody(h, small, -1); len(decodeResponse(t, rr).Warnings) != 1 {
		t.Error("a review of unknown length was not weighed at the cap")
	}
	if n := testutil.ToFloat64(rec.shed.WithLabelValues(shedBytes)); n != 2 {
		t.Errorf("admissions_shed_total{limit=bytes} = %v, want 2", n)
	}
	more := holdAdmissions(t, h, reader, 20, small)
	close(reader.release)
	wg.Wait()
	more.Wait()
	if n := testutil.ToFloat64(rec.shed.WithLabelValues(shedCount)); n != 0 {
		t.Errorf("admissions_shed_total{limit=count} = %v, want 0", n)
	}
}

// TestABurstOfOrdinaryReviewsIsNeverShed: with the default bounds, 64 reviews of
// about 10 KB at once are all admitted and hashed.
func TestABurstOfOrdinaryReviewsIsNeverShed(t *testing.T) {
	h, rec, reader := guardedHandler(t, 0, 0)
	body := reviewOf("CREATE", strings.Replace(optedIn, `"web"`, `"web","padding":"`+strings.Repeat("x", 10<<10)+`"`, 1), "")
	results := make([]*httptest.ResponseRecorder, 64)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i], _ = postBody(h, body, int64(len(body))) })
	}
	waitUntil(t, func() bool { return reader.waiting.Load() == int32(len(results)) })
	close(reader.release)
	wg.Wait()
	for i, rr := range results {
		if resp := decodeResponse(t, rr); len(jsonPatch(t, resp)) == 0 || len(resp.Warnings) != 0 {
			t.Fatalf("review %d: patch %v, warnings %q; want hashed", i, jsonPatch(t, resp), resp.Warnings)
		}
	}
	if n := testutil.ToFloat64(rec.shed.WithLabelValues(shedCount)) + testutil.ToFloat64(rec.shed.WithLabelValues(shedBytes)); n != 0 {
		t.Errorf("%v shed, want none", n)
	}
}

// TestABodyDeclaredOverTheCapIsRefusedUnread: a Content-Length over MaxBodyBytes is
// refused before a byte is read; the cap fits two objects at etcd's limit.
func TestABodyDeclaredOverTheCapIsRefusedUnread(t *testing.T) {
	if MaxBodyBytes < 3<<20 || MaxBodyBytes > 4<<20 {
		t.Errorf("MaxBodyBytes = %d: want room for object and oldObject at etcd's 1.5 MiB, and little more", MaxBodyBytes)
	}
	h, rec := newTestHandler(t, stubReader{panics: true})
	body := append(review(optedIn), bytes.Repeat([]byte(" "), MaxBodyBytes)...)
	rr, read := postBody(h, body, int64(len(body)))
	if rr.Code != http.StatusRequestEntityTooLarge || read != 0 {
		t.Fatalf("status %d after reading %d bytes; want 413 before reading", rr.Code, read)
	}
	// Of unknown length: read up to the cap, then refused.
	rr, read = postBody(h, body, -1)
	if rr.Code != http.StatusRequestEntityTooLarge || read > MaxBodyBytes+bytesMinRead {
		t.Fatalf("status %d after reading %d bytes; want 413 after at most the cap", rr.Code, read)
	}
	if n := testutil.ToFloat64(rec.badRequests.WithLabelValues(reasonTooLarge)); n != 2 {
		t.Errorf("bad_requests_total{reason=too_large} = %v, want 2", n)
	}
}

const bytesMinRead = 512

// TestReviewsConfighashDoesNotActOnAreAnsweredWithoutDecodingTheObject: a review of a
// namespace confighash does not act in, of a kind it does not handle, of an operation
// it is not registered for, or the update of a Job or a Pod, is answered allowed, unchanged,
// from the request's fields: the object is never decoded (kubewebhook and the mutator
// are never called) and nothing is read.
func TestReviewsConfighashDoesNotActOnAreAnsweredWithoutDecodingTheObject(t *testing.T) {
	rec, err := NewPrometheusRecorder(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := confighash.NewKey(bytes.Repeat([]byte{1}, 32))
	m := newMutator(t, Config{Key: key, Reader: stubReader{panics: true}, Gate: modes{"ns": confighash.ModeOptedIn}, Metrics: rec})
	decoded := 0
	g := &guard{next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { decoded++ }), mutator: m, metrics: rec, log: zerolog.Nop()}
	request := func(edit func(map[string]any)) []byte {
		var r map[string]any
		if err := json.Unmarshal(review(optedIn), &r); err != nil {
			t.Fatal(err)
		}
		edit(r["request"].(map[string]any))
		b, _ := json.Marshal(r)
		return b
	}
	tests := map[string][]byte{
		"a namespace confighash does not act in": request(func(r map[string]any) { r["namespace"] = "off" }),
		"a kind it does not handle": request(func(r map[string]any) {
			r["kind"] = map[string]string{"group": "", "version": "v1", "kind": "ConfigMap"}
		}),
		"the update of a Pod": request(func(r map[string]any) {
			r["operation"], r["kind"] = "UPDATE", map[string]string{"group": "", "version": "v1", "kind": "Pod"}
		}),
		"a kind of another version": request(func(r map[string]any) {
			r["kind"] = map[string]string{"group": "apps", "version": "v1beta1", "kind": "Deployment"}
		}),
		"a delete":                       request(func(r map[string]any) { r["operation"] = "DELETE" }),
		"an operation in the wrong case": request(func(r map[string]any) { r["operation"] = "create" }),
		"the update of a Job": request(func(r map[string]any) {
			r["operation"], r["kind"] = "UPDATE", map[string]string{"group": "batch", "version": "v1", "kind": "Job"}
		}),
		"no kind": request(func(r map[string]any) { delete(r, "kind") }),
	}
	for name, body := range tests {
		t.Run(name, func(t *testing.T) {
			rr := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			g.ServeHTTP(rr, req)
			resp := decodeResponse(t, rr)
			if resp.UID != "1" || len(resp.Patch) != 0 || len(resp.Warnings) != 0 || decoded != 0 {
				t.Fatalf("uid %q, patch %s, warnings %q, decoded %d times; want allowed, unchanged, undecoded", resp.UID, resp.Patch, resp.Warnings, decoded)
			}
		})
	}
	if n := testutil.ToFloat64(rec.mutations.WithLabelValues("unknown", string(ResultSkipped))); n != 3 {
		t.Errorf("mutations_total{kind=unknown,result=skipped} = %v, want 3", n)
	}
	// In the namespace it acts in, the review goes on to the mutator.
	rr := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(review(optedIn)))
	req.Header.Set("Content-Type", "application/json")
	g.ServeHTTP(rr, req)
	if decoded != 1 {
		t.Fatalf("an opted-in review in an enabled namespace was not passed on")
	}
}

func TestTheHeadOfAReview(t *testing.T) {
	tests := []struct {
		prefix, apiVersion, uid string
	}{
		{`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"abc","kind":{"gro`, "admission.k8s.io/v1", "abc"},
		{`{"request":{"kind":{"group":"apps"},"uid":"u"`, "", "u"},
		{`{"apiVersion":"admission.k8s.io/v1beta1","request":{"uid":"u"}}`, "admission.k8s.io/v1beta1", "u"},
		{`{"other":[1,{"uid":"x"}],"request":{"uid":"u"`, "", "u"},
		{`{"a":null,"b":{"c":[null,true]},"apiVersion":{"x":"y"},"request":{"d":null,"uid":"u"`, "", "u"},
		{`{"request":{"uid":"u`, "", ""},
		{`{"request":{"object":{"uid":"x"},"uid`, "", ""},
		{`{"Request":{"uid":"u"}}`, "", ""},
		{`{"request":{"UID":"u"}}`, "", ""},
		{`{"request":{"uid":7}}`, "", ""},
		{`{"request":{"uid":""}}`, "", ""},
		{`{"kind":{"request":{"uid":"x"}}}`, "", ""},
		{`[{"request":{"uid":"x"}}]`, "", ""},
		{``, "", ""},
	}
	for _, tt := range tests {
		h := headOf([]byte(tt.prefix))
		if h.uid != tt.uid || h.uid != "" && h.apiVersion != tt.apiVersion {
			t.Errorf("headOf(%s) = %+v; want apiVersion %q, uid %q", tt.prefix, h, tt.apiVersion, tt.uid)
		}
	}
	// As the API server writes a review: the resource and namespace follow the uid.
	h := headOf([]byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},` +
		`"resource":{"group":"","version":"v1","resource":"pods"},"requestKind":{"group":"","version":"v1","kind":"Pod"},"name":"web-0","namespace":"shop","operation":"CREATE","object":{"metadata":{"namespace":"other"`))
	if h != (reviewHead{apiVersion: "admission.k8s.io/v1", uid: "u", resource: "pods", namespace: "shop"}) {
		t.Errorf("headOf(a pod's review) = %+v", h)
	}
}

// TestAShedAnswerIsAReviewTheAPIServerAccepts: the answer carries the request's
// apiVersion, its uid and allowed.
func TestAShedAnswerIsAReviewTheAPIServerAccepts(t *testing.T) {
	rr := httptest.NewRecorder()
	answer(rr, "admission.k8s.io/v1", "uid-1", []string{"w"})
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rr.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil || out.Response.UID != "uid-1" || !out.Response.Allowed {
		t.Fatalf("answer %s", rr.Body)
	}
	if ct := rr.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
}

// TestAReviewNamingAnEnabledNamespaceForAnObjectOfAnotherReadsNothing: the guard reads
// the request's namespace, the mutator the object's; a forged review that names an
// enabled namespace for an object of another is answered unchanged, nothing read.
func TestAReviewNamingAnEnabledNamespaceForAnObjectOfAnotherReadsNothing(t *testing.T) {
	key, _ := confighash.NewKey(bytes.Repeat([]byte{1}, 32))
	m := newMutator(t, Config{Key: key, Reader: stubReader{panics: true}, Gate: modes{"ns": confighash.ModeOptedIn}})
	h, err := NewHandler(m, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	object := strings.Replace(optedIn, `"namespace":"ns"`, `"namespace":"victim"`, 1)
	resp := decodeResponse(t, post(h, "application/json", review(object)))
	if len(jsonPatch(t, resp)) != 0 || len(resp.Warnings) != 0 {
		t.Fatalf("patch %v, warnings %q: want nothing read and nothing said", jsonPatch(t, resp), resp.Warnings)
	}
}

// TestOneNamespaceShedsOnlyItsOwnReviews (issue 52): the bounds on admissions in flight
// are shared between namespaces. One whose users fill its share (30 dry runs of 1.4 MB
// pods filled the bytes for every namespace) sheds its own next review; another
// namespace's is admitted.
func TestOneNamespaceShedsOnlyItsOwnReviews(t *testing.T) {
	h, rec, reader := guardedHandler(t, 4, 0)
	in := func(ns string) []byte {
		return bytes.ReplaceAll(review(optedIn), []byte(`"namespace":"ns"`), []byte(`"namespace":"`+ns+`"`))
	}
	wg := holdAdmissions(t, h, reader, 2, in("noisy")) // half the bound: its share, alone
	rr, _ := postBody(h, in("noisy"), int64(len(in("noisy"))))
	if resp := decodeResponse(t, rr); len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "too many admissions at once in namespace noisy") {
		t.Fatalf("a third review of the namespace holding its share: warnings %q, want it shed", resp.Warnings)
	}
	more := holdAdmissions(t, h, reader, 1, in("quiet"))
	close(reader.release)
	wg.Wait()
	more.Wait()
	if n := testutil.ToFloat64(rec.shed.WithLabelValues(shedCount)); n != 1 {
		t.Errorf("admissions_shed_total{limit=count} = %v, want 1: the other namespace's review was shed", n)
	}
}

// TestAShedPodIsToldWhatCatchesItUp (issue 52): a pod create shed by the bounds gets no
// restarter, and its warning says what a change of its data does: its workload rolls
// instead of restarting its pods in place.
func TestAShedPodIsToldWhatCatchesItUp(t *testing.T) {
	h, _, reader := guardedHandler(t, 1, 0)
	wg := holdAdmissions(t, h, reader, 1, review(optedIn))
	pod := bytes.Replace(review(optedIn), []byte(`"resource":"deployments"`), []byte(`"resource":"pods"`), 1)
	rr, _ := postBody(h, pod, int64(len(pod)))
	if resp := decodeResponse(t, rr); len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "rolls instead of restarting its pods in place") {
		t.Errorf("a shed pod create: warnings %q, want one saying its workload rolls instead at the next change of its data", resp.Warnings)
	}
	close(reader.release)
	wg.Wait()
}
