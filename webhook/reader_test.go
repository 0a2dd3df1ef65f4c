package webhook

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
)

func TestAtLeast(t *testing.T) {
	tests := []struct {
		have, want string
		ok         bool
	}{
		{"10", "9", true}, {"10", "10", true}, {"9", "10", false},
		{"", "1", false}, {"abc", "1", false}, {"5", "", false},
	}
	for _, tt := range tests {
		if got := atLeast(tt.have, tt.want); got != tt.ok {
			t.Errorf("atLeast(%q, %q) = %v, want %v", tt.have, tt.want, got, tt.ok)
		}
	}
}

func TestCachedReaderReadsLiveWhereTheCacheDoesNotWatch(t *testing.T) {
	client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "cfg", ResourceVersion: "3"}, Data: map[string]string{"k": "v"}})
	sources := sourcecache.New(client, []string{"watched"}, sourcecache.Filter{}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	reader := NewCachedReader(sources, NewLiveReader(client, sourcecache.Filter{}, nil, nil), nil, nil)
	go func() { _ = sources.Run(ctx) }()
	if !sources.WaitSynced(ctx) {
		t.Fatal("cache not synced")
	}
	ref := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}
	got, err := reader.Read(ctx, "other", []confighash.SourceRef{ref}, []confighash.Trigger{{SourceRef: confighash.SourceRef{Kind: confighash.Secret, Name: "x"}, ResourceVersion: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if !got[ref].Present {
		t.Fatal("a ConfigMap in a namespace the cache does not watch was taken as absent; want it read live")
	}
}

func TestCachedReaderProvesTheCacheWithTheListedVersions(t *testing.T) {
	cm := func(name, rv string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}, Data: map[string]string{"k": rv}}
	}
	listed := func(name, rv string) runtime.Object {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
	}
	// The cache holds current, behind (the list has a newer version) and deleted (the
	// list no longer has it); absent is in neither.
	client := fake.NewClientset(cm("current", "5"), cm("behind", "5"), cm("deleted", "5"))
	reader, rec := cachedReader(t, client, listed("current", "5"), listed("behind", "6"))
	ctx := t.Context()
	ref := func(name string) confighash.SourceRef {
		return confighash.SourceRef{Kind: confighash.ConfigMap, Name: name}
	}
	refs := []confighash.SourceRef{ref("current"), ref("behind"), ref("deleted"), ref("absent")}
	got, err := reader.Read(ctx, "ns", refs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !got[ref("current")].Present || !got[ref("behind")].Present {
		t.Error("current or behind read as absent")
	}
	if got[ref("deleted")].Present || got[ref("absent")].Present {
		t.Error("a source the consistent list does not hold was read as present")
	}
	if n := testutil.ToFloat64(rec.reads.WithLabelValues("ConfigMap", ReadFromLive)); n != 1 {
		t.Errorf("live reads = %v, want 1: only the source the cache holds at an older version than listed", n)
	}
	if n := testutil.ToFloat64(rec.reads.WithLabelValues("ConfigMap", ReadFromCache)); n != 3 {
		t.Errorf("cache reads = %v, want 3", n)
	}
}

func TestCachedReaderWaitsForTheCacheToCatchUp(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "late", ResourceVersion: "5"}, Data: map[string]string{"k": "old"}}
	client := fake.NewClientset(cm)
	// The API server has version 6 already; the cache still holds 5.
	reader, rec := cachedReader(t, client, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "late", ResourceVersion: "6"}})
	ctx := t.Context()
	ref := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "late"}
	updated := cm.DeepCopy()
	updated.ResourceVersion, updated.Data["k"] = "6", "new"
	go func() {
		time.Sleep(20 * time.Millisecond) // while the read waits
		_, _ = client.CoreV1().ConfigMaps("ns").Update(ctx, updated, metav1.UpdateOptions{})
	}()
	start := time.Now()
	got, err := reader.Read(ctx, "ns", []confighash.SourceRef{ref}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Woken by the store, not by the end of the wait, which would look once more.
	if took := time.Since(start); took >= catchUpTimeout {
		t.Errorf("the read took %v, the whole catch-up wait: the cache's store did not wake it", took)
	}
	if want := confighash.SourceOfConfigMap(updated); !got[ref].Equal(want) {
		t.Errorf("read %+v, want %+v: the version the API server has", got[ref], want)
	}
	if n := testutil.ToFloat64(rec.reads.WithLabelValues("ConfigMap", ReadFromCache)); n != 1 {
		t.Errorf("cache reads = %v, want 1: the cache caught up within the wait", n)
	}
	if n := testutil.ToFloat64(rec.reads.WithLabelValues("ConfigMap", ReadFromLive)); n != 0 {
		t.Errorf("live reads = %v, want 0", n)
	}
}

// cachedReader returns a CachedReader over a synced cache of client, which proves the
// cache with the versions listed, and its recorder.
func cachedReader(t *testing.T, client *fake.Clientset, listed ...runtime.Object) (*CachedReader, *PrometheusRecorder) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	meta := metadatafake.NewSimpleMetadataClient(scheme, listed...)
	sources := sourcecache.New(client, nil, sourcecache.Filter{}, nil)
	rec, err := NewPrometheusRecorder(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	reader := NewCachedReader(sources, NewLiveReader(client, sourcecache.Filter{}, rec, nil), NewVersions(meta, sourcecache.Filter{}, 5*time.Second, rec), rec)
	go func() { _ = sources.Run(t.Context()) }()
	if !sources.WaitSynced(t.Context()) {
		t.Fatal("cache not synced")
	}
	return reader, rec
}
