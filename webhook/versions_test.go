package webhook

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
	"github.com/confighash/confighash/watches"
)

func TestVersionsShareOnlyARoundSentAfterEachCaller(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	meta := metadatafake.NewSimpleMetadataClient(scheme)
	release := make(chan struct{})
	var mu sync.Mutex
	gets := map[string]int{}
	meta.PrependReactor("get", "configmaps", func(action clienttesting.Action) (bool, runtime.Object, error) {
		name := action.(clienttesting.GetAction).GetName()
		mu.Lock()
		gets[name]++
		n := gets[name]
		first := len(gets) == 1 && n == 1
		mu.Unlock()
		if first {
			<-release // the first round is in flight while the others arrive
		}
		rv := fmt.Sprintf("%s-%d", name, n)
		return true, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: rv}}, nil
	})
	v := NewVersions(meta, watches.Door{}, sourcecache.Filter{}, 5*time.Second, nil)
	ref := func(name string) confighash.SourceRef {
		return confighash.SourceRef{Kind: confighash.ConfigMap, Name: name}
	}
	cfg, other := ref("cfg"), ref("other")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	wants := [][]confighash.SourceRef{{cfg}, {cfg}, {cfg, other}, {other}}
	results := make([]map[confighash.SourceRef]Version, len(wants))
	var wg sync.WaitGroup
	wg.Go(func() { results[0], _ = v.Get(ctx, "ns", wants[0]) })
	waitUntil(t, func() bool { mu.Lock(); defer mu.Unlock(); return gets["cfg"] == 1 })
	for i := 1; i < len(wants); i++ {
		wg.Go(func() { results[i], _ = v.Get(ctx, "ns", wants[i]) })
	}
	waitUntil(t, func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		next := v.next["ns"]
		return next != nil && len(next.refs) == 2
	})
	time.Sleep(10 * time.Millisecond) // let the three late callers all join the next round
	close(release)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if gets["cfg"] != 2 || gets["other"] != 1 {
		t.Errorf("GETs = %v for 4 callers, want cfg 2 and other 1: the round in flight and one shared by those that came after it", gets)
	}
	if got := results[0][cfg].ResourceVersion; got != "cfg-1" {
		t.Errorf("first caller got version %q, want cfg-1", got)
	}
	for i := 1; i < len(wants); i++ {
		for _, r := range wants[i] {
			if want := r.Name + "-" + map[string]string{"cfg": "2", "other": "1"}[r.Name]; results[i][r].ResourceVersion != want {
				t.Errorf("caller %d, which came while the first round was in flight, got %s at %q, want %q from a GET sent after it", i, r.Name, results[i][r].ResourceVersion, want)
			}
		}
	}
	// The namespace is forgotten just after its last round answers.
	waitUntil(t, func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		_, left := v.next["ns"]
		return !left
	})
}

func TestVersionsOfNoSourceReadNothing(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	meta := metadatafake.NewSimpleMetadataClient(scheme)
	got, err := NewVersions(meta, watches.Door{}, sourcecache.Filter{}, 5*time.Second, nil).Get(t.Context(), "ns", nil)
	if err != nil || len(got) != 0 || len(meta.Actions()) != 0 {
		t.Errorf("Get of no source = %v, %v with %d requests; want nothing, no request", got, err, len(meta.Actions()))
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
	}
}
