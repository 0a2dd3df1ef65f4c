package confighash

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

func TestARecordIsActedOnOnlyWhileFresh(t *testing.T) {
	key, _ := NewKey([]byte(strings.Repeat("k", 32)))
	other, _ := NewKey([]byte(strings.Repeat("o", 32)))
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	recordSeal := RecreationSeal(key, "ns", "job", "uid", []byte(`{}`))
	sealed := func(k Key, at time.Time) map[string]string {
		a := map[string]string{AnnotationSeal: recordSeal}
		maps.Copy(a, SealedAt(k, recordSeal, at))
		return a
	}
	moved := sealed(key, now.Add(-2*time.Hour))
	moved[AnnotationSealedAt] = now.Format(time.RFC3339) // made to look fresh
	onAnother := sealed(key, now)
	onAnother[AnnotationSeal] = RecreationSeal(key, "ns", "job", "another uid", []byte(`{}`))
	for _, tc := range []struct {
		what        string
		annotations map[string]string
		stale, bad  bool
	}{
		{"a record sealed a minute ago is fresh", sealed(key, now.Add(-time.Minute)), false, false},
		{"a record of an earlier release, with no time, is read as before", map[string]string{AnnotationSeal: recordSeal}, false, false},
		{"a record sealed two hours ago is stale", sealed(key, now.Add(-2*time.Hour)), true, false},
		{"a time changed after it was sealed is refused", moved, false, true},
		{"a time sealed for another record is refused", onAnother, false, true},
		{"a time sealed with another key is refused", sealed(other, now), false, true},
	} {
		err := RecordFresh(key, tc.annotations, now)
		if got := errors.Is(err, ErrRecordStale); got != tc.stale {
			t.Errorf("%s: stale = %v (%v), want %v", tc.what, got, err, tc.stale)
		}
		if got := err != nil && !errors.Is(err, ErrRecordStale); got != tc.bad {
			t.Errorf("%s: refused = %v (%v), want %v", tc.what, got, err, tc.bad)
		}
	}
}
