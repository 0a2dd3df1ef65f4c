package alert

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// maxRetryAfter bounds how long a sink may ask to wait before a retry.
const maxRetryAfter = 30 * time.Second

// send posts the queued alerts one at a time until ctx is done, or, once stopping is
// closed, until none is queued.
func (n *Notifier) send(ctx context.Context, stopping <-chan struct{}) {
	for {
		a, ok := n.queue.pop()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-n.queue.ready:
				continue
			case <-stopping:
				if a, ok = n.queue.pop(); !ok {
					return
				}
			}
		}
		log := n.cfg.Log.With().Str("sink", string(n.cfg.Sink)).Str("what", string(a.What)).Str("namespace", a.Namespace).Logger()
		if err := n.post(ctx, a); err != nil {
			if ctx.Err() != nil {
				return
			}
			n.cfg.Metrics.Failed(n.cfg.Sink)
			log.Warn().Err(err).Msg("alert not sent")
			continue
		}
		n.cfg.Metrics.Sent(n.cfg.Sink)
		log.Debug().Int("workloads", len(a.Workloads)+a.More).Msg("alert sent")
	}
}

// errRetry is a response worth another try: a 429 or a 5xx.
type errRetry struct {
	status int
	after  time.Duration
}

func (e *errRetry) Error() string { return fmt.Sprintf("the sink answered %d", e.status) }

// post sends one alert, retrying with backoff on a 429 or a 5xx, as the sink's
// Retry-After asks when it does.
func (n *Notifier) post(ctx context.Context, a Alert) error {
	body, err := n.body(a)
	if err != nil {
		return err
	}
	backoff := time.Second
	for attempt := 1; ; attempt++ {
		err := n.once(ctx, body)
		var retry *errRetry
		if err == nil || !errors.As(err, &retry) || attempt == n.cfg.Attempts {
			return err
		}
		wait := backoff
		if retry.after > 0 {
			wait = min(retry.after, maxRetryAfter)
		}
		backoff *= 2
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

func (n *Notifier) once(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return errors.New("build the request") // its error would name the URL
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.client.Do(req)
	if err != nil {
		// url.Error names the URL, which may hold a token: keep only the cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("post: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return &errRetry{resp.StatusCode, retryAfter(resp.Header.Get("Retry-After"))}
	case resp.StatusCode >= 300:
		return fmt.Errorf("the sink answered %d", resp.StatusCode)
	}
	return nil
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}
