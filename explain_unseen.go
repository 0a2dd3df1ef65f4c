package confighash

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// What explain says from a namespace's view rights alone: no Secrets, no hash key, maybe
// not the namespace. Digests cannot be compared then; when the sources were written,
// what the watcher wrote on the workload and the markers can still be read.

// keylessVerdict is the verdict when digests cannot be compared: without the hash key,
// or without the sources of a kind the workload uses. It rests on the sources written
// since the workload's last admission, which hashed what was there before, and on what
// the watcher wrote on the workload.
func keylessVerdict(in ExplainInput, state State, d Decision, status Status) (verdict, why string) {
	triggers, _ := ParseTriggers(in.Workload.Annotations[AnnotationTrigger])
	// A paced workload keeps its hash at any write the watcher did not release: only
	// the touches it named tell what was hashed. So where the pacing is not known.
	admitted := in.Admitted
	if in.ModeUnseen || d.gated(in.Sources, state.Flapping) {
		admitted = time.Time{}
	}
	var changed []string
	var unread, untimed []SourceRef
	for _, o := range d.Observations {
		wr, timed := in.Written[o.SourceRef]
		switch {
		case !o.Counts:
		case in.Hidden.Has(o.Kind):
			unread = append(unread, o.SourceRef)
		case !o.Present: // deleting a source rolls nothing
		case !timed:
			untimed = append(untimed, o.SourceRef)
		default:
			if since := writtenSince(o.SourceRef, wr, triggers, admitted); since != "" {
				changed = append(changed, since)
			}
		}
	}
	var unknowns []string
	if len(unread) > 0 {
		unknowns = append(unknowns, ListRefs(unread)+" could not be read")
	}
	if len(untimed) > 0 {
		unknowns = append(unknowns, "when "+ListRefs(untimed)+" changed is not known")
	}
	unknown := strings.Join(unknowns, "; ")
	if unknown == "" {
		unknown = "digests cannot be compared without the hash key"
	}
	switch {
	case !state.Held.IsZero():
		return VerdictHeld, HoldOf(HoldHalted).Told(HoldFacts{Failed: state.Held.Change})
	case len(state.Flapping) > 0:
		return VerdictHeld, flappingWhy(state, in.Flapping)
	case len(changed) == 0 && len(unknowns) > 0:
		return VerdictUnknown, "the sources that count and could be read were last written before the workload's last admission, which hashed them; " + unknown + ", so whether a rollout is due is not known"
	case len(changed) == 0:
		return VerdictUpToDate, "every source that counts was last written before the workload's last admission, which hashed it (" + unknown + ")"
	}
	since := strings.Join(changed, "; ")
	switch {
	case in.Flapping != "":
		return VerdictHeld, since + "; the watcher said: " + in.Flapping
	case pausing(status, in.Now):
		return VerdictHeld, fmt.Sprintf("%s; the watcher rolled it at %s and holds further changes for its pause period, until %s: it rolls then if a key that counts changed", since, stamp(status.At), stamp(status.Until))
	case holding(status, in.Now):
		return VerdictHeld, since + "; the watcher holds it: " + status.Why
	}
	return VerdictUnknown, since + ", and the watcher has not rolled it since: a rollout is pending if a key that counts changed (" + unknown + ")"
}

// writtenSince says how a source was written after the workload's last admission, or ""
// when that admission saw its last write: at a resource version no later than the
// last touch named (the touch was admitted after the watcher saw it), or a second or
// more before the workload's last write, admitted (zero when not known).
func writtenSince(ref SourceRef, wr Written, triggers []Trigger, admitted time.Time) string {
	named := ""
	for _, t := range triggers {
		if t.SourceRef == ref {
			named = t.ResourceVersion
		}
		if order, err := resourceversion.CompareResourceVersion(wr.ResourceVersion, t.ResourceVersion); err == nil && order <= 0 {
			return ""
		}
	}
	if wr.Time.Before(admitted) {
		return ""
	}
	switch {
	case named != "":
		return fmt.Sprintf("%s was written after the last rollout (resourceVersion %s > %s)", ref, wr.ResourceVersion, named)
	case admitted.IsZero():
		return fmt.Sprintf("%s was last written at %s, and no admission is known to have hashed it since", ref, stamp(wr.Time))
	}
	return fmt.Sprintf("%s was last written at %s, after the workload was last written", ref, stamp(wr.Time))
}

// pausing reports whether a status tells a rollout whose pause period has not ended.
func pausing(s Status, now time.Time) bool { return s.Act == ActRolled && s.Until.After(now) }

// holding reports whether a status tells a hold that has not ended.
func holding(s Status, now time.Time) bool {
	return s.Act == ActHeld && (s.Until.IsZero() || s.Until.After(now))
}

// statusWords renders what the watcher last decided for people: "act at time[, until
// time]: why".
func statusWords(s Status) string {
	if s.Act == "" {
		return ""
	}
	out := string(s.Act) + " at " + stamp(s.At)
	if !s.Until.IsZero() {
		out += ", until " + stamp(s.Until)
	}
	return out + ": " + s.Why
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// modeFrom is how confighash acts in a namespace that could not be read, from the
// workload: one it admitted is in a namespace it acts in, for every workload there
// unless the workload opts in itself.
func modeFrom(state State) Mode {
	if state.met() && !state.Policy.Enabled() {
		return ModeEvery
	}
	return ModeOptedIn
}

// neverAdmitted says why a workload of a namespace that could not be read carries no
// record and no hash.
func neverAdmitted(namespace string, e Explanation) string {
	why := "never admitted by confighash: it carries no sources record and no hash; "
	unlabelled := fmt.Sprintf("its namespace %s lacks the label %s=%s (explain could not read the namespace to tell)", namespace, InjectionLabel, InjectionEnabled)
	if !e.OptedIn {
		return why + "it does not opt in (" + e.OptIn + "), or " + unlabelled
	}
	return why + "most likely " + unlabelled + ": in a labelled namespace the webhook hashes an opted-in workload when it is created, and the watcher records one it meets unhashed"
}

// usesHidden reports whether the workload uses or names a source of a kind that could
// not be listed: its hash cannot be recomputed.
func usesHidden(d Decision, hidden SourceKinds) bool {
	return slices.ContainsFunc(d.Observations, func(o Observation) bool { return o.Counts && hidden.Has(o.Kind) })
}

// booleanOptIn reports whether an opt-in annotation takes "true" or "false".
func booleanOptIn(name string) bool {
	for _, a := range reloaderWorkload {
		if a.annotation == name && (a.as == optIn || a.as == searchIn) {
			return true
		}
	}
	return name == AnnotationInject
}

// booleanValues are the values a boolean annotation takes, as strconv.ParseBool reads
// them.
const booleanValues = `"true" or "false" (also 1, t, T, TRUE, True, 0, f, F, FALSE, False)`

// flappingWhy tells the hold of a workload marked held for sources that keep
// changing, and what the watcher last said of who writes them.
func flappingWhy(state State, said string) string {
	why := HoldOf(HoldFlapping).Told(HoldFacts{Flapping: state.Flapping})
	if said != "" {
		why += "; the watcher said: " + said
	}
	return why
}
