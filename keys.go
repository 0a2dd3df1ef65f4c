package confighash

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Where a key is read or written: on a workload (its metadata or pod template), on a
// source, on a Namespace.
type Place uint8

// The places.
const (
	OnWorkload Place = iota
	OnSource
	OnNamespace
)

func (p Place) String() string {
	return [...]string{"workloads", "ConfigMaps and Secrets", "Namespaces"}[p]
}

// keys are the annotation and label keys confighash and Reloader's vocabulary read or
// write, by where; a key under either prefix that is in none is a typo or a no-op.
var keys = [...][]string{
	OnWorkload: {
		AnnotationInject, AnnotationOnly, AnnotationIncludeConfigMaps, AnnotationIncludeSecrets,
		AnnotationExcludeConfigMaps, AnnotationExcludeSecrets, AnnotationSearch, AnnotationPausePeriod,
		AnnotationRolloutWindow, AnnotationWaveSize, AnnotationPin, AnnotationHash, AnnotationSources,
		AnnotationAdopted, AnnotationTrigger, AnnotationRelease, AnnotationHeld, AnnotationFailed, AnnotationFlapping, AnnotationReverted, AnnotationStatus, AnnotationOnFailure,
		AnnotationCanary, AnnotationBake, AnnotationAnalysis, AnnotationBaking,
		AnnotationPinned, AnnotationRemakeSnapshots, AnnotationNotPinned, AnnotationRecreatedFrom,
		AnnotationRecreateFinished, LabelRecreationOf, AnnotationReplaces, AnnotationRunOnChange, AnnotationRunDue,
		AnnotationSeal, AnnotationSealedAt, AnnotationSealedAtSeal, AnnotationRestart, AnnotationRestartToken, AnnotationRestartedHash,
		ReloaderAuto, ReloaderConfigMapAuto, ReloaderSecretAuto, ReloaderConfigMapReload, ReloaderSecretReload,
		ReloaderConfigMapExclude, ReloaderSecretExclude, ReloaderSecretProviderClassExclude, ReloaderSearch,
		ReloaderPausePeriod, ReloaderPausedAt, ReloaderSecretProviderClassAuto, ReloaderSecretProviderClassReload,
		ReloaderRolloutStrategy,
		// Reloader writes it; read by no one here, it is no typo.
		"reloader.stakater.com/last-reloaded-from",
	},
	OnSource: {
		AnnotationMatch, AnnotationIgnore, AnnotationWaveSize, AnnotationOnFailure, AnnotationCanary, AnnotationBake, AnnotationAnalysis, LabelSnapshotOf, ReloaderMatch, ReloaderIgnore,
		// On the sealed record of a Job's recreation, a Secret.
		AnnotationSeal, AnnotationSealedAt, AnnotationSealedAtSeal, LabelRecreationOf, AnnotationReplaces,
	},
	OnNamespace: {InjectionLabel, AnnotationRolloutWindow, AnnotationWaveSize, AnnotationPin, AnnotationOnFailure, AnnotationCanary, AnnotationBake, AnnotationAnalysis},
}

const reloaderDomain = "reloader.stakater.com/"

// ours reports whether the key is under confighash's prefix, or, with reloader,
// Reloader's (reloader.stakater.com/ and its typed forms, such as
// configmap.reloader.stakater.com/).
func ours(key string, reloader bool) bool {
	if strings.HasPrefix(key, Domain+"/") {
		return true
	}
	prefix, _, ok := strings.Cut(key, "/")
	return reloader && ok && (prefix+"/" == reloaderDomain || strings.HasSuffix(prefix, "."+strings.TrimSuffix(reloaderDomain, "/")))
}

// UnknownKeys returns a problem for each key of the map under confighash's prefix
// (and, with reloader, Reloader's) that nothing reads at the place: a typo, with the
// nearest known key, or a key read elsewhere. At most maxProblems are returned, so a
// map of many costs a bounded search.
func UnknownKeys(m map[string]string, at Place, reloader bool) []Problem {
	var out []Problem
	for k, v := range m {
		if !ours(k, reloader) || slices.Contains(keys[at], k) {
			continue
		}
		if len(out) == maxProblems {
			break
		}
		out = append(out, Problem{k, v, unknownReason(k, at, reloader)})
	}
	return out
}

// unknownReason says where a known key is read instead, or the nearest key read here.
func unknownReason(key string, at Place, reloader bool) string {
	for p, ks := range keys {
		if Place(p) != at && slices.Contains(ks, key) {
			return fmt.Sprintf("read on %s, not on %s; ignored", Place(p), at)
		}
	}
	best, dist := "", len(key)
	for _, k := range keys[at] {
		if !ours(k, reloader) {
			continue
		}
		if d := editDistance(key, k); d < dist {
			best, dist = k, d
		}
	}
	if best != "" && dist <= max(2, len(best)/4) {
		return fmt.Sprintf("not a key confighash reads; did you mean %s?", best)
	}
	return "not a key confighash reads; ignored"
}

// editDistance is the Levenshtein distance of two keys, which the API server bounds
// (a prefix of 253 bytes, a name of 63).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Problem is a bad annotation value. The annotation is ignored; every other setting
// still applies. Adapters surface it as an admission warning or an Event.
type Problem struct {
	Annotation string
	Value      string
	Reason     string
}

func (p Problem) Error() string {
	value := p.Value
	if len(value) > problemValueBytes {
		value = value[:problemValueBytes] + "..."
	}
	return fmt.Sprintf("annotation %s=%q: %s", p.Annotation, value, p.Reason)
}

// problemValueBytes is how much of a bad value a problem quotes.
const problemValueBytes = 64

// maxProblems is how many problems are reported one by one; the rest are counted.
const maxProblems = 10

func isTrue(v string) bool {
	b, _ := strconv.ParseBool(strings.TrimSpace(v))
	return b
}
