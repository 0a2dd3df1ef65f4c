package watcher

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confighash/confighash"
)

// TestAMetricGateFailsOnlyOnAValueThatDoesNotHold: a value past the threshold fails
// the canary; a server that is slow, dead, says an error or answers too much proves
// nothing (unsure), and so does no data at the bake's last check, and each says why. The query reads the canary's own
// namespace and name.
func TestAMetricGateFailsOnlyOnAValueThatDoesNotHold(t *testing.T) {
	var mu sync.Mutex
	var asked string
	answers := map[string]func(w http.ResponseWriter){
		"fine":  func(w http.ResponseWriter) { fmt.Fprint(w, vectorAnswer("0.01", "0.02")) },
		"bad":   func(w http.ResponseWriter) { fmt.Fprint(w, vectorAnswer("0.01", "0.5")) },
		"empty": func(w http.ResponseWriter) { fmt.Fprint(w, vectorAnswer()) },
		"nan":   func(w http.ResponseWriter) { fmt.Fprint(w, vectorAnswer("NaN")) },
		"scalar": func(w http.ResponseWriter) {
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"scalar","result":[1,"0.2"]}}`)
		},
		"refused": func(w http.ResponseWriter) {
			w.WriteHeader(400)
			fmt.Fprint(w, `{"status":"error","error":"parse error"}`)
		},
		"huge": func(w http.ResponseWriter) { fmt.Fprint(w, strings.Repeat(" ", analysisBytes+1)) },
		"slow": func(http.ResponseWriter) { time.Sleep(analysisTimeout + time.Second) },
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("query")
		mu.Lock()
		asked = q
		mu.Unlock()
		answers[strings.Fields(q)[0]](w)
	}))
	defer srv.Close()
	queries := map[string]string{}
	for name := range answers {
		queries[name] = name + ` ratio{namespace="$namespace",deployment="$workload"}`
	}
	a := newAnalyst(srv.URL, queries, NoopRecorder{})
	v := &view{}
	v.Namespace, v.Name = "shop", "web"
	for _, c := range []struct {
		query  string
		why    string
		unsure bool
		last   bool
	}{
		{query: "fine"},
		{query: "bad", why: "the metric gate failed: bad is 0.5, want < 0.1"},
		{query: "scalar", why: "the metric gate failed: scalar is 0.2, want < 0.1"},
		{query: "empty", why: "Prometheus had no data for it by the end of the bake", unsure: true, last: true},
		{query: "nan", why: "Prometheus had no data for it by the end of the bake", unsure: true, last: true},
		{query: "empty"},
		{query: "refused", why: "400 Bad Request: parse error", unsure: true},
		{query: "huge", why: "more than 1048576 bytes", unsure: true},
		{query: "slow", why: "could not be read from Prometheus", unsure: true},
		{query: "unnamed", why: "names no query of the install", unsure: true},
	} {
		why, unsure := a.check(t.Context(), v, confighash.Analysis{Query: c.query, Op: "<", Threshold: 0.1}, c.last)
		if unsure != c.unsure || c.why == "" && why != "" || !strings.Contains(why, c.why) {
			t.Errorf("%s (last check %v): %q, unsure %v; want %q, unsure %v", c.query, c.last, why, unsure, c.why, c.unsure)
		}
	}
	mu.Lock()
	if !strings.Contains(asked, `ratio{namespace="shop",deployment="web"}`) {
		t.Errorf("asked %q; want the canary's namespace and name", asked)
	}
	mu.Unlock()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	why, unsure := newAnalyst(dead, queries, NoopRecorder{}).check(t.Context(), v, confighash.Analysis{Query: "fine", Op: "<", Threshold: 0.1}, false)
	if !unsure || !strings.Contains(why, "could not be read from Prometheus") || !strings.Contains(why, "refused") {
		t.Errorf("a dead Prometheus: %q, unsure %v; want it could not be read, unsure", why, unsure)
	}
	why, unsure = newAnalyst("", queries, NoopRecorder{}).check(t.Context(), v, confighash.Analysis{Query: "fine", Op: "<", Threshold: 0.1}, false)
	if !unsure || !strings.Contains(why, "no --prometheus-url") {
		t.Errorf("no Prometheus: %q, unsure %v", why, unsure)
	}
}

func vectorAnswer(values ...string) string {
	samples := make([]string, len(values))
	for i, v := range values {
		samples[i] = fmt.Sprintf(`{"metric":{"pod":"p%d"},"value":[1764417600,%q]}`, i, v)
	}
	return `{"status":"success","data":{"resultType":"vector","result":[` + strings.Join(samples, ",") + `]}}`
}
