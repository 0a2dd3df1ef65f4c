package confighash

import "fmt"

// meaning is what one of Reloader's workload annotations is read as.
type meaning int

const (
	optIn    meaning = iota // "true" opts in (for its kind, if it has one); untyped "false" opts out
	searchIn                // "true" opts in, counting only matching sources
	named                   // names sources to hash, used or not: regular expressions on whole names
	excluded                // names sources never to hash
	pause                   // AnnotationPausePeriod, unless that is set
	strategy                // "restart": an Argo Rollout's pods are restarted (Policy.RolloutRestart)
)

// reloaderWorkload is Reloader's vocabulary on a workload: each annotation, what it
// is read as, and for which kind of source ("" for both). On a source,
// ReloaderIgnore and ReloaderMatch are AnnotationIgnore and AnnotationMatch.
var reloaderWorkload = []struct {
	annotation string
	as         meaning
	kind       SourceKind
}{
	{ReloaderAuto, optIn, ""},
	{ReloaderConfigMapAuto, optIn, ConfigMap},
	{ReloaderSecretAuto, optIn, Secret},
	{ReloaderConfigMapReload, named, ConfigMap},
	{ReloaderSecretReload, named, Secret},
	{ReloaderSearch, searchIn, ""},
	{ReloaderConfigMapExclude, excluded, ConfigMap},
	{ReloaderSecretExclude, excluded, Secret},
	{ReloaderPausePeriod, pause, ""},
	{ReloaderRolloutStrategy, strategy, ""},
	{ReloaderSecretProviderClassAuto, optIn, SecretProviderClass},
	{ReloaderSecretProviderClassReload, named, SecretProviderClass},
	{ReloaderSecretProviderClassExclude, excluded, SecretProviderClass},
}

// Vocabulary is which annotations confighash reads, and which kinds of sources.
type Vocabulary struct {
	// Reloader also reads stakater/Reloader's annotations, as aliases.
	Reloader bool
	// CSI counts the Secrets Store CSI SecretProviderClasses that pods mount, as
	// Reloader's --enable-csi-integration.
	CSI bool
	// Ignored are the source kinds that never count, for any workload of the install,
	// as Reloader's --resources-to-ignore.
	Ignored SourceKinds
}

// notCounted says why a typed annotation of a kind that cannot count is ignored.
func (v Vocabulary) notCounted(kind SourceKind) string {
	if v.Ignored.Has(kind) {
		return fmt.Sprintf("%ss are ignored by --resources-to-ignore (the chart's ignoreConfigMaps or ignoreSecrets); ignored", kind)
	}
	return "SecretProviderClasses count only with --enable-csi-integration (the chart's enableCSIIntegration); ignored"
}

// kinds are the source kinds that can count.
func (v Vocabulary) kinds() SourceKinds {
	kinds := SourceKindsOf(ConfigMap, Secret).With(SecretProviderClass, v.CSI)
	for _, k := range v.Ignored.All() {
		kinds = kinds.With(k, false)
	}
	return kinds
}

// OptInAnnotations are the workload annotations that can opt a workload in: the
// webhook's matchConditions send the API server's request only when one is present.
func (v Vocabulary) OptInAnnotations() []string {
	names := []string{AnnotationInject, AnnotationIncludeConfigMaps, AnnotationIncludeSecrets}
	if v.Reloader {
		for _, a := range reloaderWorkload {
			if (a.as == optIn || a.as == searchIn || a.as == named) && (a.kind != SecretProviderClass || v.CSI) {
				names = append(names, a.annotation)
			}
		}
	}
	return names
}
