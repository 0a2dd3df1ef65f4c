package confighash

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
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

// TestTheFlappingMarkerHoldsTheSourcesThatFit: the watcher writes the triggers of as
// many sources as fit; a marker longer than that, which anyone who may edit the
// workload can write, is read as none before it is split.
func TestTheFlappingMarkerHoldsTheSourcesThatFit(t *testing.T) {
	var changes []Trigger
	for i := range 20 {
		changes = append(changes, Trigger{SourceRef{Secret, fmt.Sprintf("%0200d", i)}, "123456"})
	}
	text := FlappingMarker(changes)
	got, err := ParseFlapping(text)
	if err != nil || len(got) == 0 || len(got) == len(changes) || !slices.Equal(got, changes[:len(got)]) {
		t.Fatalf("ParseFlapping(FlappingMarker(20 long names)) = %d triggers, %v; want the first that fit in %d bytes", len(got), err, maxFlappingBytes)
	}
	if none, err := ParseFlapping(text + "," + text); err == nil || none != nil {
		t.Fatalf("a marker of %d bytes: %v, %v; want an error and none", 2*len(text)+1, none, err)
	}
	if none, err := ParseFlapping(""); err != nil || none != nil {
		t.Fatalf(`ParseFlapping("") = %v, %v; want none`, none, err)
	}
}

// TestTheBakingMarkerCarriesTheBake: written at release without a start, then with it;
// read back the same; a forged or overlong one is none, before it is split.
func TestTheBakingMarkerCarriesTheBake(t *testing.T) {
	released := Baking{Marker: Marker{Change: Trigger{SourceRef{ConfigMap, "app"}, "42"}, Hash: "v1:abc"}, Bake: 5 * time.Minute}
	since := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	baking := released
	baking.Since = since
	for _, c := range []struct {
		b     Baking
		text  string
		until time.Time
	}{
		{released, "ConfigMap/app@42 v1:abc 5m0s", time.Time{}},
		{baking, "ConfigMap/app@42 v1:abc 5m0s 2026-11-29T12:00:00Z", since.Add(5 * time.Minute)},
	} {
		if got := c.b.String(); got != c.text {
			t.Errorf("String() = %q, want %q", got, c.text)
		}
		got, err := ParseBaking(c.text)
		if err != nil || !got.Equal(c.b) || !got.Until().Equal(c.until) {
			t.Errorf("ParseBaking(%q) = %+v, %v; want %+v, until %v", c.text, got, err, c.b, c.until)
		}
	}
	for _, text := range []string{
		"ConfigMap/app@42 v1:abc",
		"ConfigMap/app@42 v1:abc forever",
		"ConfigMap/app@42 v1:abc 48h",
		"ConfigMap/app@42 v1:abc -5m",
		"ConfigMap/app@42 v1:abc 5m yesterday",
		"ConfigMap/app@42 v1:abc 5m 2026-11-29T12:00:00Z extra",
		"ConfigMap/" + strings.Repeat("a", maxMarkerBytes) + "@1 v1:abc 5m",
	} {
		if b, err := ParseBaking(text); err == nil {
			t.Errorf("ParseBaking(%q) = %+v, want an error", text, b)
		}
	}
}

// TestExplainSaysWhereTheCanaryBakes: before its rollout, while it bakes and after, in
// words; nothing for a marker of another template.
func TestExplainSaysWhereTheCanaryBakes(t *testing.T) {
	since := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	m := Marker{Change: Trigger{SourceRef{ConfigMap, "app"}, "42"}, Hash: "v1:abc"}
	for _, c := range []struct {
		b    Baking
		hash string
		now  time.Time
		want string
	}{
		{Baking{Marker: m, Bake: time.Minute}, "v1:abc", since, "once rolled out, it bakes for 1m0s"},
		{Baking{Marker: m, Bake: time.Minute, Since: since}, "v1:abc", since.Add(30 * time.Second), "baking until 2026-11-29T12:01:00Z, before the next wave rolls"},
		{Baking{Marker: m, Bake: time.Minute, Since: since}, "v1:abc", since.Add(2 * time.Minute), "it baked in the first wave of ConfigMap/app@42, the canary, until 2026-11-29T12:01:00Z"},
		{Baking{Marker: m, Since: since}, "v1:abc", since, "it rolled in the first wave of ConfigMap/app@42, the canary"},
		{Baking{Marker: m, Bake: time.Minute, Since: since}, "v1:def", since, ""},
	} {
		got := bakingWhy(State{Hash: c.hash, Baking: c.b}, c.now)
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("bakingWhy(%v at %v) = %q, want %q", c.b, c.now, got, c.want)
		}
	}
}
