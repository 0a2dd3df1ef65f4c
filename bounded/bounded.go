// Package bounded reads from the API server with a cap on the bytes read before
// anything is decoded (rule 11). client-go reads a whole response before anything
// can look at it, and a tenant chooses what many responses hold: an object may be up to
// about 1.5 MiB (etcd's request limit), its annotations up to 256 KiB, and a namespace
// user may make as many as their quota allows. A list of a tenant's objects read the
// usual way costs the reader all of them at once. Here a list comes in small pages, each
// read through a cap, with caps on the items and bytes of all pages together, and a GET
// of one object has its own cap: a response over a cap is an error, never decoded, never
// truncated into a smaller answer.
package bounded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	sigsjson "sigs.k8s.io/json"
)

// ErrExceeded is in the error of a read that reached one of its bounds: what was read
// is dropped, and a list's caller must not take the pages it was given as the answer.
var ErrExceeded = errors.New("bound exceeded")

// The media types asked for: JSON, and the metadata alone (the API server strips the
// rest before it answers; it has served them since Kubernetes 1.15).
const (
	acceptJSON         = "application/json"
	acceptMetadata     = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
	acceptMetadataList = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
)

// Reader reads from one API server.
type Reader struct {
	client rest.Interface
}

// New returns a Reader that sends its requests through client, any of a clientset's
// REST clients (the path of each request is made here, whatever the client's group).
func New(client rest.Interface) *Reader { return &Reader{client: client} }

// Resource names what is read: a resource, in a namespace ("" for all, or for a
// cluster-scoped resource).
type Resource struct {
	schema.GroupVersionResource
	Namespace string
}

// path is the path of the resource's collection.
func (r Resource) path() string {
	p := "/apis/" + r.Group + "/" + r.Version
	if r.Group == "" {
		p = "/api/" + r.Version
	}
	if r.Namespace != "" {
		p += "/namespaces/" + r.Namespace
	}
	return p + "/" + r.Resource
}

func (r Resource) String() string {
	s := r.GroupResource().String()
	if r.Namespace != "" {
		s += " in " + r.Namespace
	}
	return s
}

// Limits bound one list.
type Limits struct {
	// Page is how many items one call asks for (the API server's limit).
	Page int64
	// PageBytes is how many bytes one call's response may hold.
	PageBytes int64
	// Items and Bytes bound all the pages together.
	Items int
	Bytes int64
}

// request starts a GET of the resource, with the media type asked for.
func (r *Reader) request(res Resource, accept string) (*rest.Request, error) {
	if c, ok := r.client.(*rest.RESTClient); r.client == nil || ok && c == nil {
		return nil, errors.New("no REST client to read with")
	}
	return r.client.Get().AbsPath(res.path()).SetHeader("Accept", accept), nil
}

// read sends the request and returns its response's body, at most max bytes of it.
func read(ctx context.Context, req *rest.Request, max int64) ([]byte, error) {
	body, err := req.Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(body, max+1))
	switch {
	case err != nil:
		return nil, err
	case n > max:
		return nil, fmt.Errorf("the response holds more than %d bytes: %w", max, ErrExceeded)
	}
	return buf.Bytes(), nil
}

// page is a page of a list, as the API server sends it.
type page[T any] struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ListMeta `json:"metadata"`
	Items           []T             `json:"items"`
}

// metadataOnly reports whether T is the metadata of an object, which is then asked for
// alone.
func metadataOnly[T any]() bool {
	_, ok := any((*T)(nil)).(*metav1.PartialObjectMetadata)
	return ok
}

// Each lists the resource a page at a time, within the limits, and gives each page to
// fn, until the list ends or fn returns an error. A T of metav1.PartialObjectMetadata
// lists the objects' metadata alone. A bound reached is an error wrapping ErrExceeded,
// after the pages before it were given: they are not the whole answer.
func Each[T any](ctx context.Context, r *Reader, res Resource, opts metav1.ListOptions, lim Limits, fn func([]T) error) error {
	if lim.Page <= 0 || lim.PageBytes <= 0 || lim.Items <= 0 || lim.Bytes <= 0 {
		return fmt.Errorf("list %s: limits must all be above 0: %+v", res, lim)
	}
	accept, want := acceptJSON, ""
	if metadataOnly[T]() {
		accept, want = acceptMetadataList, "PartialObjectMetadataList"
	}
	var items int
	var bytesRead int64
	for {
		// One more than may still be taken: an item beyond the bound is an error.
		opts.Limit = min(lim.Page, int64(lim.Items-items)+1)
		req, err := r.request(res, accept)
		if err != nil {
			return err
		}
		data, err := read(ctx, req.SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.SchemeGroupVersion), min(lim.PageBytes, lim.Bytes-bytesRead))
		if err != nil {
			return fmt.Errorf("list %s: %w", res, err)
		}
		bytesRead += int64(len(data))
		var p page[T]
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &p); err != nil {
			return fmt.Errorf("list %s: decode: %w", res, err)
		}
		if want != "" && (p.Kind != want || p.APIVersion != metav1.SchemeGroupVersion.String()) {
			return fmt.Errorf("list %s: the API server sent %s %s, not the metadata alone", res, p.APIVersion, p.Kind)
		}
		if items += len(p.Items); items > lim.Items || items == lim.Items && p.Metadata.Continue != "" {
			return fmt.Errorf("list %s: more than %d items: %w", res, lim.Items, ErrExceeded)
		}
		if err := fn(p.Items); err != nil {
			return err
		}
		if opts.Continue = p.Metadata.Continue; opts.Continue == "" {
			return nil
		}
		if bytesRead >= lim.Bytes {
			return fmt.Errorf("list %s: more than %d bytes: %w", res, lim.Bytes, ErrExceeded)
		}
	}
}

// List lists the resource within the limits, as Each, and returns all its items; on
// an error, none.
func List[T any](ctx context.Context, r *Reader, res Resource, opts metav1.ListOptions, lim Limits) ([]T, error) {
	var all []T
	err := Each(ctx, r, res, opts, lim, func(items []T) error {
		all = append(all, items...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return all, nil
}

// Get reads the named object of the resource, if its response holds at most max bytes,
// into a T; a T of metav1.PartialObjectMetadata reads its metadata alone.
func Get[T any](ctx context.Context, r *Reader, res Resource, name string, max int64) (*T, error) {
	accept, want := acceptJSON, ""
	if metadataOnly[T]() {
		accept, want = acceptMetadata, "PartialObjectMetadata"
	}
	req, err := r.request(res, accept)
	if err != nil {
		return nil, err
	}
	data, err := read(ctx, req.Name(name), max)
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", res, name, err)
	}
	obj := new(T)
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, obj); err != nil {
		return nil, fmt.Errorf("read %s %s: decode: %w", res, name, err)
	}
	if m, ok := any(obj).(*metav1.PartialObjectMetadata); ok && (m.Kind != want || m.APIVersion != metav1.SchemeGroupVersion.String()) {
		return nil, fmt.Errorf("read %s %s: the API server sent %s %s, not the metadata alone", res, name, m.APIVersion, m.Kind)
	}
	return obj, nil
}
