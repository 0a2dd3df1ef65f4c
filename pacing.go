package confighash

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Pacing is how a workload's configuration changes roll: at once, in waves, or only
// within rollout windows. Its changes are gated when waves or windows apply: only the
// watcher releases them (AnnotationRelease), so that no other write of the workload
// rolls it early.
type Pacing struct {
	// WaveSize, above zero, rolls a change that reaches many workloads in waves of at
	// most this many, each waiting for the one before to roll out.
	WaveSize int
	// Windows are when changes may roll; nil: at any time.
	Windows Windows
	// Pinning says whether the workload is pinned (see Pins).
	Pinning Pinning
}

// Pinning says whether a workload is pinned: each version of a counted source it rolls
// out with kept as a snapshot its pod template names. Unset takes the wider setting.
type Pinning uint8

// The pinnings.
const (
	PinUnset Pinning = iota
	PinOn
	PinOff
)

// Pinned reports whether the workload is pinned.
func (p Pacing) Pinned() bool { return p.Pinning == PinOn }

// parsePinning reads "true" or "false"; empty text sets nothing.
func parsePinning(text string) (Pinning, error) {
	if text = strings.TrimSpace(text); text == "" {
		return PinUnset, nil
	}
	on, err := strconv.ParseBool(text)
	switch {
	case err != nil:
		return PinUnset, fmt.Errorf("pin %q: want true or false", text)
	case on:
		return PinOn, nil
	}
	return PinOff, nil
}

// RollsAt is the first moment, from now, that a change may roll: the windows open and
// the pause period after the workload's last rollout, which ends at pausedUntil, over.
// A pause that outlasts a window defers the change to the next opening.
func (p Pacing) RollsAt(now, pausedUntil time.Time) time.Time {
	if pausedUntil.After(now) {
		now = pausedUntil
	}
	return p.Windows.NextOpen(now)
}

// Over returns p with what it does not set taken from the wider setting: the
// workload's annotations over its namespace's, the namespace's over the flags.
func (p Pacing) Over(wider Pacing) Pacing {
	if p.WaveSize == 0 {
		p.WaveSize = wider.WaveSize
	}
	if p.Windows == nil {
		p.Windows = wider.Windows
	}
	if p.Pinning == PinUnset {
		p.Pinning = wider.Pinning
	}
	return p
}

// String says how changes roll, for people: "" for at once.
func (p Pacing) String() string {
	var parts []string
	if p.WaveSize > 0 {
		parts = append(parts, fmt.Sprintf("in waves of %d", p.WaveSize))
	}
	if p.Windows != nil {
		parts = append(parts, "within "+p.Windows.String())
	}
	if p.Pinned() {
		parts = append(parts, "pinned")
	}
	return strings.Join(parts, ", ")
}

// Equal reports whether two pacings are the same.
func (p Pacing) Equal(o Pacing) bool {
	return p.WaveSize == o.WaveSize && slices.EqualFunc(p.Windows, o.Windows, Window.Equal) && p.Pinning == o.Pinning
}

// ParsePacing reads a rollout window, a wave size and a pinning as written in
// annotations, labels or flags; empty text sets nothing. Each is read on its own: a
// bad one sets nothing and the others stand, so that a typo in one never drops
// another's window. The error names each that is bad.
func ParsePacing(window, waveSize, pin string) (Pacing, error) {
	var r Pacing
	var errs []error
	var err error
	if r.Pinning, err = parsePinning(pin); err != nil {
		errs = append(errs, err)
	}
	if window = strings.TrimSpace(window); window != "" {
		if r.Windows, err = ParseWindows(window); err != nil {
			errs = append(errs, err)
		}
	}
	if waveSize = strings.TrimSpace(waveSize); waveSize != "" {
		if r.WaveSize, err = parseWaveSize(waveSize); err != nil {
			errs = append(errs, fmt.Errorf("wave size %q: want a number of workloads, such as 5", waveSize))
		}
	}
	return r, JoinErrors(errs...)
}

// JoinErrors joins the errors that are not nil in one line, as errors.Join does in
// several: an admission warning or an Event is one line.
func JoinErrors(errs ...error) error {
	var msgs []string
	for _, err := range errs {
		if err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "; "))
}
