package confighash

import (
	"errors"
	"testing"
)

func TestTriggerRoundTrip(t *testing.T) {
	want := Trigger{SourceRef{Secret, "db"}, "12345"}
	got, err := ParseTrigger(want.String())
	if err != nil || got != want {
		t.Fatalf("ParseTrigger(%q) = %v, %v; want %v", want.String(), got, err, want)
	}
}

func TestParseTriggerRejects(t *testing.T) {
	for _, s := range []string{"", "Secret/db", "Secret/@1", "Secret/db@", "Pod/x@1", "db@1"} {
		if _, err := ParseTrigger(s); !errors.Is(err, ErrBadTrigger) {
			t.Errorf("ParseTrigger(%q) error = %v, want ErrBadTrigger", s, err)
		}
	}
}
