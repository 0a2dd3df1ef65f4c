package watcher

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
)

func TestAWriteOfMetadataKeepsTheLastWriteOfData(t *testing.T) {
	at := func(rv string, written int64, data string) *sourcecache.Digested {
		d := sourcecache.NewDigested(&metav1.ObjectMeta{Namespace: "ns", Name: "cfg", ResourceVersion: rv},
			confighash.Source{SourceRef: confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"},
				Data: confighash.Sums{{Key: "k", Sum: confighash.Sum{data[0]}}}})
		d.SetTimes(time.Unix(50, 0), time.Unix(written, 0))
		return d
	}
	dw := newDataWrites()
	v1 := at("10", 100, "a")
	if got := dw.of(v1); got.ResourceVersion != "10" {
		t.Fatalf("before any update: %+v, want its own write at 10", got)
	}
	labelled := at("11", 200, "a") // a match annotation added: the same data
	dw.observe(v1, labelled)
	relabelled := at("12", 300, "a")
	dw.observe(labelled, relabelled)
	if got := dw.of(relabelled); got.ResourceVersion != "10" || got.Time.Unix() != 100 {
		t.Fatalf("after two writes of metadata: %+v, want the write of data at 10", got)
	}
	changed := at("13", 400, "b")
	dw.observe(relabelled, changed)
	if got := dw.of(changed); got.ResourceVersion != "13" {
		t.Fatalf("after a write of data: %+v, want it, at 13", got)
	}
	dw.observe(changed, at("14", 500, "b"))
	dw.observe(nil, at("14", 500, "b")) // deleted
	if got := dw.of(at("15", 600, "b")); got.ResourceVersion != "15" {
		t.Fatalf("recreated after a deletion: %+v, want its own write", got)
	}
}
