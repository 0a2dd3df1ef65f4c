package confighash

import (
	"testing"
	"time"
)

func TestRunningHolds(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(1000+s), 0) }
	tests := []struct {
		name    string
		running Running
		written Written
		holds   bool
	}{
		{"written a second before the revision", Running{Since: at(1)}, Written{Time: at(0), ResourceVersion: "90"}, true},
		{"written in the revision's second, history gone", Running{Since: at(1)}, Written{Time: at(1), ResourceVersion: "90"}, false},
		{"written after the revision", Running{Since: at(1)}, Written{Time: at(2), ResourceVersion: "90"}, false},
		{"in the same second, but before the revisions existed", Running{Since: at(1), AbsentAt: "100"}, Written{Time: at(1), ResourceVersion: "90"}, true},
		{"at the very version the revisions were absent", Running{Since: at(1), AbsentAt: "90"}, Written{Time: at(1), ResourceVersion: "90"}, true},
		{"after the version the revisions were absent at", Running{Since: at(1), AbsentAt: "90"}, Written{Time: at(1), ResourceVersion: "100"}, false},
		{"a version that is no number proves nothing", Running{Since: at(1), AbsentAt: "90"}, Written{Time: at(1), ResourceVersion: "x"}, false},
		{"an unknown write proves nothing", Running{Since: at(1)}, Written{}, false},
	}
	for _, tt := range tests {
		if got := tt.running.Holds(tt.written); got != tt.holds {
			t.Errorf("%s: Holds() = %v, want %v", tt.name, got, tt.holds)
		}
	}
}
