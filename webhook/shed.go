package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
)

// shedPrefixBytes is how much of a review shed by the bounds is read to find its uid,
// which the API server writes first: {"kind":...,"apiVersion":...,"request":{"uid":...
const shedPrefixBytes = 4 << 10

// Why an admission was shed, for metrics.
const (
	shedCount = "count"
	shedBytes = "bytes"
)

// limiter bounds the admissions in flight in the process, by count and by bytes, and
// shares them between namespaces: a namespace that has some in flight may take more
// only within its share, half of each bound while it is alone and less as others come,
// so that another's review always finds room. One namespace's users (30 dry runs of
// 1.4 MB pods filled the bytes) shed their own reviews, no other's. Not by user: the
// API server reviews what controllers make, for every namespace, as the controller's
// user. One limiter is shared by every path a Mutator serves.
type limiter struct {
	maxCount, maxBytes int64

	mu           sync.Mutex
	count, bytes int64
	// held is what each namespace has in flight ("" for cluster-scoped objects); a
	// namespace with none has no entry.
	held map[string]inFlight
}

type inFlight struct{ count, bytes int64 }

func newLimiter(count int, bytes int64) *limiter {
	return &limiter{maxCount: int64(count), maxBytes: bytes, held: map[string]inFlight{}}
}

// acquire takes a slot and weight bytes for a review of the namespace, without
// waiting; on failure it says which bound is full. A body of unknown length weighs
// the bytes' capacity, never more.
func (l *limiter) acquire(namespace string, weight int64) (release func(), full string) {
	weight = min(weight, l.maxBytes)
	l.mu.Lock()
	defer l.mu.Unlock()
	mine, holds := l.held[namespace]
	others := int64(len(l.held))
	if holds {
		others--
	}
	// Its share leaves room for one more namespace than hold any now; a namespace with
	// none in flight may always take one, within the bounds.
	switch {
	case l.count+1 > l.maxCount || holds && mine.count+1 > max(1, l.maxCount/(others+2)):
		return nil, shedCount
	case l.bytes+weight > l.maxBytes || holds && mine.bytes+weight > l.maxBytes/(others+2):
		return nil, shedBytes
	}
	l.count, l.bytes = l.count+1, l.bytes+weight
	l.held[namespace] = inFlight{mine.count + 1, mine.bytes + weight}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.count, l.bytes = l.count-1, l.bytes-weight
		if h := l.held[namespace]; h.count > 1 {
			l.held[namespace] = inFlight{h.count - 1, h.bytes - weight}
		} else {
			delete(l.held, namespace)
		}
	}, ""
}

// shed answers a review beyond the bounds on admissions in flight at once: allowed,
// unchanged, with a warning, from the uid found in the short prefix read of the body;
// or 429 when it is not there, which the API server, with failurePolicy Ignore, takes
// as allowed too. The rest of the body is never read.
func (g *guard) shed(w http.ResponseWriter, head reviewHead, full string) {
	g.metrics.Shed(full)
	if head.uid == "" {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many admissions at once", http.StatusTooManyRequests)
		return
	}
	// The body is not read to its end: close the connection rather than drain it.
	w.Header().Set("Connection", "close")
	says := "the watcher will update the hash"
	if head.resource == "pods" {
		// Its restarter cannot be added once it runs: say what a change of its data does
		// (watcher/catchup.go).
		says = "the pod gets no restarter: at the next change of its data, its Deployment, StatefulSet or DaemonSet rolls instead of restarting its pods in place " +
			"(a RollsToCatchUp Event on it), where another of its pods has a restarter; otherwise the pod restarts only when its workload next rolls"
	}
	answer(w, head.apiVersion, head.uid, []string{warningPrefix + "too many admissions at once in namespace " + head.namespace + ": allowed unchanged; " + says})
}

// reviewHead is what the first bytes of a review tell, before the rest is read: the
// API server writes its apiVersion, then the request's uid, resource and namespace,
// ahead of the objects.
type reviewHead struct {
	apiVersion, uid, resource, namespace string
}

// headOf reads what it can of a review's head from its first bytes, which may end
// anywhere.
func headOf(prefix []byte) reviewHead {
	var h reviewHead
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
	// says stop or the object or the prefix ends.
	members := func(f func(name string) (stop bool)) {
		if next() != json.Delim('{') {
			return
		}
		for {
			name, isName := next().(string)
			if !isName || f(name) {
				return
			}
		}
	}
	members(func(name string) bool {
		switch name {
		case "apiVersion":
			t := next()
			if v, ok := t.(string); ok {
				h.apiVersion = v
				return false
			}
			return !skip(t)
		case "request":
			members(func(name string) bool {
				switch name {
				case "uid":
					h.uid, _ = next().(string)
				case "resource":
					members(func(name string) bool {
						if name == "resource" {
							h.resource, _ = next().(string)
							return false
						}
						return !skip(next())
					})
				case "namespace":
					h.namespace, _ = next().(string)
					return true // what follows is not needed
				default:
					return !skip(next())
				}
				return false
			})
			return true
		}
		return !skip(next())
	})
	return h
}
