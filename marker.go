package confighash

import (
	"fmt"
	"strings"
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
