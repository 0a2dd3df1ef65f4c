package confighash

// stakater/Reloader's annotations, read as aliases of confighash's own when
// Vocabulary.Reloader is set, so that workloads annotated for Reloader keep working
// unchanged. docs/migrating-from-reloader.md maps each one.
const (
	// ReloaderAuto "true" opts in like AnnotationInject; "false" opts out, winning
	// over every opt-in of either vocabulary.
	ReloaderAuto = "reloader.stakater.com/auto"
	// ReloaderConfigMapAuto and ReloaderSecretAuto opt in for one kind of source.
	ReloaderConfigMapAuto = "configmap.reloader.stakater.com/auto"
	ReloaderSecretAuto    = "secret.reloader.stakater.com/auto"
	// ReloaderConfigMapReload and ReloaderSecretReload name sources to hash, used or
	// not: each entry is a regular expression matched against whole names.
	ReloaderConfigMapReload = "configmap.reloader.stakater.com/reload"
	ReloaderSecretReload    = "secret.reloader.stakater.com/reload"
	// ReloaderConfigMapExclude and ReloaderSecretExclude name sources never to hash.
	ReloaderConfigMapExclude = "configmaps.exclude.reloader.stakater.com/reload"
	ReloaderSecretExclude    = "secrets.exclude.reloader.stakater.com/reload"
	// ReloaderSearch opts in, counting only used sources that carry ReloaderMatch.
	ReloaderSearch = "reloader.stakater.com/search"
	// ReloaderMatch and ReloaderIgnore on a source: AnnotationMatch and AnnotationIgnore.
	ReloaderMatch  = "reloader.stakater.com/match"
	ReloaderIgnore = "reloader.stakater.com/ignore"
	// ReloaderPausePeriod is AnnotationPausePeriod.
	ReloaderPausePeriod = "deployment.reloader.stakater.com/pause-period"
)

// reloaderUnsupported are Reloader's annotations that have no confighash equivalent,
// with the reason a user is told once per workload.
var reloaderUnsupported = []struct{ annotation, reason string }{
	{"reloader.stakater.com/rollout-strategy", "confighash rolls through the pod template, " +
		"so an Argo Rollout rolls with its own strategy; the restart strategy has no equivalent"},
	{"secretproviderclass.reloader.stakater.com/auto", "Secrets Store CSI SecretProviderClasses are not sources confighash hashes"},
	{"secretproviderclass.reloader.stakater.com/reload", "Secrets Store CSI SecretProviderClasses are not sources confighash hashes"},
}

// Vocabulary is which annotations confighash reads.
type Vocabulary struct {
	// Reloader also reads stakater/Reloader's annotations, as aliases.
	Reloader bool
}

// OptInAnnotations are the workload annotations that can opt a workload in: the
// webhook's matchConditions send the API server's request only when one is present.
func (v Vocabulary) OptInAnnotations() []string {
	names := []string{AnnotationInject, AnnotationIncludeConfigMaps, AnnotationIncludeSecrets}
	if v.Reloader {
		names = append(names, ReloaderAuto, ReloaderConfigMapAuto, ReloaderSecretAuto,
			ReloaderConfigMapReload, ReloaderSecretReload, ReloaderSearch)
	}
	return names
}
