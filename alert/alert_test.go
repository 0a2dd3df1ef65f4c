package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// sink is a real HTTP server on loopback that records what it receives.
type sink struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
}

func newSink(t *testing.T, handle func(w http.ResponseWriter, attempt int)) *sink {
	s := &sink{}
	var attempts atomic.Int32
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.bodies = append(s.bodies, body)
		s.mu.Unlock()
		if handle != nil {
			handle(w, int(attempts.Add(1)))
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) received() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.bodies...)
}

// counts is a Recorder for tests.
type counts struct{ sent, failed, dropped atomic.Int32 }

func (c *counts) Sent(Sink)    { c.sent.Add(1) }
func (c *counts) Failed(Sink)  { c.failed.Add(1) }
func (c *counts) Dropped(Sink) { c.dropped.Add(1) }

func start(t *testing.T, cfg Config) (*Notifier, *counts) {
	t.Helper()
	c := &counts{}
	cfg.Metrics = c
	if cfg.Quiet == 0 {
		cfg.Quiet = 100 * time.Millisecond
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = n.Run(ctx) }()
	return n, c
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("waiting for %s", what)
}

func rolled(ns, workload string) Event {
	return Event{What: Rolled, Namespace: ns, Workload: Object{Kind: "Deployment", Name: workload},
		Sources: []Object{{Kind: "ConfigMap", Name: "app", ResourceVersion: "42"}}}
}

func TestWebhookBodyIsTheDocumentedJSON(t *testing.T) {
	s := newSink(t, nil)
	n, c := start(t, Config{Sink: Webhook, URL: s.URL, Cluster: "prod", AdditionalInfo: "team shop"})
	n.Notify(rolled("shop", "web"))
	waitFor(t, "an alert", func() bool { return c.sent.Load() == 1 })
	var got Alert
	if err := json.Unmarshal(s.received()[0], &got); err != nil {
		t.Fatal(err)
	}
	if got.What != Rolled || got.Cluster != "prod" || got.Namespace != "shop" || got.AdditionalInfo != "team shop" || got.More != 0 ||
		len(got.Sources) != 1 || got.Sources[0] != (Object{"ConfigMap", "app", "42"}) ||
		len(got.Workloads) != 1 || got.Workloads[0] != (Object{Kind: "Deployment", Name: "web"}) ||
		got.Explain != "confighash explain deployment/web -n shop" || got.Time.IsZero() {
		t.Fatalf("body = %+v", got)
	}
}

func TestChatBodiesSayWhatHappened(t *testing.T) {
	for _, sinkKind := range []Sink{Slack, GChat} {
		t.Run(string(sinkKind), func(t *testing.T) {
			s := newSink(t, nil)
			n, c := start(t, Config{Sink: sinkKind, URL: s.URL, Cluster: "prod"})
			n.Notify(rolled("shop", "web"))
			n.Notify(rolled("shop", "api"))
			waitFor(t, "an alert", func() bool { return c.sent.Load() == 1 })
			var got map[string]string
			if err := json.Unmarshal(s.received()[0], &got); err != nil {
				t.Fatal(err)
			}
			want := "*confighash is rolling 2 workloads in prod/shop*\nChanged: ConfigMap/app@42\nWorkloads: Deployment/web, Deployment/api\nMore: `confighash explain -n shop`"
			if len(got) != 1 || got["text"] != want {
				t.Fatalf("body = %q, want {text: %q}", got, want)
			}
		})
	}
}

