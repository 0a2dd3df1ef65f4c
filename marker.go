package confighash

import (
	"fmt"
	"strings"
	"time"
)

// Marker is what the watcher writes on the workloads of a wave that halted
// (AnnotationHeld, AnnotationFailed): the source change the wave rolled, and the hash
// the workload was held from or failed at. The markers, in the API server, keep a
// halt across restarts; the watcher, explain and resume read them with ParseMarker.
type Marker struct {
	Change Trigger
	Hash   string
}

func (m Marker) String() string {
	if m.IsZero() {
		return ""
	}
	return m.Change.String() + " " + m.Hash
}

// IsZero reports whether there is no marker.
func (m Marker) IsZero() bool { return m == Marker{} }

// maxMarkerBytes bounds a marker before it is split: a source's kind, name (253 bytes)
// and resourceVersion, then a hash, with room to spare.
const maxMarkerBytes = 512

// ParseMarker reads a marker, "" as none.
func ParseMarker(text string) (Marker, error) {
	if text == "" {
		return Marker{}, nil
	}
	if len(text) > maxMarkerBytes {
		return Marker{}, fmt.Errorf("a marker of %d bytes, more than %d", len(text), maxMarkerBytes)
	}
	change, hash, ok := strings.Cut(text, " ")
	if !ok || hash == "" || strings.Contains(hash, " ") {
		return Marker{}, fmt.Errorf("marker %q: want kind/name@version hash", text)
	}
	triggers, err := ParseTriggers(change)
	if err != nil || len(triggers) != 1 {
		return Marker{}, fmt.Errorf("marker %q: want kind/name@version hash", text)
	}
	return Marker{Change: triggers[0], Hash: hash}, nil
}

// maxFlappingBytes bounds the flapping marker (AnnotationFlapping): the triggers of a
// few sources. The watcher writes the first that fit; a longer one is none.
const maxFlappingBytes = 2048

// FlappingMarker is the text of AnnotationFlapping for the sources that keep changing:
// as many of their triggers as fit.
func FlappingMarker(changes []Trigger) string {
	text := ""
	for _, t := range changes {
		next := t.String()
		if text != "" {
			next = text + "," + next
		}
		if len(next) > maxFlappingBytes {
			break
		}
		text = next
	}
	return text
}

// ParseFlapping reads AnnotationFlapping, "" as none.
func ParseFlapping(text string) ([]Trigger, error) {
	if text == "" {
		return nil, nil
	}
	if len(text) > maxFlappingBytes {
		return nil, fmt.Errorf("a flapping marker of %d bytes, more than %d", len(text), maxFlappingBytes)
	}
	return ParseTriggers(text)
}

// Baking is the marker of a workload in a change's first wave (AnnotationBaking): the
// change and the hash it rolls to, as a Marker; the bake; and, once rolled out, from
// when it bakes. "ConfigMap/app@41 9f2c… 5m0s 2026-11-29T12:00:00Z".
type Baking struct {
	Marker
	Bake  time.Duration
	Since time.Time
}

func (b Baking) String() string {
	if b.IsZero() {
		return ""
	}
	text := b.Marker.String() + " " + b.Bake.String()
	if !b.Since.IsZero() {
		text += " " + b.Since.UTC().Format(time.RFC3339)
	}
	return text
}

// Equal reports whether two baking markers are the same.
func (b Baking) Equal(o Baking) bool {
	return b.Marker == o.Marker && b.Bake == o.Bake && b.Since.Equal(o.Since)
}

// Until is when its bake ends; zero before it rolled out.
func (b Baking) Until() time.Time {
	if b.Since.IsZero() {
		return time.Time{}
	}
	return b.Since.Add(b.Bake)
}

// ParseBaking reads AnnotationBaking, "" as none.
func ParseBaking(text string) (Baking, error) {
	if text == "" {
		return Baking{}, nil
	}
	if len(text) > maxMarkerBytes {
		return Baking{}, fmt.Errorf("a baking marker of %d bytes, more than %d", len(text), maxMarkerBytes)
	}
	fields := strings.Fields(text)
	bad := fmt.Errorf("baking marker %q: want kind/name@version hash bake [since]", text)
	if len(fields) < 3 || len(fields) > 4 {
		return Baking{}, bad
	}
	m, err := ParseMarker(fields[0] + " " + fields[1])
	if err != nil {
		return Baking{}, bad
	}
	b := Baking{Marker: m}
	if b.Bake, err = time.ParseDuration(fields[2]); err != nil || b.Bake < 0 || b.Bake > maxBake {
		return Baking{}, bad
	}
	if len(fields) == 4 {
		if b.Since, err = time.Parse(time.RFC3339, fields[3]); err != nil {
			return Baking{}, bad
		}
	}
	return b, nil
}
