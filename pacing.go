package confighash

import (
	"cmp"
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
	// OnFailure is what a failed rollout of a change does to it.
	OnFailure OnFailure
	// Canary sizes a change's first wave; Bake is how long that wave must stay healthy
	// once rolled out before the next rolls. Either rolls the change in waves.
	Canary Canary
	Bake   time.Duration
	// Analysis gates the bake on a metric; zero for none.
	Analysis Analysis
}

// Waves reports whether changes roll in waves: a wave size, a canary or a bake is set.
func (p Pacing) Waves() bool { return p.WaveSize > 0 || p.Canary.N > 0 || p.Bake > 0 }

// FirstWave is the size of the first wave of a change that reaches users workloads:
// the canary; with a bake and no canary, a wave, or one workload; with neither, a wave.
func (p Pacing) FirstWave(users int) int {
	switch {
	case p.Canary.N > 0:
		return p.Canary.Of(users)
	case p.WaveSize > 0:
		return p.WaveSize
	}
	return 1
}

// LaterWaves is the size of the waves after the first: the wave size, or the rest at
// once.
func (p Pacing) LaterWaves(users int) int { return cmp.Or(p.WaveSize, users) }

// WaveOf is the wave, from 1, that takes the user at place (from 0) of users in the
// waves' order.
func (p Pacing) WaveOf(place, users int) int {
	first := p.FirstWave(users)
	if place < first {
		return 1
	}
	return 2 + (place-first)/max(1, p.LaterWaves(users))
}

// Canary is the size of a change's first wave (AnnotationCanary): N workloads, or N
// percent of the source's users; zero N, unset.
type Canary struct {
	N       int
	Percent bool
}

// Of is the canary's number of workloads among users: at least one.
func (c Canary) Of(users int) int {
	if !c.Percent {
		return c.N
	}
	return max(1, (users*c.N+99)/100)
}

func (c Canary) String() string {
	if c.Percent {
		return fmt.Sprintf("%d%%", c.N)
	}
	return strconv.Itoa(c.N)
}

// What each pacing setting wants, in the words a bad value is told with.
const (
	wantWaveSize  = "want a number of workloads, such as 5"
	wantPin       = "want true or false"
	wantOnFailure = "want halt or revert"
	wantCanary    = "want a number of workloads, such as 1, or a percent of them, such as 10%"
	wantBake      = "want a duration from 1s to 24h, such as 5m"
)

// readSetting reads the setting name, as get finds it, with parse: a bad value is told
// to bad with want, and is the zero value, so that the other settings stand.
func readSetting[T any](get func(name string) (string, bool), bad func(name, value, want string), name string, parse func(string) (T, error), want string) T {
	var out T
	if v, ok := get(name); ok {
		var err error
		if out, err = parse(v); err != nil {
			bad(name, v, want)
		}
	}
	return out
}

func parseWaveSize(text string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(text))
	if err != nil || n < 0 {
		return 0, strconv.ErrSyntax
	}
	return n, nil
}

// parseCanary reads "3" or "10%"; empty text sets nothing.
func parseCanary(text string) (Canary, error) {
	if text = strings.TrimSpace(text); text == "" {
		return Canary{}, nil
	}
	number, percent := strings.CutSuffix(text, "%")
	n, err := strconv.Atoi(number)
	if err != nil || n < 1 || percent && n > 100 {
		return Canary{}, fmt.Errorf("canary %q: %s", text, wantCanary)
	}
	return Canary{N: n, Percent: percent}, nil
}

// maxBake bounds a bake: a wave that waits longer is a hold, which a window says better.
const maxBake = 24 * time.Hour

// parseBake reads a duration of one second to a day, such as "5m"; empty text sets
// nothing.
func parseBake(text string) (time.Duration, error) {
	if text = strings.TrimSpace(text); text == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(text)
	if err != nil || d < time.Second || d > maxBake {
		return 0, fmt.Errorf("bake %q: %s", text, wantBake)
	}
	return d, nil
}

// OnFailure is what a failed rollout of a change does to the workloads its wave
// reached: halt the wave, or revert the pinned ones to the revision they ran before,
// with its data. Unset takes the wider setting; the widest unset halts.
type OnFailure uint8

