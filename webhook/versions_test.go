package webhook

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
)

func TestVersionsShareOnlyAGETSentAfterEachCaller(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	meta := metadatafake.NewSimpleMetadataClient(scheme)
	release := make(chan struct{})
	var mu sync.Mutex
	gets := 0
	meta.PrependReactor("get", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		gets++
		n := gets
		mu.Unlock()
		if n == 1 {
			<-release // the first GET is in flight while the others arrive
		}
		rv := map[int]string{1: "10", 2: "20"}[n]
		return true, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "ns", ResourceVersion: rv}}, nil
	})
	v := NewVersions(meta, sourcecache.Filter{}, 5*time.Second, nil)
	ref := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	results := make([]Version, 4)
	var wg sync.WaitGroup
	wg.Go(func() { results[0], _ = v.Get(ctx, "ns", ref) })
	waitUntil(t, func() bool { mu.Lock(); defer mu.Unlock(); return gets == 1 })
	for i := 1; i < 4; i++ {
		wg.Go(func() { results[i], _ = v.Get(ctx, "ns", ref) })
	}
	waitUntil(t, func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.calls[versionKey{"ns", ref}].next != nil
	})
	time.Sleep(10 * time.Millisecond) // let the three late callers all join the next GET
	close(release)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if gets != 2 {
		t.Errorf("%d GETs for 4 callers, want 2: the one in flight and one shared by those that came after it", gets)
	}
	if results[0].ResourceVersion != "10" {
		t.Errorf("first caller got version %q, want 10", results[0].ResourceVersion)
	}
	for i := 1; i < 4; i++ {
		if results[i].ResourceVersion != "20" {
			t.Errorf("caller %d, which came while the first GET was in flight, got version %q, want 20 from a GET sent after it", i, results[i].ResourceVersion)
		}
	}
	// The last GET's calls are forgotten just after it answers.
	waitUntil(t, func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		_, left := v.calls[versionKey{"ns", ref}]
		return !left
	})
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
	}
}
