package confighash

import (
	"fmt"
	"strings"
	"time"
)

// Status is what the watcher last decided for a workload, written on it
// (AnnotationStatus) for the team that owns it: anyone who can read the workload can
// read why it rolled or did not. It names sources and times, never data.
type Status struct {
	Act Act
	// At is when the watcher decided; Until, when the act's hold ends, zero for none
	// or unknown: the end of a pause period after a rollout, of a window, of a flap.
	At, Until time.Time
	// Why says what for, in words: the sources that changed, what holds it.
	Why string
}

// Act is one of the watcher's decisions a Status tells.
type Act string

// The acts.
const (
	// ActRolled: touched for a due change, which rolled it; further changes wait
	// until its pause period ends (Until).
	ActRolled Act = "rolled"
	// ActHeld: a due change waits, for Why, until Until when it is known.
	ActHeld Act = "held"
	// ActBaking: in the first wave of a change, rolled out; it must stay healthy until
	// Until before the next wave rolls.
	ActBaking Act = "baking"
	// ActReverted: a change's rollout failed, and the workload was rolled back to the
	// revision it ran before, with its data.
	ActReverted Act = "reverted"
	// ActAdopted: its pods hold the current data of the sources that count, or that
	// started to: recorded without a rollout.
	ActAdopted Act = "adopted"
	// ActHealed: the webhook did not write the hash; the watcher did.
	ActHealed Act = "healed"
	// ActNotHashed: the workload is over a bound; its hash is left as it is.
	ActNotHashed Act = "not-hashed"
)

var acts = []Act{ActRolled, ActHeld, ActBaking, ActReverted, ActAdopted, ActHealed, ActNotHashed}

// MaxStatusBytes bounds a status: the watcher cuts Why to fit, and a longer one,
// written by someone else, is not read.
const MaxStatusBytes = 1024

// Text renders the status for AnnotationStatus: "act at[ until until]: why", the times
// in RFC 3339, UTC, to the second.
func (s Status) Text() string {
	var b strings.Builder
	b.WriteString(string(s.Act) + " " + s.At.UTC().Format(time.RFC3339))
	if !s.Until.IsZero() {
		b.WriteString(" until " + s.Until.UTC().Format(time.RFC3339))
	}
	b.WriteString(": ")
	why := s.Why
	if room := MaxStatusBytes - b.Len(); len(why) > room {
		why = cutUTF8(why, room-len("…")) + "…"
	}
	b.WriteString(why)
	return b.String()
}

// Same reports whether two statuses tell the same decision, whenever it was made.
func (s Status) Same(o Status) bool {
	return s.Act == o.Act && s.Until.Equal(o.Until) && s.Why == o.Why
}

// ParseStatus reads AnnotationStatus, "" as none.
func ParseStatus(text string) (Status, error) {
	if text == "" {
		return Status{}, nil
	}
	if len(text) > MaxStatusBytes {
		return Status{}, fmt.Errorf("a status of %d bytes, more than %d", len(text), MaxStatusBytes)
	}
	head, why, ok := strings.Cut(text, ": ")
	fields := strings.Fields(head)
	bad := fmt.Errorf("status %q: want \"act time[ until time]: why\"", text)
	if !ok || (len(fields) != 2 && (len(fields) != 4 || fields[2] != "until")) {
		return Status{}, bad
	}
	s := Status{Act: Act(fields[0]), Why: why}
	var err error
	if s.At, err = time.Parse(time.RFC3339, fields[1]); err != nil {
		return Status{}, bad
	}
	if len(fields) == 4 {
		if s.Until, err = time.Parse(time.RFC3339, fields[3]); err != nil {
			return Status{}, bad
		}
	}
	for _, a := range acts {
		if s.Act == a {
			return s, nil
		}
	}
	return Status{}, fmt.Errorf("status %q: %q is not one of %v", text, s.Act, acts)
}

// cutUTF8 returns the longest prefix of s of at most n bytes that does not split a
// character.
func cutUTF8(s string, n int) string {
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:max(n, 0)]
}
