package confighash

import "testing"

// TestAnAnalysisHoldsByItsComparison: each comparison, at and around its threshold.
func TestAnAnalysisHoldsByItsComparison(t *testing.T) {
	for _, c := range []struct {
		op               string
		below, at, above bool
	}{
		{"<", true, false, false},
		{"<=", true, true, false},
		{">", false, false, true},
		{">=", false, true, true},
	} {
		a := Analysis{Query: "q", Op: c.op, Threshold: 1}
		if a.Holds(0.5) != c.below || a.Holds(1) != c.at || a.Holds(2) != c.above {
			t.Errorf("%s: holds at 0.5, 1, 2: %v %v %v; want %v %v %v", a, a.Holds(0.5), a.Holds(1), a.Holds(2), c.below, c.at, c.above)
		}
	}
}
