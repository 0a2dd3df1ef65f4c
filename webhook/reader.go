package webhook

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/confighash/confighash"
)

// LiveReader reads sources from the API server, in parallel. Values live only while
// their digests are computed.
type LiveReader struct {
	client  kubernetes.Interface
	metrics Recorder
}

var _ SourceReader = (*LiveReader)(nil)

// NewLiveReader returns a reader that GETs every source.
func NewLiveReader(client kubernetes.Interface, metrics Recorder) *LiveReader {
	if metrics == nil {
		metrics = NoopRecorder{}
	}
	return &LiveReader{client: client, metrics: metrics}
}

// Read implements SourceReader. The trigger is not needed: a live read is current.
func (r *LiveReader) Read(ctx context.Context, namespace string, refs []confighash.SourceRef, _ []confighash.Trigger) (map[confighash.SourceRef]confighash.Source, error) {
	sources := make([]confighash.Source, len(refs))
	errs := make([]error, len(refs))
	var wg sync.WaitGroup
	for i, ref := range refs {
		wg.Go(func() { sources[i], errs[i] = r.get(ctx, namespace, ref) })
	}
	wg.Wait()
	out := make(map[confighash.SourceRef]confighash.Source, len(refs))
	for i, ref := range refs {
		if errs[i] != nil {
			return nil, errs[i]
		}
		out[ref] = sources[i]
	}
	return out, nil
}

func (r *LiveReader) get(ctx context.Context, namespace string, ref confighash.SourceRef) (confighash.Source, error) {
	r.metrics.SourceRead(ref.Kind, ReadFromLive)
	var src confighash.Source
	var err error
	switch ref.Kind {
	case confighash.ConfigMap:
		cm, e := r.client.CoreV1().ConfigMaps(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err = e; e == nil {
			src = confighash.SourceOfConfigMap(cm)
		}
	case confighash.Secret:
		s, e := r.client.CoreV1().Secrets(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err = e; e == nil {
			src = confighash.SourceOfSecret(s)
		}
	default:
		return src, fmt.Errorf("unknown source kind %q", ref.Kind)
	}
	if apierrors.IsNotFound(err) {
		return confighash.AbsentSource(ref), nil
	}
	if err != nil {
		return src, fmt.Errorf("read %s: %w", ref, err)
	}
	return src, nil
}