func TestTeamsBodyIsAnAdaptiveCard(t *testing.T) {
	s := newSink(t, nil)
	n, c := start(t, Config{Sink: Teams, URL: s.URL})
	n.Notify(Event{What: Healed, Namespace: "shop", Workload: Object{Kind: "StatefulSet", Name: "db"}, Reason: "the webhook did not write the hash after 3 touches"})
	waitFor(t, "an alert", func() bool { return c.sent.Load() == 1 })
	var got struct {
		Type        string
		Attachments []struct {
			ContentType string
			Content     struct {
				Type, Version string
				Body          []struct {
					Type, Text string
					Facts      []struct{ Title, Value string }
				}
			}
		}
	}
	if err := json.Unmarshal(s.received()[0], &got); err != nil {
		t.Fatal(err)
	}
	if got.Type != "message" || len(got.Attachments) != 1 || got.Attachments[0].ContentType != "application/vnd.microsoft.card.adaptive" {
		t.Fatalf("not a Workflows message with an Adaptive Card: %s", s.received()[0])
	}
	card := got.Attachments[0].Content
	if card.Type != "AdaptiveCard" || card.Version != "1.4" || len(card.Body) != 3 ||
		card.Body[0].Text != "confighash healed 1 workload in shop: the webhook did not write the hash" {
		t.Fatalf("card = %+v", card)
	}
	facts := map[string]string{}
	for _, f := range card.Body[1].Facts {
		facts[f.Title] = f.Value
	}
	if facts["Namespace"] != "shop" || facts["Workloads"] != "StatefulSet/db" || facts["Reason"] != "the webhook did not write the hash after 3 touches" {
		t.Fatalf("facts = %v", facts)
	}
	if card.Body[2].Text != "More: `confighash explain statefulset/db -n shop`" {
		t.Fatalf("last block = %q", card.Body[2].Text)
	}
}

func TestOneChangeToManyWorkloadsIsOneAlert(t *testing.T) {
	s := newSink(t, nil)
	n, c := start(t, Config{Sink: Webhook, URL: s.URL, Quiet: 300 * time.Millisecond})
	for i := range 300 {
		n.Notify(rolled("shop", fmt.Sprintf("web-%d", i)))
		n.Notify(rolled("shop", fmt.Sprintf("web-%d", i))) // the same workload twice counts once
		if i%50 == 0 {
			time.Sleep(50 * time.Millisecond) // spread as the touch rate spreads them
		}
	}
	n.Notify(rolled("other", "web")) // another namespace: its own alert
	waitFor(t, "two alerts", func() bool { return c.sent.Load() == 2 })
	time.Sleep(500 * time.Millisecond)
	var shop Alert
	for _, b := range s.received() {
		var a Alert
		_ = json.Unmarshal(b, &a)
		if a.Namespace == "shop" {
			shop = a
		}
	}
	if len(s.received()) != 2 || len(shop.Workloads) != 20 || shop.More != 280 || shop.Explain != "confighash explain -n shop" {
		t.Fatalf("%d alerts; shop's names %d workloads and %d more", len(s.received()), len(shop.Workloads), shop.More)
	}
}

