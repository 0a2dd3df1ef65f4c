package webhook

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"golang.org/x/sync/semaphore"
)

// shedPrefixBytes is how much of a review shed by the bounds is read to find its uid,
// which the API server writes first: {"kind":...,"apiVersion":...,"request":{"uid":...
const shedPrefixBytes = 4 << 10

// Why an admission was shed, for metrics.
const (
	shedCount = "count"
	shedBytes = "bytes"
)

// limiter bounds the admissions in flight in the process, by count and by bytes. One
// is shared by every path a Mutator serves.
type limiter struct {
	count *semaphore.Weighted
	bytes *semaphore.Weighted
	// maxBytes is the bytes' capacity: a body of unknown length weighs MaxBodyBytes,
	// never more.
	maxBytes int64
}

func newLimiter(count int, bytes int64) *limiter {
	return &limiter{count: semaphore.NewWeighted(int64(count)), bytes: semaphore.NewWeighted(bytes), maxBytes: bytes}
}

// acquire takes a slot and weight bytes at once, without waiting; on failure it says
// which bound is full.
func (l *limiter) acquire(weight int64) (release func(), full string) {
	if !l.count.TryAcquire(1) {
		return nil, shedCount
	}
	weight = min(weight, l.maxBytes)
	if !l.bytes.TryAcquire(weight) {
		l.count.Release(1)
		return nil, shedBytes
	}
	return func() { l.bytes.Release(weight); l.count.Release(1) }, ""
}

// shed answers a review beyond the bounds on admissions in flight at once: allowed,
// unchanged, with a warning, from the uid found in a short prefix of the body; or 429
// when it is not there, which the API server, with failurePolicy Ignore, takes as
// allowed too. The rest of the body is never read.
func (g *guard) shed(w http.ResponseWriter, r *http.Request, full string) {
	g.metrics.Shed(full)
	prefix := make([]byte, shedPrefixBytes)
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyReadTimeout))
	n, _ := io.ReadFull(r.Body, prefix)
	apiVersion, uid, ok := uidInPrefix(prefix[:n])
	if !ok {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many admissions at once", http.StatusTooManyRequests)
		return
	}
	// The body is not read to its end: close the connection rather than drain it.
	w.Header().Set("Connection", "close")
	answer(w, apiVersion, uid, []string{warningPrefix + "too many admissions at once: allowed unchanged; the watcher will update the hash"})
}

// uidInPrefix finds the review's apiVersion, if it comes first, and request.uid in
// the first bytes of a review, which may end anywhere.
func uidInPrefix(prefix []byte) (apiVersion, uid string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	type end struct{} // the prefix ends, or is not JSON; a JSON null is nil
	next := func() json.Token {
		t, err := dec.Token()
		if err != nil {
			return end{}
		}
		return t
	}
	// skip skips a value whose first token is t.
	skip := func(t json.Token) bool {
		for depth := 0; ; t = next() {
			switch t {
			case end{}:
				return false
			case json.Delim('{'), json.Delim('['):
				depth++
			case json.Delim('}'), json.Delim(']'):
				depth--
			}
			if depth == 0 {
				return true
			}
		}
	}
	// members calls f with each member's name of the object that starts now, until f
	// says stop or the prefix ends.
	members := func(f func(name string) (stop bool)) bool {
		if next() != json.Delim('{') {
			return false
		}
		for {
			name, isName := next().(string)
			if !isName {
				return false
			}
			if f(name) {
				return true
			}
		}
	}
	found := members(func(name string) bool {
		switch name {
		case "apiVersion":
			t := next()
			if s, ok := t.(string); ok {
				apiVersion = s
				return false
			}
			return !skip(t)
		case "request":
			members(func(name string) bool {
				if name == "uid" {
					uid, _ = next().(string)
					return true
				}
				return !skip(next())
			})
			return true
		}
		return !skip(next())
	})
	return apiVersion, uid, found && uid != ""
}
