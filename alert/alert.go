// Package alert tells people what the watcher did: when it rolls workloads, heals one,
// or fails to, it posts a message to a chat or a webhook. One change that reaches many
// workloads gives one message, and sending never holds up the watcher.
package alert

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// What is what happened to the workloads of an alert.
type What string

// What the watcher reports.
const (
	Rolled What = "rolled" // the webhook wrote a new hash: the workloads roll
	Healed What = "healed" // the webhook did not converge; the watcher wrote the hash
	Failed What = "failed" // the watcher could not write the hash either
	Halted What = "halted" // a wave's workload failed to roll out: the rest of the wave is held
	Held   What = "held"   // a source keeps changing: its users are held at their current revision
	// Reverted: a wave's workload failed to roll out, and was rolled back to the
	// revision it ran before the change, with its data.
	Reverted What = "reverted"
)

// Object names a workload or a source.
type Object struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// ResourceVersion is the version of a source that triggered the change.
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

func (o Object) String() string {
	if o.ResourceVersion != "" {
		return o.Kind + "/" + o.Name + "@" + o.ResourceVersion
	}
	return o.Kind + "/" + o.Name
}

// Event is one workload the watcher acted on, and the source changes that caused it.
type Event struct {
	What      What
	Namespace string
	Workload  Object
	Sources   []Object
	// Reason says why, for Healed, Failed, Halted, Held and Reverted.
	Reason string
}

// Sink is where alerts go.
type Sink string

// The sinks.
const (
	Slack   Sink = "slack"   // a Slack incoming webhook
	Teams   Sink = "teams"   // a Microsoft Teams Workflows webhook: Adaptive Cards
	GChat   Sink = "gchat"   // a Google Chat space webhook
	Webhook Sink = "webhook" // any HTTP endpoint: the JSON body of Alert
)

// Sinks lists every sink.
var Sinks = []Sink{Slack, Teams, GChat, Webhook}

// Config configures a Notifier.
type Config struct {
	Sink Sink
	// URL receives the alerts. It may hold a secret token: it is never logged.
	URL string
	// Proxy, when set, is the HTTP proxy to send through.
	Proxy string
	// Cluster names the cluster in every alert.
	Cluster string
	// AdditionalInfo is added to every alert.
	AdditionalInfo string
	// Quiet is how long a batch waits for more workloads of the same change before it
	// is sent; MaxWait bounds how long it can be held. Defaults: 2 s and 30 s.
	Quiet, MaxWait time.Duration
	// MaxWorkloads is how many workloads an alert names before "and N more"; 20.
	MaxWorkloads int
	// Queue is how many alerts may wait to be sent; 64. Beyond it those of the
	// namespace with the most waiting are dropped.
	Queue int
	// Timeout bounds each request; 10 s. Attempts bounds the tries of one alert on a
	// 429 or a 5xx; 3.
	Timeout  time.Duration
	Attempts int
	// Drain bounds how long Run keeps sending, after its context is done, the alerts
	// batched or queued then: a restart must not lose the alert of what it did; 5 s.
	Drain   time.Duration
	Metrics Recorder
	Log     zerolog.Logger
}

func (c *Config) defaults() error {
	if !slices.Contains(Sinks, c.Sink) {
		return fmt.Errorf("unknown alert sink %q: want one of slack, teams, gchat, webhook", c.Sink)
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return errors.New("the alert webhook URL is not an http(s) URL") // the URL itself may be secret
	}
	if c.Proxy != "" {
		if p, err := url.Parse(c.Proxy); err != nil || p.Host == "" {
			return errors.New("the alert proxy is not a URL")
		}
	}
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&c.Quiet, 2*time.Second)
	set(&c.MaxWait, 30*time.Second)
	set(&c.Timeout, 10*time.Second)
	set(&c.Drain, 5*time.Second)
	for _, n := range []struct {
		p *int
		v int
	}{{&c.MaxWorkloads, 20}, {&c.Queue, 64}, {&c.Attempts, 3}} {
		if *n.p <= 0 {
			*n.p = n.v
		}
	}
	if c.Metrics == nil {
		c.Metrics = NoopRecorder{}
	}
	return nil
}

