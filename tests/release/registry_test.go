package release

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// registry is an OCI distribution registry in memory, on 127.0.0.1, with what crane
// push and helm push and pull ask of one: blobs uploaded in one PUT or in PATCHes,
// manifests by tag and by digest, no authentication. Plain HTTP: the clients are told
// so (helm --plain-http; crane's --insecure).
type registry struct {
	mu        sync.Mutex
	blobs     map[string][]byte // by digest
	manifests map[string]stored // by repository and tag or digest: "repo@ref"
	uploads   map[string]*bytes.Buffer
	next      int
}

type stored struct {
	mediaType string
	body      []byte
}

var (
	blobPath     = regexp.MustCompile(`^/v2/(.+)/blobs/(sha256:[0-9a-f]{64})$`)
	uploadsPath  = regexp.MustCompile(`^/v2/(.+)/blobs/uploads/$`)
	uploadPath   = regexp.MustCompile(`^/v2/(.+)/blobs/uploads/([0-9]+)$`)
	manifestPath = regexp.MustCompile(`^/v2/(.+)/manifests/([^/]+)$`)
)

// serveRegistry starts a registry until the test ends and returns its host:port.
func serveRegistry(t *testing.T) (*registry, string) {
	t.Helper()
	r := &registry{blobs: map[string][]byte{}, manifests: map[string]stored{}, uploads: map[string]*bytes.Buffer{}}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, strings.TrimPrefix(srv.URL, "http://")
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (r *registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	path := req.URL.Path
	switch {
	case path == "/v2/" || path == "/v2":
		w.WriteHeader(http.StatusOK)
	case uploadsPath.MatchString(path) && req.Method == http.MethodPost:
		r.next++
		id := strconv.Itoa(r.next)
		r.uploads[id] = &bytes.Buffer{}
		w.Header().Set("Location", fmt.Sprintf("/v2/%s/blobs/uploads/%s", uploadsPath.FindStringSubmatch(path)[1], id))
		w.Header().Set("Range", "0-0")
		w.WriteHeader(http.StatusAccepted)
	case uploadPath.MatchString(path):
		sub := uploadPath.FindStringSubmatch(path)
		buf := r.uploads[sub[2]]
		if buf == nil {
			http.Error(w, "no such upload", http.StatusNotFound)
			return
		}
		if _, err := io.Copy(buf, req.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch req.Method {
		case http.MethodPatch:
			w.Header().Set("Location", path)
			w.Header().Set("Range", fmt.Sprintf("0-%d", max(buf.Len()-1, 0)))
			w.WriteHeader(http.StatusAccepted)
		case http.MethodPut:
			want := req.URL.Query().Get("digest")
			if digestOf(buf.Bytes()) != want {
				http.Error(w, "digest mismatch", http.StatusBadRequest)
				return
			}
			r.blobs[want] = bytes.Clone(buf.Bytes())
			delete(r.uploads, sub[2])
			w.Header().Set("Location", fmt.Sprintf("/v2/%s/blobs/%s", sub[1], want))
			w.WriteHeader(http.StatusCreated)
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
	case blobPath.MatchString(path):
		b, ok := r.blobs[blobPath.FindStringSubmatch(path)[2]]
		if !ok {
			http.Error(w, "blob unknown", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Header().Set("Docker-Content-Digest", digestOf(b))
		if req.Method == http.MethodGet {
			_, _ = w.Write(b)
		}
	case manifestPath.MatchString(path):
		sub := manifestPath.FindStringSubmatch(path)
		switch req.Method {
		case http.MethodPut:
			body, err := io.ReadAll(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			s := stored{req.Header.Get("Content-Type"), body}
			digest := digestOf(body)
			r.manifests[sub[1]+"@"+sub[2]] = s
			r.manifests[sub[1]+"@"+digest] = s
			w.Header().Set("Docker-Content-Digest", digest)
			w.WriteHeader(http.StatusCreated)
		case http.MethodGet, http.MethodHead:
			s, ok := r.manifests[sub[1]+"@"+sub[2]]
			if !ok {
				http.Error(w, "manifest unknown", http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", s.mediaType)
			w.Header().Set("Content-Length", strconv.Itoa(len(s.body)))
			w.Header().Set("Docker-Content-Digest", digestOf(s.body))
			if req.Method == http.MethodGet {
				_, _ = w.Write(s.body)
			}
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
	default:
		http.Error(w, "not found", http.StatusNotFound)
	}
}

// manifest returns the manifest stored in repo under ref, a tag or a digest.
func (r *registry) manifest(repo, ref string) (stored, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.manifests[repo+"@"+ref]
	return s, ok
}
