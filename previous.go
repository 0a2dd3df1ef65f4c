package confighash

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Previous is the object an update replaces, as Decide reads it: an apply may drop
// what confighash wrote on it, a return to an earlier revision may bring back that
// revision's metadata, and a changed pod template rolls the workload by itself. Each
// part is decoded only when the decision needs it: most updates need none.
type Previous struct {
	// Annotations returns its metadata annotations, nil if it cannot be read.
	Annotations func() map[string]string
	// Workload returns it decoded, nil if it cannot be read.
	Workload func() *Workload
}

// carry returns the state of the update with what the previous object says.
func (p *Previous) carry(s State, pacing Pacing) State {
	s = p.inherit(s)
	if s.Policy.Pacing.Over(pacing).Pinned() || s.Pins != nil {
		s = p.pinned(s)
	}
	return s
}

// inherit takes the sources record and the adoption from the previous object when the
// new one lacks them: an apply that replaces the whole object drops them, and losing
// them would lose baselines, deleted sources' last digests and the adoption.
func (p *Previous) inherit(s State) State {
	if s.Record == nil && s.RecordErr == nil {
		if text, ok := p.Annotations()[AnnotationSources]; ok {
			s.Record, s.RecordErr = ParseRecord(text)
			s.Form = RecordForm(text)
		}
	}
	if s.Adopted == "" {
		s.Adopted = p.Annotations()[AnnotationAdopted]
	}
	return s
}

// pinned returns the state of a pinned workload from what the previous object was
// pinned to.
func (p *Previous) pinned(s State) State {
	var was Pins
	if old := p.Workload(); old != nil {
		was = TemplatePins(old.Template)
	}
	switch {
	case s.Pins == nil:
		// An apply of a manifest that names the sources: the pins stay as they were.
		s.Pins = was
	case !slices.Equal(s.Pins, was):
		// A return to an earlier revision (kubectl rollout undo), which may bring its
		// metadata back too: what the workload ran until now is what it returns from.
		text := p.Annotations()[AnnotationSources]
		if record, err := ParseRecord(text); err == nil {
			s.Record, s.RecordErr, s.Form = record, nil, RecordForm(text)
		}
	}
	return s
}

// templateChanged reports whether the update changes the pod template, apart from the
// hash: the workload rolls by itself, and its new pods read the current data.
func (p *Previous) templateChanged(now *corev1.PodTemplateSpec) bool {
	old := p.Workload()
	return old != nil && now != nil && TemplateChanged(old.Template, now)
}
