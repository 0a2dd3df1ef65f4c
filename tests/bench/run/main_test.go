package main

import (
	"strings"
	"testing"
)

func TestParseBenchmarksTakesTheMedianOfEachUnitOverRepetitions(t *testing.T) {
	out := `goos: linux
BenchmarkAdmit-2   	   1000	     30 ns/op	  5 allocs/op
BenchmarkAdmit-2   	   1000	     10 ns/op	  5 allocs/op
BenchmarkAdmit-2   	   1000	     20 ns/op	  5 allocs/op
BenchmarkCreate/with-webhook-2 	 100	 9000 ns/op	 4043 in-webhook-µs
PASS
`
	got := parseBenchmarks(strings.NewReader(out), "go test -bench .")
	if len(got) != 2 || got[0].Name != "BenchmarkAdmit" || got[1].Name != "BenchmarkCreate/with-webhook" {
		t.Fatalf("scenarios = %+v, want BenchmarkAdmit and BenchmarkCreate/with-webhook", got)
	}
	ns := got[0].Figures[0]
	if ns.Unit != "ns/op" || ns.Value != 20 || len(ns.Runs) != 3 {
		t.Errorf("ns/op = %+v, want the median 20 of 3 runs", ns)
	}
	if f := got[1].Figures[1]; f.Unit != "in-webhook-µs" || f.Value != 4043 || f.Runs != nil {
		t.Errorf("custom metric = %+v, want 4043 from a single run", f)
	}
}
