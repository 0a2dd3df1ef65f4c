package bounded

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

var secrets = Resource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Namespace: "team"}

// server answers a list of secrets in team from items, n per page as the limit asks,
// with the metadata alone when asked for it (unless whole), and a GET of one by name.
type server struct {
	items  []corev1.Secret
	whole  bool // answers the metadata's media type with whole objects
	status int  // answers every request with this status, when set
	asked  []string
}

func (s *server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	s.asked = append(s.asked, r.URL.Path+"?"+r.URL.RawQuery+" "+r.Header.Get("Accept"))
	if s.status != 0 {
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(s.status)
		_ = json.NewEncoder(rw).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Code: int32(s.status), Reason: metav1.StatusReason(http.StatusText(s.status))})
		return
	}
	meta := strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadata") && !s.whole
	if name, ok := strings.CutPrefix(r.URL.Path, "/api/v1/namespaces/team/secrets/"); ok {
		for _, item := range s.items {
			if item.Name == name {
				if meta {
					_ = json.NewEncoder(rw).Encode(metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}, ObjectMeta: item.ObjectMeta})
				} else {
					_ = json.NewEncoder(rw).Encode(item)
				}
				return
			}
		}
		rw.WriteHeader(http.StatusNotFound)
		return
	}
	from, _ := strconv.Atoi(r.URL.Query().Get("continue"))
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	to := min(len(s.items), from+limit)
	out := map[string]any{"kind": "SecretList", "apiVersion": "v1"}
	list := metav1.ListMeta{}
	if to < len(s.items) {
		list.Continue = strconv.Itoa(to)
	}
	out["metadata"] = list
	if meta {
		out["kind"], out["apiVersion"] = "PartialObjectMetadataList", "meta.k8s.io/v1"
		var items []metav1.PartialObjectMetadata
		for _, item := range s.items[from:to] {
			items = append(items, metav1.PartialObjectMetadata{ObjectMeta: item.ObjectMeta})
		}
		out["items"] = items
	} else {
		out["items"] = s.items[from:to]
	}
	_ = json.NewEncoder(rw).Encode(out)
}

