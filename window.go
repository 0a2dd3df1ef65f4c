package confighash

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Windows are when configuration changes may roll a workload, as written in
// AnnotationRolloutWindow or the watcher's default: one or more windows separated by
// semicolons, each days, a time range and a time zone:
//
//	Mon-Fri 09:00-17:00 Europe/Berlin; Sat 10:00-12:00 UTC
//
// Days are Mon..Sun, ranges (Fri-Mon wraps) and lists (Mon,Wed,Fri); "daily" is every
// day. A range whose end is not after its start runs past midnight, into the next day;
// "00:00-24:00" is the whole day. The zone is an IANA name, default UTC. Times are wall
// clock times in that zone, daylight saving included. Nil Windows are always open.
type Windows []Window

// Window is one of Windows.
type Window struct {
	// Days holds the weekdays on which the window opens.
	Days [7]bool
	// Start and End are minutes after midnight; End may be 1440 (24:00).
	Start, End int
	Zone       *time.Location
}

// Equal reports whether two windows are the same.
func (w Window) Equal(o Window) bool {
	return w.Days == o.Days && w.Start == o.Start && w.End == o.End && w.Zone.String() == o.Zone.String()
}

// String renders the window as ParseWindows reads it.
func (w Window) String() string {
	var days []string
	for i := range 7 {
		if d := (i + 1) % 7; w.Days[d] { // from Monday
			days = append(days, strings.ToUpper(weekdays[d][:1])+weekdays[d][1:])
		}
	}
	list := strings.Join(days, ",")
	if len(days) == 7 {
		list = "daily"
	}
	clock := func(m int) string { return fmt.Sprintf("%02d:%02d", m/60, m%60) }
	return fmt.Sprintf("%s %s-%s %s", list, clock(w.Start), clock(w.End), w.Zone)
}

// String renders the windows as ParseWindows reads them.
func (ws Windows) String() string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = w.String()
	}
	return strings.Join(parts, "; ")
}

// ErrBadWindow is returned by ParseWindows for text that is not a rollout window.
var ErrBadWindow = errors.New("bad rollout window")

var weekdays = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// ParseWindows parses the text of AnnotationRolloutWindow. Time zones come from the
// system or, in the image, which has none, from Go's embedded database.
func ParseWindows(text string) (Windows, error) {
	var ws Windows
	for part := range strings.SplitSeq(text, ";") {
		fields := strings.Fields(part)
		if len(fields) == 0 {
			continue
		}
		w, err := parseWindow(fields)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %v", ErrBadWindow, strings.TrimSpace(part), err)
		}
		ws = append(ws, w)
	}
	if len(ws) == 0 {
		return nil, fmt.Errorf("%w: empty; want e.g. \"Mon-Fri 09:00-17:00 Europe/Berlin\"", ErrBadWindow)
	}
	return ws, nil
}

func parseWindow(fields []string) (Window, error) {
	if len(fields) < 2 || len(fields) > 3 {
		return Window{}, errors.New(`want days, a time range and a time zone, e.g. "Mon-Fri 09:00-17:00 UTC"`)
	}
	w := Window{Zone: time.UTC}
	if err := w.parseDays(fields[0]); err != nil {
		return Window{}, err
	}
	from, to, ok := strings.Cut(fields[1], "-")
	var err error
	if !ok {
		return Window{}, fmt.Errorf("time range %q: want HH:MM-HH:MM", fields[1])
	}
	if w.Start, err = parseClock(from, false); err != nil {
		return Window{}, err
	}
	if w.End, err = parseClock(to, true); err != nil {
		return Window{}, err
	}
	if len(fields) == 3 {
		if w.Zone, err = loadZone(fields[2]); err != nil || fields[2] == "Local" {
			return Window{}, fmt.Errorf("unknown time zone %q", fields[2])
		}
	}
	return w, nil
}

// zones keeps the time zones loaded: each load reads and parses the zone's file, and
// workloads' annotations are read at every admission.
var zones sync.Map

func loadZone(name string) (*time.Location, error) {
	if z, ok := zones.Load(name); ok {
		return z.(*time.Location), nil
	}
	z, err := time.LoadLocation(name)
	if err == nil {
		zones.Store(name, z)
	}
	return z, err
}

func (w *Window) parseDays(text string) error {
	if strings.EqualFold(text, "daily") {
		w.Days = [7]bool{true, true, true, true, true, true, true}
		return nil
	}
	for item := range strings.SplitSeq(strings.ToLower(text), ",") {
		from, to, isRange := strings.Cut(item, "-")
		first, last := weekday(from), weekday(to)
		if !isRange {
			last = first
		}
		if first < 0 || last < 0 {
			return fmt.Errorf("days %q: want Mon..Sun, ranges such as Mon-Fri, lists, or daily", text)
		}
		for d := first; ; d = (d + 1) % 7 {
			w.Days[d] = true
			if d == last {
				break
			}
		}
	}
	return nil
}

func weekday(name string) int {
	for i, d := range weekdays {
		if name == d {
			return i
		}
	}
	return -1
}

// parseClock parses HH:MM into minutes after midnight; 24:00 only as an end.
func parseClock(text string, end bool) (int, error) {
	t, err := time.Parse("15:04", text)
	switch {
	case err == nil:
		return t.Hour()*60 + t.Minute(), nil
	case end && text == "24:00":
		return 24 * 60, nil
	}
	return 0, fmt.Errorf("time %q: want HH:MM, 00:00 to 23:59 (24:00 as an end)", text)
}

// openings returns the window's openings that start on the day of t in its zone and
// the days around it, each with its end.
func (w Window) openings(t time.Time, days int) [][2]time.Time {
	local := t.In(w.Zone)
	var out [][2]time.Time
	for i := -1; i <= days; i++ {
		day := time.Date(local.Year(), local.Month(), local.Day()+i, 0, 0, 0, 0, w.Zone)
		if !w.Days[day.Weekday()] {
			continue
		}
		start := time.Date(day.Year(), day.Month(), day.Day(), 0, w.Start, 0, 0, w.Zone)
		endDay := day.Day()
		if w.End <= w.Start {
			endDay++ // past midnight
		}
		end := time.Date(day.Year(), day.Month(), endDay, 0, w.End, 0, 0, w.Zone)
		out = append(out, [2]time.Time{start, end})
	}
	return out
}

// Open reports whether a change may roll at t.
func (ws Windows) Open(t time.Time) bool {
	for _, w := range ws {
		for _, o := range w.openings(t, 0) {
			if !t.Before(o[0]) && t.Before(o[1]) {
				return true
			}
		}
	}
	return ws == nil
}

// NextOpen returns t when the windows are open at t, else when they next open: within
// a week, since every window opens at least once a week.
func (ws Windows) NextOpen(t time.Time) time.Time {
	if ws.Open(t) {
		return t
	}
	var next time.Time
	for _, w := range ws {
		for _, o := range w.openings(t, 7) {
			if o[0].After(t) && (next.IsZero() || o[0].Before(next)) {
				next = o[0]
			}
		}
	}
	return next
}
