package watches

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash"
)

// modes is a gate with fixed modes; a namespace it does not list is not known.
type modes struct {
	mu sync.Mutex
	m  map[string]confighash.Mode
}

func (g *modes) Mode(ns string) confighash.Mode { g.mu.Lock(); defer g.mu.Unlock(); return g.m[ns] }
func (g *modes) Known(ns string) bool           { g.mu.Lock(); defer g.mu.Unlock(); _, ok := g.m[ns]; return ok }
func (g *modes) HasSynced() bool                { return true }
func (g *modes) set(ns string, m confighash.Mode) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.m[ns] = m
}

func pod(ns, name string, padding int) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Annotations: map[string]string{"padding": strings.Repeat("x", padding)}}}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestATenantsObjectsAreReadOnlyWhereConfighashActs: in a namespace confighash does not
// act in, a tenant's object is kept as its key alone, never handed to the transform
// (issue 52: 60 pods of 1.2 MB there took the watcher from 44 to 202 MiB); the
// namespace is not served, so that what was not read is not taken for absent; once
// confighash acts there, a relist reads it whole. Objects over the kind's bound are
// kept as keys wherever they are, and told once.
func TestATenantsObjectsAreReadOnlyWhereConfighashActs(t *testing.T) {
	for _, namespaces := range [][]string{nil, {"off", "on", "unknown"}} {
		gate := &modes{m: map[string]confighash.Mode{"off": confighash.ModeOff, "on": confighash.ModeOptedIn}}
		client := fake.NewClientset(pod("off", "p", 10), pod("on", "p", 10), pod("unknown", "p", 10), pod("on", "huge", MaxWorkloadBytes))
		var mu sync.Mutex
		var read, told []string
		door := Door{Namespaces: namespaces, Gate: gate, Over: func(kind Kind, ns, name string, bytes int) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, ns+"/"+name)
		}}
		in, err := door.Open(RestartedPods, func(ns string) cache.SharedIndexInformer {
			return coreinformers.NewPodInformer(client, ns, 0, cache.Indexers{})
		}, func(obj any) (any, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				mu.Lock()
				defer mu.Unlock()
				read = append(read, p.Namespace+"/"+p.Name)
			}
			return obj, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		in.Run(ctx)
		waitFor(t, "the informers to sync", in.HasSynced)

		mu.Lock()
		slices.Sort(read)
		if want := []string{"on/p", "unknown/p"}; !slices.Equal(read, want) {
			t.Errorf("%v: the transform read %v, want %v", namespaces, read, want)
		}
		mu.Unlock()
		if in.For("off") != nil || !in.Keyed("off") {
			t.Errorf("%v: the namespace not acted in is served, or not marked to be read again", namespaces)
		}
		if in.For("on") == nil || in.Keyed("on") {
			t.Errorf("%v: the namespace acted in is not served", namespaces)
		}
		obj, _, _ := in.For("on").GetStore().GetByKey("on/huge")
		if k, ok := obj.(*Key); !ok || !k.Over {
			t.Errorf("%v: an object over the bound is held as %T, want its key alone", namespaces, obj)
		}
		// Written again, still over: not told again.
		huge := pod("on", "huge", MaxWorkloadBytes)
		huge.Labels = map[string]string{"again": "1"}
		if _, err := client.CoreV1().Pods("on").Update(ctx, huge, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the update", func() bool {
			obj, _, _ := in.For("on").GetStore().GetByKey("on/huge")
			_, ok := obj.(*Key)
			return ok
		})
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		if !slices.Equal(told, []string{"on/huge"}) {
			t.Errorf("%v: told of %v, want of on/huge once", namespaces, told)
		}
		read = nil
		mu.Unlock()

		// Labelled: read again, whole.
		gate.set("off", confighash.ModeOptedIn)
		relists := NewRelists(map[string]*Informers{"pods": in}, zerolog.Nop())
		var done []string
		finished := make(chan struct{})
		go relists.Run(ctx, func(string) {}, func(ns string) { done = append(done, ns); close(finished) })
		if !relists.Needed("off") {
			t.Fatalf("%v: no relist needed for the namespace kept as keys", namespaces)
		}
		relists.Add("off")
		<-finished
		if in.For("off") == nil || in.Keyed("off") {
			t.Errorf("%v: after the relist, the namespace is not served", namespaces)
		}
		obj, _, _ = in.For("off").GetStore().GetByKey("off/p")
		if _, ok := obj.(*corev1.Pod); !ok {
			t.Errorf("%v: after the relist, off/p is held as %T, want it whole", namespaces, obj)
		}
		mu.Lock()
		if !slices.Contains(read, "off/p") {
			t.Errorf("%v: the relist read %v, want off/p among them", namespaces, read)
		}
		mu.Unlock()
		cancel()
	}
}

func TestTheDoorOpensOnlyRegisteredKindsInTheirScope(t *testing.T) {
	newInformer := func(string) cache.SharedIndexInformer {
		return coreinformers.NewPodInformer(fake.NewClientset(), "", 0, cache.Indexers{})
	}
	door := Door{Gate: &modes{m: map[string]confighash.Mode{}}}
	if _, err := door.Open(Kind{Name: "pods nobody registered", Scope: Tenant}, newInformer, nil); err == nil {
		t.Error("Open took a kind not in Kinds")
	}
	if _, err := door.Open(KonnectivityAgents, newInformer, nil); err == nil {
		t.Error("Open took a System kind: its one namespace is not the tenants'")
	}
	if _, err := (Door{}).Open(RestartedPods, newInformer, nil); err == nil {
		t.Error("Open took a tenant's kind with no gate")
	}
	if _, err := Informer(RestartedPods, newInformer(""), nil); err == nil {
		t.Error("Informer took a tenant's kind, which only the door's gate may open")
	}
	if _, err := Informer(Nodes, newInformer(""), nil); err != nil {
		t.Errorf("Informer(Nodes): %v", err)
	}
}

// TestTheKindsAreOneList: each registered once, by a name of its own; a tenant's
// kinds in no fixed namespace; a System kind in its one.
func TestTheKindsAreOneList(t *testing.T) {
	names := map[string]Kind{}
	for _, k := range Kinds {
		if _, dup := names[k.Name]; dup {
			t.Errorf("%q registered twice", k.Name)
		}
		names[k.Name] = k
		if (k.Scope == System) != (k.Namespace != "") {
			t.Errorf("%s: scope %d in namespace %q", k.Name, k.Scope, k.Namespace)
		}
		if len(k.By) == 0 {
			t.Errorf("%s: watched by no component", k.Name)
		}
	}
	for _, k := range confighash.Builtin {
		if w := Workloads(k); w.Name == ExtraWorkloads.Name || !slices.Contains(slices.Collect(maps.Keys(names)), w.Name) {
			t.Errorf("the built-in kind %s has no registered kind of its own", k.Kind)
		}
	}
}