func TestRetriesOn5xxAnd429HonouringRetryAfter(t *testing.T) {
	s := newSink(t, func(w http.ResponseWriter, attempt int) {
		switch attempt {
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	n, c := start(t, Config{Sink: Webhook, URL: s.URL})
	began := time.Now()
	n.Notify(rolled("shop", "web"))
	waitFor(t, "the alert", func() bool { return c.sent.Load() == 1 })
	// Quiet, then 1 s of backoff, then the 2 s the sink asked for.
	if took := time.Since(began); len(s.received()) != 3 || took < 3*time.Second {
		t.Fatalf("%d attempts in %v; want 3, the last after the 2 s Retry-After", len(s.received()), took)
	}
}

func TestA4xxIsNotRetried(t *testing.T) {
	s := newSink(t, func(w http.ResponseWriter, _ int) { w.WriteHeader(http.StatusNotFound) })
	n, c := start(t, Config{Sink: Slack, URL: s.URL})
	n.Notify(rolled("shop", "web"))
	waitFor(t, "the failure", func() bool { return c.failed.Load() == 1 })
	if len(s.received()) != 1 {
		t.Fatalf("%d attempts, want 1", len(s.received()))
	}
}

// TestADeadSinkCostsACountedFailureAndNeverTheURL: nothing listens; the failure is
// counted and logged without the URL, whose path holds the token.
func TestADeadSinkCostsACountedFailureAndNeverTheURL(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String() + "/services/T000/B000/secret-token"
	_ = l.Close()
	var logs bytes.Buffer
	var mu sync.Mutex
	n, c := start(t, Config{Sink: Slack, URL: url, Log: zerolog.New(zerolog.SyncWriter(lockedWriter{&mu, &logs})).Level(zerolog.DebugLevel)})
	began := time.Now()
	for i := range 100 {
		n.Notify(rolled("shop", fmt.Sprintf("web-%d", i)))
	}
	if took := time.Since(began); took > 100*time.Millisecond {
		t.Fatalf("100 notifications took %v: notifying must never wait on the sink", took)
	}
	waitFor(t, "the failure", func() bool { return c.failed.Load() == 1 })
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "secret-token") || !strings.Contains(logs.String(), "alert not sent") {
		t.Fatalf("logs:\n%s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestASlowSinkHoldsNothingUpAndDropsWhatCannotWait: a sink that takes 10 s per
// request. Notifying stays instant; alerts beyond the queue are dropped and counted.
func TestASlowSinkHoldsNothingUpAndDropsWhatCannotWait(t *testing.T) {
	release := make(chan struct{})
	s := newSink(t, func(http.ResponseWriter, int) {
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
	})
	defer close(release)
	n, c := start(t, Config{Sink: Webhook, URL: s.URL, Queue: 2, Quiet: 50 * time.Millisecond})
	began := time.Now()
	for i := range 100 {
		// 100 changes, each its own alert.
		n.Notify(Event{What: Rolled, Namespace: "shop", Workload: Object{Kind: "Deployment", Name: "web"},
			Sources: []Object{{Kind: "ConfigMap", Name: "app", ResourceVersion: fmt.Sprint(i)}}})
	}
	if took := time.Since(began); took > 100*time.Millisecond {
		t.Fatalf("100 notifications took %v with a slow sink", took)
	}
	// Two queued and, unless all were due at once, one in flight: the other 97 or 98
	// dropped.
	waitFor(t, "the drops", func() bool { return c.dropped.Load() >= 97 })
	time.Sleep(200 * time.Millisecond)
	if d := c.dropped.Load(); d > 98 {
		t.Fatalf("%d dropped, want at most 98: the queue holds 2", d)
	}
	if c.sent.Load() != 0 {
		t.Fatalf("sent %d while the sink had not answered", c.sent.Load())
	}
}

func TestConfigRefusesWhatCannotWork(t *testing.T) {
	for _, cfg := range []Config{
		{Sink: "discord", URL: "https://example.com/hook"},
		{Sink: Slack, URL: "ftp://example.com/hook"},
		{Sink: Slack, URL: "hooks.slack.com/services/x"},
		{Sink: Slack, URL: "https://hooks.slack.com/services/secret", Proxy: "::"},
	} {
		_, err := New(cfg)
		if err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("New(%q, proxy %q) error = %v; want a refusal that does not quote the URL", cfg.Sink, cfg.Proxy, err)
		}
	}
}

// TestWhatIsBatchedAtShutdownIsStillSent: a watcher stopped within the quiet period of
// a change still sends its alert.
func TestWhatIsBatchedAtShutdownIsStillSent(t *testing.T) {
	s := newSink(t, nil)
	n, err := New(Config{Sink: Webhook, URL: s.URL, Quiet: time.Hour, Metrics: &counts{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { _ = n.Run(ctx); close(ran) }()
	n.Notify(rolled("shop", "web"))
	cancel()
	<-ran
	if got := len(s.received()); got != 1 {
		t.Fatalf("%d alerts sent at shutdown, want the batched one", got)
	}
}

// TestShutdownWaitsForAHungSinkNoLongerThanDrain: a sink that never answers holds the
// shutdown for Drain, not for the request timeout.
func TestShutdownWaitsForAHungSinkNoLongerThanDrain(t *testing.T) {
	release := make(chan struct{})
	s := newSink(t, func(http.ResponseWriter, int) { <-release })
	defer close(release)
	n, err := New(Config{Sink: Webhook, URL: s.URL, Quiet: time.Hour, Drain: 200 * time.Millisecond, Metrics: &counts{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { _ = n.Run(ctx); close(ran) }()
	n.Notify(rolled("shop", "web"))
	began := time.Now()
	cancel()
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return while the sink hung")
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Fatalf("shutdown took %v, want about Drain (200ms)", took)
	}
}

// TestOneNamespacesFloodDropsItsOwnAlertsNotAnothers: a sink that takes 200 ms per
// request, a queue of 4; namespace "flood" changes 100 times, then "quiet" once.
// Its alert is sent; the alerts dropped are all the flood's.
func TestOneNamespacesFloodDropsItsOwnAlertsNotAnothers(t *testing.T) {
	s := newSink(t, func(http.ResponseWriter, int) { time.Sleep(200 * time.Millisecond) })
	n, c := start(t, Config{Sink: Webhook, URL: s.URL, Queue: 4, Quiet: 50 * time.Millisecond})
	change := func(ns string, i int) {
		n.Notify(Event{What: Rolled, Namespace: ns, Workload: Object{Kind: "Deployment", Name: "web"},
			Sources: []Object{{Kind: "ConfigMap", Name: "app", ResourceVersion: fmt.Sprint(i)}}})
	}
	for i := range 100 {
		change("flood", i)
	}
	waitFor(t, "the flood to fill the queue", func() bool { return c.dropped.Load() >= 90 })
	change("quiet", 1)
	namespaces := func() map[string]int {
		got := map[string]int{}
		for _, b := range s.received() {
			var a Alert
			if err := json.Unmarshal(b, &a); err != nil {
				t.Fatal(err)
			}
			got[a.Namespace]++
		}
		return got
	}
	waitFor(t, "the quiet namespace's alert", func() bool { return namespaces()["quiet"] == 1 })
	waitFor(t, "the queue to empty", func() bool { return int(c.sent.Load()+c.dropped.Load()) == 101 })
	if got := namespaces(); got["flood"]+int(c.dropped.Load()) != 100 {
		t.Fatalf("received %v, %d dropped: want the flood's 100 received or dropped, and the quiet one received", got, c.dropped.Load())
	}
}

// TestAWritersNameNeitherPingsNorLinks (issue 52): a field manager's name is the
// tenant's to choose; `kubectl apply --field-manager='<!channel> <https://evil|argocd>'`
// on a flapping Secret put it, as it was, into the chat sinks' markup, which pinged the
// channel and showed a link named argocd. Each sink gets it escaped as its markup
// reads it; the plain webhook gets it as data.
func TestAWritersNameNeitherPingsNorLinks(t *testing.T) {
	const hostile = `<!channel> <https://evil.example|argocd> <users/all> [argocd](https://evil.example) & more`
	for _, tc := range []struct {
		sink      Sink
		forbidden []string
		shows     string
	}{
		{Slack, []string{"<!channel>", "<https://", "<users/all>"}, "&lt;!channel&gt; &lt;https://evil.example|argocd&gt;"},
		{GChat, []string{"<users/all>", "<https://", "<!channel>"}, "\u2039users/all\u203a"},
		{Teams, []string{"[argocd](https://", "<users/all>"}, `\[argocd\]\(https://evil.example\)`},
		{Webhook, nil, hostile},
	} {
		t.Run(string(tc.sink), func(t *testing.T) {
			s := newSink(t, nil)
			n, c := start(t, Config{Sink: tc.sink, URL: s.URL})
			n.Notify(Event{What: Held, Namespace: "shop", Workload: Object{Kind: "Deployment", Name: "web"},
				Reason: "secret/tls changed 12 times within 5m0s, written by " + strconv.Quote(hostile)})
			waitFor(t, "an alert", func() bool { return c.sent.Load() == 1 })
			var body any
			if err := json.Unmarshal(s.received()[0], &body); err != nil {
				t.Fatal(err)
			}
			// What the sink reads, its JSON strings decoded.
			var texts []string
			var walk func(any)
			walk = func(v any) {
				switch v := v.(type) {
				case string:
					texts = append(texts, v)
				case map[string]any:
					for _, e := range v {
						walk(e)
					}
				case []any:
					for _, e := range v {
						walk(e)
					}
				}
			}
			walk(body)
			all := strings.Join(texts, "\n")
			for _, f := range tc.forbidden {
				if strings.Contains(all, f) {
					t.Errorf("the %s body holds %q as markup:\n%s", tc.sink, f, all)
				}
			}
			if !strings.Contains(all, tc.shows) {
				t.Errorf("the %s body does not show the name as %q:\n%s", tc.sink, tc.shows, all)
			}
		})
	}
}
