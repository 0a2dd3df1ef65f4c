package confighash

import (
	"strings"
	"testing"
	"time"
)

func TestStatusReadsBackWhatItWrites(t *testing.T) {
	at := time.Date(2026, 11, 27, 2, 10, 0, 0, time.UTC)
	for _, s := range []Status{
		{Act: ActRolled, At: at, Until: at.Add(5 * time.Minute), Why: "ConfigMap/app@1234 changed"},
		{Act: ActHeld, At: at, Until: at.Add(7 * time.Hour), Why: "ConfigMap/app changed: outside its rollout window (Mon-Fri 09:00-17:00 UTC)"},
		{Act: ActHealed, At: at, Why: "the webhook did not write the hash: a: b"},
		{Act: ActNotHashed, At: at, Why: "too many sources"},
	} {
		got, err := ParseStatus(s.Text())
		if err != nil || !got.Same(s) || !got.At.Equal(s.At) {
			t.Errorf("ParseStatus(%q) = %+v, %v; want %+v", s.Text(), got, err, s)
		}
	}
}

func TestStatusIsBounded(t *testing.T) {
	s := Status{Act: ActHeld, At: time.Unix(0, 0), Why: strings.Repeat("é", 2000)}
	text := s.Text()
	if len(text) > MaxStatusBytes || !strings.HasSuffix(text, "…") {
		t.Fatalf("a long why gives %d bytes, ending %q; want at most %d, cut with …", len(text), text[len(text)-8:], MaxStatusBytes)
	}
	if _, err := ParseStatus(text); err != nil {
		t.Errorf("a cut status does not read back: %v", err)
	}
	if _, err := ParseStatus(strings.Repeat("x", MaxStatusBytes+1)); err == nil {
		t.Error("a status over the bound was read")
	}
}

func TestStatusRefusesWhatIsNotOne(t *testing.T) {
	for _, text := range []string{
		"rolled", "rolled: x", "rolled yesterday: x", "paused 2026-11-27T02:10:00Z: x",
		"held 2026-11-27T02:10:00Z after 2026-11-27T02:10:00Z: x", "held 2026-11-27T02:10:00Z until soon: x",
	} {
		if s, err := ParseStatus(text); err == nil {
			t.Errorf("ParseStatus(%q) = %+v, want an error", text, s)
		}
	}
}