func serve(t *testing.T, s *server) *Reader {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	client, err := rest.RESTClientFor(&rest.Config{Host: srv.URL, APIPath: "/api", ContentConfig: rest.ContentConfig{
		GroupVersion: &schema.GroupVersion{Version: "v1"}, NegotiatedSerializer: scheme.Codecs.WithoutConversion(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	return New(client)
}

// secretsOf returns n Secrets of size bytes of data each.
func secretsOf(n, size int) []corev1.Secret {
	out := make([]corev1.Secret, n)
	for i := range out {
		out[i] = corev1.Secret{TypeMeta: metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%03d", i), Namespace: "team"}, Data: map[string][]byte{"k": make([]byte, size)}}
	}
	return out
}

func TestListsInPagesWithinTheLimits(t *testing.T) {
	big := Limits{Page: 3, PageBytes: 1 << 20, Items: 100, Bytes: 1 << 20}
	tests := []struct {
		name    string
		items   []corev1.Secret
		whole   bool
		lim     Limits
		want    int // items, or -1 for ErrExceeded
		wantErr string
	}{
		{"a list in several pages is read whole", secretsOf(10, 10), false, big, 10, ""},
		{"a list of exactly as many items as allowed is read", secretsOf(9, 10), false, Limits{Page: 3, PageBytes: 1 << 20, Items: 9, Bytes: 1 << 20}, 9, ""},
		{"a list of one item more than allowed is refused", secretsOf(10, 10), false, Limits{Page: 3, PageBytes: 1 << 20, Items: 9, Bytes: 1 << 20}, -1, ""},
		{"a page of more bytes than a page may hold is refused", secretsOf(3, 2000), false, Limits{Page: 3, PageBytes: 4000, Items: 100, Bytes: 1 << 20}, -1, ""},
		{"pages of more bytes in all than allowed are refused", secretsOf(9, 2000), false, Limits{Page: 1, PageBytes: 4000, Items: 100, Bytes: 10000}, -1, ""},
		{"metadata is small where the data is not", secretsOf(9, 100000), false, Limits{Page: 3, PageBytes: 4000, Items: 100, Bytes: 10000}, 9, ""},
		{"whole objects sent for metadata are refused", secretsOf(2, 10), true, big, 0, "not the metadata alone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := serve(t, &server{items: tt.items, whole: tt.whole})
			var got []metav1.PartialObjectMetadata
			var err error
			if strings.HasPrefix(tt.name, "metadata") || tt.whole {
				got, err = List[metav1.PartialObjectMetadata](t.Context(), r, secrets, metav1.ListOptions{}, tt.lim)
			} else {
				var whole []corev1.Secret
				whole, err = List[corev1.Secret](t.Context(), r, secrets, metav1.ListOptions{}, tt.lim)
				for _, s := range whole {
					got = append(got, metav1.PartialObjectMetadata{ObjectMeta: s.ObjectMeta})
				}
			}
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
				}
			case tt.want < 0:
				if !errors.Is(err, ErrExceeded) || got != nil {
					t.Fatalf("got %d items and error %v, want none and ErrExceeded", len(got), err)
				}
			case err != nil:
				t.Fatal(err)
			case len(got) != tt.want || got[len(got)-1].Name != tt.items[len(tt.items)-1].Name:
				t.Fatalf("got %d items, want %d", len(got), tt.want)
			}
		})
	}
}

func TestAPageOverItsBoundIsNeverGiven(t *testing.T) {
	s := &server{items: secretsOf(6, 2000)}
	r := serve(t, s)
	var pages int
	err := Each(t.Context(), r, secrets, metav1.ListOptions{LabelSelector: "a=b"}, Limits{Page: 2, PageBytes: 3000, Items: 10, Bytes: 1 << 20},
		func([]corev1.Secret) error { pages++; return nil })
	if !errors.Is(err, ErrExceeded) || pages != 0 {
		t.Fatalf("%d pages given, error %v; want none and ErrExceeded", pages, err)
	}
	if len(s.asked) != 1 || !strings.Contains(s.asked[0], "labelSelector=a%3Db") || !strings.Contains(s.asked[0], "limit=2") {
		t.Fatalf("asked %q, want one request with the selector and a limit of 2", s.asked)
	}
}

func TestGetReadsOneObjectWithinItsCap(t *testing.T) {
	s := &server{items: secretsOf(2, 1000)}
	r := serve(t, s)
	got, err := Get[corev1.Secret](t.Context(), r, secrets, "s001", 4000)
	if err != nil || got.Name != "s001" || len(got.Data["k"]) != 1000 {
		t.Fatalf("got %v, %v; want s001 and its data", got, err)
	}
	if _, err := Get[corev1.Secret](t.Context(), r, secrets, "s001", 1000); !errors.Is(err, ErrExceeded) {
		t.Fatalf("a Secret over the cap: error %v, want ErrExceeded", err)
	}
	meta, err := Get[metav1.PartialObjectMetadata](t.Context(), r, secrets, "s001", 1000)
	if err != nil || meta.Name != "s001" {
		t.Fatalf("its metadata: %v, %v", meta, err)
	}
	if !strings.HasSuffix(s.asked[len(s.asked)-1], "as=PartialObjectMetadata;g=meta.k8s.io;v=v1") {
		t.Fatalf("asked %q, want the metadata's media type", s.asked[len(s.asked)-1])
	}
	if _, err := Get[corev1.Secret](t.Context(), r, secrets, "none", 1000); !apierrors.IsNotFound(err) {
		t.Fatalf("a Secret that does not exist: error %v, want not found", err)
	}
}

func TestTheAPIServersErrorsAreKept(t *testing.T) {
	r := serve(t, &server{status: http.StatusGone})
	_, err := List[metav1.PartialObjectMetadata](t.Context(), r, secrets, metav1.ListOptions{}, Limits{Page: 1, PageBytes: 1000, Items: 1, Bytes: 1000})
	if !apierrors.IsGone(err) && !apierrors.IsResourceExpired(err) {
		t.Fatalf("error %v, want the API server's Gone", err)
	}
}

func TestAReaderWithoutAClientRefuses(t *testing.T) {
	var none *rest.RESTClient
	if _, err := Get[corev1.Secret](t.Context(), New(none), secrets, "s", 10); err == nil {
		t.Fatal("a reader without a REST client read")
	}
}
