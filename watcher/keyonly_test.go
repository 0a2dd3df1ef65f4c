package watcher

import (
	"context"
	"slices"
	"testing"

	"github.com/confighash/confighash"
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
		{"off", optedIn, false},
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
		case *keyOnly:
			if tc.full || o.key != tc.namespace+"/web" || o.GetObjectMeta().GetName() != o.key || o.GetObjectMeta().GetNamespace() != "" {
				t.Errorf("%s, annotations %v: key %q (%s), want a whole view: %v", tc.namespace, tc.annotations, o.key, o.GetObjectMeta().GetName(), tc.full)
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
	gate["off"] = confighash.ModeOptedIn
	if !kept.rose("off") {
		t.Error("off, labelled: no relist")
	}
	if kept.rose("not-read-yet") {
		t.Error("a namespace whose workloads were all kept whole: a relist")
	}
}

// TestAWorkloadOfANamespaceNotActedInIsNotRead: in a namespace confighash does not act
// in, a workload's annotations are not parsed at all, whatever they hold; only its key
// is kept (issue 32: one annotation there once took the watcher down).
func TestAWorkloadOfANamespaceNotActedInIsNotRead(t *testing.T) {
	gate := modes{"off": confighash.ModeOff, "opted": confighash.ModeOptedIn}
	var read []string
	transform := newKeptKeys(gate).transform(func(obj any) (any, error) {
		v, err := toView(obj)
		read = append(read, v.(*view).Namespace)
		return v, err
	})
	for _, ns := range []string{"off", "opted", "not-read-yet"} {
		d := deploymentUsing(map[string]string{confighash.ReloaderConfigMapReload: "(?:[a-z]?){1000}x"}, "cfg")
		d.Namespace = ns
		obj, err := transform(d)
		if err != nil {
			t.Fatal(err)
		}
		if k, ok := obj.(*keyOnly); ns == "off" && (!ok || k.key != "off/web") {
			t.Errorf("off: transform() = %#v, want the key alone", obj)
		}
	}
	if !slices.Equal(read, []string{"opted", "not-read-yet"}) {
		t.Errorf("read the workloads of %v, want those of opted and not-read-yet only", read)
	}
}
