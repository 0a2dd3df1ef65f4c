package webhook

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/rs/zerolog"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
	"github.com/confighash/confighash/watches"
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
	sources := newSources(t, client, "watched")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	reader := NewCachedReader(sources, NewLiveReader(client, watches.Door{}, sourcecache.Filter{}, nil, nil), nil, nil)
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
	reader, rec, _ := cachedReaderWithMeta(t, client, listed...)
	return reader, rec
}

// cachedReaderWithMeta is cachedReader, with the metadata client the versions come from.
func cachedReaderWithMeta(t *testing.T, client *fake.Clientset, listed ...runtime.Object) (*CachedReader, *PrometheusRecorder, *metadatafake.FakeMetadataClient) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	meta := metadatafake.NewSimpleMetadataClient(scheme, listed...)
	sources := newSources(t, client)
	rec, err := NewPrometheusRecorder(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	reader := NewCachedReader(sources, NewLiveReader(client, watches.Door{}, sourcecache.Filter{}, rec, nil), NewVersions(meta, watches.Door{}, sourcecache.Filter{}, 5*time.Second, rec), rec)
	go func() { _ = sources.Run(t.Context()) }()
	if !sources.WaitSynced(t.Context()) {
		t.Fatal("cache not synced")
	}
	return reader, rec, meta
}

// TestNamePatternsAreMatchedAgainstTheCacheWithoutAList (issue 41): the names a
// pattern is matched against come from the cache, never a list per admission; the
// sources they match are then proven current as any other, by a version GET each.
func TestNamePatternsAreMatchedAgainstTheCacheWithoutAList(t *testing.T) {
	secret := func(name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "5",
			Annotations: map[string]string{"large": strings.Repeat("x", 1<<10)}}, Data: map[string][]byte{"k": []byte(name)}}
	}
	listed := func(name string) runtime.Object {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "5"}}
	}
	client := fake.NewClientset(secret("s-1"), secret("s-2"), secret("other"))
	reader, rec, meta := cachedReaderWithMeta(t, client, listed("s-1"), listed("s-2"), listed("other"))
	var lists atomic.Int32
	meta.PrependReactor("list", "*", func(clienttesting.Action) (bool, runtime.Object, error) {
		lists.Add(1)
		return false, nil, nil
	})
	names, err := reader.Names(t.Context(), "ns", confighash.Secret)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"other", "s-1", "s-2"}) {
		t.Errorf("names %q, want the cache's three", names)
	}
	// Through an admission: a Deployment that reloads with s.* hashes s-1 and s-2,
	// each proven current by one version GET.
	key, _ := confighash.NewKey(bytes.Repeat([]byte{1}, 32))
	h, err := NewHandler(newMutator(t, Config{Key: key, Vocabulary: confighash.Vocabulary{Reloader: true}, Reader: reader, Metrics: rec}), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	object := strings.Replace(deploymentJSON, "%s", `"`+confighash.ReloaderSecretReload+`":"s-.*"`, 1)
	resp := decodeResponse(t, post(h, "application/json", review(object)))
	if len(jsonPatch(t, resp)) == 0 {
		t.Fatalf("not hashed; warnings %q", resp.Warnings)
	}
	if n := lists.Load(); n != 0 {
		t.Errorf("%d lists, want none: the names are the cache's", n)
	}
	if n := testutil.ToFloat64(rec.versions.WithLabelValues("Secret")); n != 2 {
		t.Errorf("version GETs of Secrets = %v, want 2: s-1 and s-2, proven current", n)
	}
}

// everywhere is a gate that knows no namespace: the door reads every one whole.
type everywhere struct{}

func (everywhere) Known(string) bool           { return false }
func (everywhere) Mode(string) confighash.Mode { return confighash.ModeOff }
func (everywhere) HasSynced() bool             { return true }

// newSources is a cache of the sources of the namespaces, or of every one.
func newSources(tb testing.TB, client kubernetes.Interface, namespaces ...string) *sourcecache.Cache {
	tb.Helper()
	c, err := sourcecache.New(client, watches.Door{Namespaces: namespaces, Gate: everywhere{}}, sourcecache.Filter{}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
