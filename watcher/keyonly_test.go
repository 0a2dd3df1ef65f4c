package watcher

import (
	"context"
	"testing"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
	"github.com/confighash/confighash/watches"
	"k8s.io/client-go/kubernetes"
)

// modes is a gate with fixed modes; a namespace it does not list is not known.
type modes map[string]confighash.Mode

func (m modes) Mode(ns string) confighash.Mode           { return m[ns] }
func (m modes) Known(ns string) bool                     { _, ok := m[ns]; return ok }
func (m modes) Pacing(string) (confighash.Pacing, error) { return confighash.Pacing{}, nil }
func (m modes) HasSynced() bool                          { return true }
func (m modes) Run(context.Context)                      {}

func TestAWorkloadNotActedOnIsKeptAsItsKeyAlone(t *testing.T) {
	gate := modes{"off": confighash.ModeOff, "opted": confighash.ModeOptedIn, "all": confighash.ModeEvery}
	kept := newKeptKeys(gate)
	transform := kept.transform(toView)
	optedIn := map[string]string{confighash.AnnotationInject: "true"}
	optedOut := map[string]string{confighash.ReloaderAuto: "false"}
	for _, tc := range []struct {
		namespace   string
		annotations map[string]string
		full        bool
	}{
		{"opted", nil, false},
		{"opted", optedIn, true},
		{"all", nil, true},
		{"all", optedOut, false},
		{"not-read-yet", nil, true},
	} {
		d := deploymentUsing(tc.annotations, "cfg")
		d.Namespace = tc.namespace
		obj, err := transform(d)
		if err != nil {
			t.Fatal(err)
		}
		switch o := obj.(type) {
		case *view:
			if !tc.full {
				t.Errorf("%s, annotations %v: a whole view, want the key alone", tc.namespace, tc.annotations)
			}
		case *watches.Key:
			if tc.full || o.String() != tc.namespace+"/web" || o.GetObjectMeta().GetName() != o.String() || o.GetObjectMeta().GetNamespace() != "" {
				t.Errorf("%s, annotations %v: key %q (%s), want a whole view: %v", tc.namespace, tc.annotations, o, o.GetObjectMeta().GetName(), tc.full)
			}
			if index, _ := byNamespace(o); index != nil {
				t.Errorf("a key alone is indexed under %v", index)
			}
		default:
			t.Fatalf("transform() = %T", obj)
		}
	}

	// Labelled all, "opted" acts on what it kept the key of: read it again, once.
	gate["opted"] = confighash.ModeEvery
	if !kept.rose("opted") || kept.rose("opted") {
		t.Error("opted, labelled all: want one relist")
	}
	// "all" kept the key of a workload that opts out, in the mode it is still in.
	if kept.rose("all") {
		t.Error("all, unchanged: a relist")
	}
	if kept.rose("not-read-yet") {
		t.Error("a namespace whose workloads were all kept whole: a relist")
	}
}

// mustSources is a cache of every namespace's sources on client.
func mustSources(tb testing.TB, client kubernetes.Interface) *sourcecache.Cache {
	tb.Helper()
	c, err := sourcecache.New(client, watches.Door{Gate: modes{}}, sourcecache.Filter{}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
