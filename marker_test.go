package confighash

import (
	"strings"
	"testing"
)

func TestMarkerRoundTrip(t *testing.T) {
	m := Marker{Change: Trigger{SourceRef{ConfigMap, "app"}, "42"}, Hash: "v1:abc"}
	text := m.String()
	if text != "ConfigMap/app@42 v1:abc" {
		t.Fatalf("String() = %q", text)
	}
	got, err := ParseMarker(text)
	if err != nil || got != m {
		t.Fatalf("ParseMarker(%q) = %v, %v; want %v", text, got, err, m)
	}
	if none, err := ParseMarker(""); err != nil || !none.IsZero() || none.String() != "" {
		t.Fatalf(`ParseMarker("") = %v, %v; want none`, none, err)
	}
}

func TestParseMarkerRejects(t *testing.T) {
	for name, text := range map[string]string{
		"no hash":                    "ConfigMap/app@42",
		"an empty hash":              "ConfigMap/app@42 ",
		"a hash of two words":        "ConfigMap/app@42 v1:a b",
		"a change without a version": "ConfigMap/app v1:abc",
		"two changes":                "ConfigMap/a@1,ConfigMap/b@2 v1:abc",
		"a kind that is no source":   "Pod/x@1 v1:abc",
		"more bytes than a marker":   "ConfigMap/" + strings.Repeat("a", maxMarkerBytes) + "@1 v1:abc",
	} {
		t.Run(name, func(t *testing.T) {
			if m, err := ParseMarker(text); err == nil {
				t.Fatalf("ParseMarker(%q) = %v, want an error", text, m)
			}
		})
	}
}