// Alert is one message: what happened to which workloads of a namespace, and why. It
// is also the JSON body the webhook sink posts.
type Alert struct {
	What      What     `json:"what"`
	Cluster   string   `json:"cluster,omitempty"`
	Namespace string   `json:"namespace"`
	Sources   []Object `json:"sources"`
	Workloads []Object `json:"workloads"`
	// More counts the workloads left out of Workloads.
	More           int       `json:"more"`
	Reason         string    `json:"reason,omitempty"`
	AdditionalInfo string    `json:"additionalInfo,omitempty"`
	Explain        string    `json:"explain"`
	Time           time.Time `json:"time"`
}

// batch gathers the events of one change.
type batch struct {
	alert       Alert
	seen        map[Object]bool
	first, last time.Time
}

// Notifier batches events into alerts and sends them.
type Notifier struct {
	cfg    Config
	client *http.Client
	queue  *queue

	mu       sync.Mutex
	batches  map[string]*batch
	dropping bool // a drop was logged and no alert was queued since
}

// New returns a Notifier; Run sends.
func New(cfg Config) (*Notifier, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.Proxy != "" {
		proxy, _ := url.Parse(cfg.Proxy)
		transport.Proxy = http.ProxyURL(proxy)
	}
	return &Notifier{
		cfg:     cfg,
		client:  &http.Client{Transport: transport, Timeout: cfg.Timeout},
		queue:   newQueue(cfg.Queue),
		batches: map[string]*batch{},
	}, nil
}

// Notify adds an event to the alert of its change. It never blocks on sending.
func (n *Notifier) Notify(e Event) {
	sources := slices.Clone(e.Sources)
	slices.SortFunc(sources, func(a, b Object) int { return strings.Compare(a.String(), b.String()) })
	names := make([]string, len(sources))
	for i, s := range sources {
		names[i] = s.String()
	}
	key := string(e.What) + " " + e.Namespace + " " + strings.Join(names, ",") + " " + e.Reason
	now := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	b, ok := n.batches[key]
	if !ok {
		b = &batch{alert: Alert{
			What: e.What, Cluster: n.cfg.Cluster, Namespace: e.Namespace, Sources: sources,
			Reason: e.Reason, AdditionalInfo: n.cfg.AdditionalInfo,
		}, seen: map[Object]bool{}, first: now}
		n.batches[key] = b
	}
	b.last = now
	if b.seen[e.Workload] {
		return
	}
	b.seen[e.Workload] = true
	if len(b.alert.Workloads) < n.cfg.MaxWorkloads {
		b.alert.Workloads = append(b.alert.Workloads, e.Workload)
	} else {
		b.alert.More++
	}
}

// Run flushes the batches that are complete and sends them, until ctx is done; then
// it sends what is batched or queued, for at most Drain.
func (n *Notifier) Run(ctx context.Context) error {
	sendCtx, stopSending := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSending()
	stopping, sent := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sent)
		n.send(sendCtx, stopping)
	}()
	tick := time.NewTicker(n.cfg.Quiet / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			n.flush(time.Now().Add(n.cfg.MaxWait)) // every batch
			close(stopping)
			select {
			case <-sent:
			case <-time.After(n.cfg.Drain):
				stopSending()
				<-sent
			}
			return nil
		case now := <-tick.C:
			n.flush(now)
		}
	}
}

// flush queues the batches that had no event for Quiet, or were held for MaxWait.
func (n *Notifier) flush(now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for key, b := range n.batches {
		if now.Sub(b.last) < n.cfg.Quiet && now.Sub(b.first) < n.cfg.MaxWait {
			continue
		}
		delete(n.batches, key)
		a := b.alert
		a.Time = now.UTC()
		a.Explain = explainCommand(a)
		dropped := n.queue.push(a)
		if dropped == nil {
			n.dropping = false
			continue
		}
		n.cfg.Metrics.Dropped(n.cfg.Sink)
		if !n.dropping {
			n.dropping = true
			n.cfg.Log.Warn().Str("sink", string(n.cfg.Sink)).Int("queue", n.cfg.Queue).Str("namespace", dropped.Namespace).
				Msg("alerts dropped: the sink is slower than the changes of the namespace with the most alerts waiting; counted in confighash_alerts_dropped_total")
		}
	}
}

// explainCommand is what the reader can run to see more.
func explainCommand(a Alert) string {
	if len(a.Workloads) == 1 && a.More == 0 {
		w := a.Workloads[0]
		return fmt.Sprintf("confighash explain %s/%s -n %s", strings.ToLower(w.Kind), w.Name, a.Namespace)
	}
	return "confighash explain -n " + a.Namespace
}
