package confighash

import (
	"errors"
	"slices"
	"testing"
)

func TestTriggersRoundTrip(t *testing.T) {
	want := []Trigger{{SourceRef{Secret, "db"}, "12345"}, {SourceRef{ConfigMap, "app"}, "7"}}
	text := FormatTriggers(want)
	if text != "Secret/db@12345,ConfigMap/app@7" {
		t.Fatalf("FormatTriggers() = %q", text)
	}
	got, err := ParseTriggers(text)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("ParseTriggers(%q) = %v, %v; want %v", text, got, err, want)
	}
}

func TestParseTriggersRejects(t *testing.T) {
	for _, s := range []string{"", "Secret/db", "Secret/@1", "Secret/db@", "Pod/x@1", "db@1", "Secret/a@1,", "Secret/a@1,nope"} {
		if _, err := ParseTriggers(s); !errors.Is(err, ErrBadTrigger) {
			t.Errorf("ParseTriggers(%q) error = %v, want ErrBadTrigger", s, err)
		}
	}
}
