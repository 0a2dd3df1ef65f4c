package confighash

import "fmt"

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
	// ReloaderSecretProviderClassExclude names SecretProviderClasses never to hash.
	ReloaderSecretProviderClassExclude = "secretproviderclasses.exclude.reloader.stakater.com/reload"
	// ReloaderSearch opts in, counting only used sources that carry ReloaderMatch.
	ReloaderSearch = "reloader.stakater.com/search"
	// ReloaderMatch and ReloaderIgnore on a source: AnnotationMatch and AnnotationIgnore.
	ReloaderMatch  = "reloader.stakater.com/match"
	ReloaderIgnore = "reloader.stakater.com/ignore"
	// ReloaderPausePeriod is AnnotationPausePeriod.
	ReloaderPausePeriod = "deployment.reloader.stakater.com/pause-period"
	// ReloaderSecretProviderClassAuto and ReloaderSecretProviderClassReload are the
	// typed auto and the named list of Secrets Store CSI SecretProviderClasses; they
	// count when Vocabulary.CSI is set.
	ReloaderSecretProviderClassAuto   = "secretproviderclass.reloader.stakater.com/auto"
	ReloaderSecretProviderClassReload = "secretproviderclass.reloader.stakater.com/reload"
)

// meaning is what one of Reloader's workload annotations is read as.
type meaning int

const (
	optIn    meaning = iota // "true" opts in (for its kind, if it has one); untyped "false" opts out
	searchIn                // "true" opts in, counting only matching sources
	named                   // names sources to hash, used or not: regular expressions on whole names
	excluded                // names sources never to hash
	pause                   // AnnotationPausePeriod, unless that is set
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
	{ReloaderSecretProviderClassAuto, optIn, SecretProviderClass},
	{ReloaderSecretProviderClassReload, named, SecretProviderClass},
	{ReloaderSecretProviderClassExclude, excluded, SecretProviderClass},
}

// reloader reads Reloader's workload annotations into p, and reports whether they opt
// in to every kind of source.
func (r *policyReader) reloader(p *Policy, v Vocabulary) (all bool) {
	var auto, search bool
	for _, a := range reloaderWorkload {
		kinds := p.kinds
		if a.kind != "" {
			kinds = a.kind.bit()
		}
		if a.kind != "" && !p.kinds.Has(a.kind) {
			if value, ok := r.get(a.annotation); ok {
				r.problem(a.annotation, value, v.notCounted(a.kind))
			}
			continue
		}
		switch a.as {
		case optIn, searchIn:
			on, set := r.boolean(a.annotation)
			if set {
				p.decided |= kinds
			}
			switch {
			case a.as == searchIn:
				all, search = all || on, on
			case a.kind == "":
				all, auto, p.OptOut = all || on, on, p.OptOut || set && !on
			default:
				p.Discover = p.Discover.With(a.kind, on)
			}
		case named:
			refs, patterns := r.patterns(a.annotation, a.kind)
			p.Include = append(p.Include, refs...)
			p.Patterns = append(p.Patterns, patterns...)
		case excluded:
			p.Exclude = append(p.Exclude, r.names(a.annotation, a.kind)...)
		case pause:
			if p.PausePeriod == 0 {
				p.PausePeriod = r.duration(a.annotation)
			}
		}
	}
	// As in Reloader, auto wins over search: every used source counts.
	p.Search = p.Search || search && !auto
	for _, u := range reloaderUnsupported {
		if value, ok := r.get(u.annotation); ok {
			r.problem(u.annotation, value, "has no confighash equivalent and is ignored: "+u.reason)
		}
	}
	return all
}

// reloaderUnsupported are Reloader's annotations that have no confighash equivalent,
// with the reason a user is told once per workload.
var reloaderUnsupported = []struct{ annotation, reason string }{
	{"reloader.stakater.com/rollout-strategy", "confighash rolls through the pod template, " +
		"so an Argo Rollout rolls with its own strategy; the restart strategy has no equivalent"},
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
