package confighash

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestWindows(t *testing.T) {
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	tests := []struct {
		name, text, at string
		open           bool
		next           string // when not open
	}{
		{"inside a weekday window in its zone", "Mon-Fri 09:00-17:00 Europe/Berlin", "2026-11-24T10:00:00+01:00", true, ""},
		{"before it opens, it opens the same day", "Mon-Fri 09:00-17:00 Europe/Berlin", "2026-11-24T07:59:00Z", false, "2026-11-24T08:00:00Z"},
		{"its end is not in it", "Mon-Fri 09:00-17:00 UTC", "2026-11-24T17:00:00Z", false, "2026-11-25T09:00:00Z"},
		{"after Friday's, it opens on Monday", "Mon-Fri 09:00-17:00 UTC", "2026-11-27T18:00:00Z", false, "2026-11-30T09:00:00Z"},
		{"a range past midnight holds the next morning", "Sat 22:00-02:00 UTC", "2026-11-29T01:30:00Z", true, ""},
		{"a range past midnight opens on its day only", "Sat 22:00-02:00 UTC", "2026-11-29T22:30:00Z", false, "2026-12-05T22:00:00Z"},
		{"a day range wraps over the week's end", "Fri-Mon 00:00-24:00 UTC", "2026-11-29T12:00:00Z", true, ""},
		{"the zone defaults to UTC", "daily 03:00-04:00", "2026-11-24T03:30:00Z", true, ""},
		{"several windows: the earliest opening", "Mon 09:00-10:00 UTC; Tue,Thu 12:00-13:00 UTC", "2026-11-24T10:00:00Z", false, "2026-11-24T12:00:00Z"},
		{"daylight saving: 09:00 in Berlin is 07:00 UTC in summer", "daily 09:00-10:00 Europe/Berlin", "2026-07-01T07:30:00Z", true, ""},
		{"days are read in the window's zone", "Tue 00:00-01:00 Asia/Tokyo", "2026-11-23T15:30:00Z", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, err := ParseWindows(tt.text)
			if err != nil {
				t.Fatal(err)
			}
			now := at(tt.at)
			if got := ws.Open(now); got != tt.open {
				t.Fatalf("Open(%s) = %v, want %v", tt.at, got, tt.open)
			}
			want := now
			if !tt.open {
				want = at(tt.next)
			}
			if got := ws.NextOpen(now); !got.Equal(want) {
				t.Fatalf("NextOpen(%s) = %s, want %s", tt.at, got.UTC().Format(time.RFC3339), want.UTC().Format(time.RFC3339))
			}
		})
	}
}

func TestBadWindowsSayWhatIsWrong(t *testing.T) {
	for text, want := range map[string]string{
		"":                             "empty",
		"Mon-Fri":                      "want days, a time range and a time zone",
		"Mon-Fry 09:00-17:00 UTC":      `days "Mon-Fry"`,
		"Mon 9-17 UTC":                 `time "9": want HH:MM`,
		"Mon 09:00-25:00 UTC":          `time "25:00"`,
		"Mon 24:00-01:00 UTC":          `time "24:00"`,
		"Mon 09:00-17:00 Mars/Olympus": `unknown time zone "Mars/Olympus"`,
		"Mon 09:00-17:00 Local":        `unknown time zone "Local"`,
	} {
		_, err := ParseWindows(text)
		if !errors.Is(err, ErrBadWindow) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseWindows(%q) = %v, want an error saying %q", text, err, want)
		}
	}
}

func TestNilWindowsAreAlwaysOpen(t *testing.T) {
	var ws Windows
	now := time.Now()
	if !ws.Open(now) || !ws.NextOpen(now).Equal(now) {
		t.Fatal("no window must mean any time")
	}
}

func TestWindowsReadBackAsTheyAreWritten(t *testing.T) {
	ws, err := ParseWindows("Fri-Mon 22:00-02:00 Europe/Berlin; daily 00:00-24:00")
	if err != nil {
		t.Fatal(err)
	}
	want := "Mon,Fri,Sat,Sun 22:00-02:00 Europe/Berlin; daily 00:00-24:00 UTC"
	if got := ws.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	again, err := ParseWindows(ws.String())
	if err != nil || !slices.EqualFunc(ws, again, Window.Equal) {
		t.Fatalf("parsing %q again gave %v, %v", ws, again, err)
	}
}