// The settings of AnnotationOnFailure.
const (
	FailUnset OnFailure = iota
	FailHalt
	FailRevert
)

var onFailureNames = map[string]OnFailure{"halt": FailHalt, "revert": FailRevert}

// parseOnFailure reads "halt" or "revert"; empty text sets nothing.
func parseOnFailure(text string) (OnFailure, error) {
	if text = strings.TrimSpace(text); text == "" {
		return FailUnset, nil
	}
	if f, ok := onFailureNames[text]; ok {
		return f, nil
	}
	return FailUnset, fmt.Errorf("on-failure %q: %s", text, wantOnFailure)
}

// Reverts reports whether a failed rollout reverts the workload: it asks to, and it is
// pinned, so that the revision before the change names that change's data.
func (p Pacing) Reverts() bool { return p.OnFailure == FailRevert && p.Pinned() }

// NotReverted says why a workload that asks to revert a failed rollout halts instead,
// "" when it does not ask or can revert.
func (p Pacing) NotReverted() string {
	if p.OnFailure != FailRevert || p.Pinned() {
		return ""
	}
	return fmt.Sprintf("an unpinned workload has nothing to go back to: its earlier revisions read the sources as they are now; a failed rollout halts it instead (%s: \"true\" pins it)", AnnotationPin)
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
		return PinUnset, fmt.Errorf("pin %q: %s", text, wantPin)
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
	if p.OnFailure == FailUnset {
		p.OnFailure = wider.OnFailure
	}
	if p.Canary.N == 0 {
		p.Canary = wider.Canary
	}
	if p.Bake == 0 {
		p.Bake = wider.Bake
	}
	if p.Analysis.IsZero() {
		p.Analysis = wider.Analysis
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
	if p.Canary.N > 0 {
		parts = append(parts, "a canary of "+p.Canary.String())
	}
	if p.Bake > 0 {
		parts = append(parts, "baking the first wave "+p.Bake.String())
	}
	if !p.Analysis.IsZero() {
		parts = append(parts, "while "+p.Analysis.String())
	}
	if p.OnFailure == FailRevert {
		parts = append(parts, "reverting a failed change")
	}
	return strings.Join(parts, ", ")
}

// Equal reports whether two pacings are the same.
func (p Pacing) Equal(o Pacing) bool {
	return p.WaveSize == o.WaveSize && slices.EqualFunc(p.Windows, o.Windows, Window.Equal) && p.Pinning == o.Pinning &&
		p.OnFailure == o.OnFailure && p.Canary == o.Canary && p.Bake == o.Bake && p.Analysis == o.Analysis
}

// PacingText is a pacing as written in annotations, labels or flags.
type PacingText struct {
	Window, WaveSize, Pin, OnFailure, Canary, Bake, Analysis string
}

// ParsePacing reads a pacing as written; empty text sets nothing. Each setting is
// read on its own: a bad one sets nothing and the others stand, so that a typo in one
// never drops another's window. The error names each that is bad.
func ParsePacing(t PacingText) (Pacing, error) {
	var r Pacing
	var errs []error
	var err error
	if r.Pinning, err = parsePinning(t.Pin); err != nil {
		errs = append(errs, err)
	}
	if r.OnFailure, err = parseOnFailure(t.OnFailure); err != nil {
		errs = append(errs, err)
	}
	if window := strings.TrimSpace(t.Window); window != "" {
		if r.Windows, err = ParseWindows(window); err != nil {
			errs = append(errs, err)
		}
	}
	if waveSize := strings.TrimSpace(t.WaveSize); waveSize != "" {
		if r.WaveSize, err = parseWaveSize(waveSize); err != nil {
			errs = append(errs, fmt.Errorf("wave size %q: %s", waveSize, wantWaveSize))
		}
	}
	if r.Canary, err = parseCanary(t.Canary); err != nil {
		errs = append(errs, err)
	}
	if r.Bake, err = parseBake(t.Bake); err != nil {
		errs = append(errs, err)
	}
	if r.Analysis, err = parseAnalysis(t.Analysis); err != nil {
		errs = append(errs, err)
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
