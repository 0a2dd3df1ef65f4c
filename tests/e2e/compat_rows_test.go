package e2e

import (
	"testing"

	"github.com/confighash/confighash"
)

// The rows of Reloader's core, annotations, advanced and argo suites that run
// without the Secrets Store CSI driver and Vault (its csi label) and OpenShift (its
// openshift label), with their Reloader install: annotations strategy, one namespace,
// Argo Rollouts on. Its env-vars strategy rows check Reloader's STAKATER_ variable:
// confighash has one mechanism, the hash, so they are checked alike.

// The names of the documented differences, as sections of
// docs/migrating-from-reloader.md, "Behaviour that differs".
const (
	diffOwnNamespace = "Its own namespace"
)

var (
	cm      = source{name: "cm", uses: []use{envFrom}}
	cm2     = source{name: "cm2", uses: []use{envFrom}}
	sec     = source{name: "s", uses: []use{envFrom}}
	sec2    = source{name: "s2", uses: []use{envFrom}}
	cmNamed = map[string]string{confighash.ReloaderConfigMapReload: "{cm}"}
	sNamed  = map[string]string{confighash.ReloaderSecretReload: "{s}"}
	auto    = map[string]string{confighash.ReloaderAuto: "true"}
)

func uses(name string, u ...use) source { return source{name: name, uses: u} }

func merged(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func coreRows() []compatRow {
	var rows []compatRow
	add := func(r compatRow, kinds ...string) { rows = append(rows, forKinds(r, kinds...)...) }
	const at = "Workload Reload Tests Annotations Strategy "
	add(compatRow{spec: at + "should reload when ConfigMap changes", meta: cmNamed, sources: []source{cm}, changed: "cm"}, e5...)
	add(compatRow{spec: at + "should reload when Secret changes", meta: sNamed, sources: []source{sec}, changed: "s"}, e5...)
	add(compatRow{spec: at + "should reload with auto=true annotation when ConfigMap changes", meta: auto, sources: []source{cm}, changed: "cm"}, e5...)
	add(compatRow{spec: at + "should NOT reload when only ConfigMap labels change (no data change)", meta: cmNamed, sources: []source{cm}, changed: "cm", change: labelsOnly, want: notReloaded}, e5...)
	add(compatRow{spec: at + "should NOT reload when only Secret labels change (no data change)", meta: sNamed, sources: []source{sec}, changed: "s", change: labelsOnly, want: notReloaded}, e5...)
	// With --run-cronjobs-on-change, as Reloader does; by default the CronJob's next
	// run reads the new data (TestACronJobRunsOnChangeOncePerChange).
	const cron = at + "CronJob (special handling) "
	add(compatRow{spec: cron + "should trigger a Job when ConfigMap changes", meta: cmNamed, sources: []source{cm}, changed: "cm", want: jobStarted}, "CronJob")
	add(compatRow{spec: cron + "should trigger a Job when Secret changes", meta: sNamed, sources: []source{sec}, changed: "s", want: jobStarted}, "CronJob")
	add(compatRow{spec: cron + "should trigger a Job with auto=true annotation when ConfigMap changes", meta: auto, sources: []source{cm}, changed: "cm", want: jobStarted}, "CronJob")
	add(compatRow{spec: at + "should reload when volume-mounted ConfigMap changes", meta: cmNamed, sources: []source{uses("cm", volume)}, changed: "cm"}, e5...)
	add(compatRow{spec: at + "should reload when volume-mounted Secret changes", meta: sNamed, sources: []source{uses("s", volume)}, changed: "s"}, e5...)
	add(compatRow{spec: at + "should NOT reload without Reloader annotation", sources: []source{cm}, changed: "cm", want: notReloaded}, e3...)

	const edge = at + "Edge Cases "
	add(compatRow{spec: edge + "should reload with multiple ConfigMaps when any one changes", meta: map[string]string{confighash.ReloaderConfigMapReload: "{cm},{cm2}"},
		sources: []source{cm, {name: "cm2"}}, changed: "cm2"}, e5...)
	add(compatRow{spec: edge + "should reload with multiple Secrets when any one changes", meta: map[string]string{confighash.ReloaderSecretReload: "{s},{s2}"},
		sources: []source{sec, {name: "s2"}}, changed: "s2"}, e5...)
	add(compatRow{spec: edge + "should reload multiple times for sequential ConfigMap updates", meta: cmNamed, sources: []source{cm}, changed: "cm", again: true}, e5...)
	add(compatRow{spec: edge + "should reload when either ConfigMap or Secret changes", meta: merged(cmNamed, sNamed), sources: []source{cm, sec}, changed: "s"}, e5...)
	add(compatRow{spec: edge + "should NOT reload with auto=false annotation", meta: map[string]string{confighash.ReloaderAuto: "false"}, sources: []source{cm}, changed: "cm", want: notReloaded}, e5...)

	const pt = at + "Pod Template Annotations "
	add(compatRow{spec: pt + "should reload when ConfigMap annotation is on pod template only", pod: cmNamed, sources: []source{cm}, changed: "cm"}, e5...)
	add(compatRow{spec: pt + "should reload when Secret annotation is on pod template only", pod: sNamed, sources: []source{sec}, changed: "s"}, e5...)
	add(compatRow{spec: pt + "should reload when auto=true annotation is on pod template only", pod: auto, sources: []source{cm}, changed: "cm"}, e5...)
	add(compatRow{spec: pt + "should reload when annotations are on both workload and pod template", meta: cmNamed, pod: cmNamed, sources: []source{cm}, changed: "cm"}, e5...)
	add(compatRow{spec: pt + "should NOT reload when pod template has ConfigMap annotation but Secret is updated", pod: cmNamed,
		sources: []source{{name: "cm"}, sec}, changed: "s", want: notReloaded}, e5...)

	const ev = "Workload Reload Tests EnvVars Strategy "
	add(compatRow{spec: ev + "should add STAKATER_ env var when ConfigMap changes", meta: cmNamed, sources: []source{cm}, changed: "cm"}, e5...)
	add(compatRow{spec: ev + "should add STAKATER_ env var when Secret changes", meta: sNamed, sources: []source{sec}, changed: "s"}, e5...)
	add(compatRow{spec: ev + "should NOT add STAKATER_ env var when only ConfigMap labels change", meta: cmNamed, sources: []source{cm}, changed: "cm", change: labelsOnly, want: notReloaded}, e3...)
	add(compatRow{spec: ev + "should NOT add STAKATER_ env var when only Secret labels change", meta: sNamed, sources: []source{sec}, changed: "s", change: labelsOnly, want: notReloaded}, e3...)

	const rm = "Reference Method Tests "
	add(compatRow{spec: rm + "valueFrom.configMapKeyRef should reload when ConfigMap referenced via valueFrom.configMapKeyRef changes", meta: cmNamed, sources: []source{uses("cm", valueFrom)}, changed: "cm"}, e5...)
	add(compatRow{spec: rm + "valueFrom.secretKeyRef should reload when Secret referenced via valueFrom.secretKeyRef changes", meta: sNamed, sources: []source{uses("s", valueFrom)}, changed: "s"}, e5...)
	add(compatRow{spec: rm + "Projected Volumes should reload when ConfigMap in projected volume changes", meta: cmNamed, sources: []source{uses("cm", projected)}, changed: "cm"}, e5...)
	add(compatRow{spec: rm + "Projected Volumes should reload when Secret in projected volume changes", meta: sNamed, sources: []source{uses("s", projected)}, changed: "s"}, e5...)
	mixed := []source{uses("cm", projected), uses("s", projected)}
	add(compatRow{spec: rm + "Projected Volumes should reload when ConfigMap changes in mixed projected volume", meta: merged(cmNamed, sNamed), sources: mixed, changed: "cm"}, e5...)
	add(compatRow{spec: rm + "Projected Volumes should reload when Secret changes in mixed projected volume", meta: merged(cmNamed, sNamed), sources: mixed, changed: "s"}, e5...)
	add(compatRow{spec: rm + "Init Container with envFrom should reload when ConfigMap referenced by init container changes", meta: cmNamed, sources: []source{uses("cm", initEnvFrom)}, changed: "cm"}, e5...)
	add(compatRow{spec: rm + "Init Container with envFrom should reload when Secret referenced by init container changes", meta: sNamed, sources: []source{uses("s", initEnvFrom)}, changed: "s"}, e5...)
	add(compatRow{spec: rm + "Init Container with Volume Mount should reload when ConfigMap volume mounted in init container changes", meta: cmNamed, sources: []source{uses("cm", initVolume)}, changed: "cm"}, e5...)
	add(compatRow{spec: rm + "Init Container with Volume Mount should reload when Secret volume mounted in init container changes", meta: sNamed, sources: []source{uses("s", initVolume)}, changed: "s"}, e5...)
	add(compatRow{spec: rm + "Auto Annotation with valueFrom should reload with auto=true when ConfigMap referenced via valueFrom changes", meta: auto, sources: []source{uses("cm", valueFrom)}, changed: "cm"}, e5...)
	return rows
}

func annotationRows() []compatRow {
	var rows []compatRow
	add := func(r compatRow) { rows = append(rows, forKinds(r, "Deployment")...) }
	const ar = "Auto Reload Annotation Tests "
	add(compatRow{spec: ar + "with reloader.stakater.com/auto=true annotation should reload Deployment when any referenced ConfigMap changes", meta: auto, sources: []source{cm}, changed: "cm"})
	add(compatRow{spec: ar + "with reloader.stakater.com/auto=true annotation should reload Deployment when any referenced Secret changes", meta: auto, sources: []source{sec}, changed: "s"})
	add(compatRow{spec: ar + "with reloader.stakater.com/auto=true annotation should reload Deployment when either ConfigMap or Secret changes", meta: auto, sources: []source{cm, sec}, changed: "cm"})
	add(compatRow{spec: ar + "with configmap.reloader.stakater.com/auto=true annotation should reload Deployment only when ConfigMap changes, not Secret",
		meta: map[string]string{confighash.ReloaderConfigMapAuto: "true"}, sources: []source{cm, sec}, changed: "cm"})
	add(compatRow{spec: ar + "with secret.reloader.stakater.com/auto=true annotation should reload Deployment only when Secret changes, not ConfigMap",
		meta: map[string]string{confighash.ReloaderSecretAuto: "true"}, sources: []source{cm, sec}, changed: "s"})
	add(compatRow{spec: ar + "with auto annotation and explicit reload annotation together should reload when auto-detected resource changes",
		meta: merged(auto, cmNamed), sources: []source{cm, cm2}, changed: "cm2"})

	const cb = "Combination Annotation Tests "
	autoCM2 := merged(auto, map[string]string{confighash.ReloaderConfigMapReload: "{cm2}"})
	add(compatRow{spec: cb + "auto=true with explicit reload annotations should reload when both auto-detected and explicitly listed ConfigMaps change", meta: autoCM2, sources: []source{cm, {name: "cm2"}}, changed: "cm"})
	add(compatRow{spec: cb + "auto=true with explicit reload annotations should reload when explicitly listed ConfigMap changes with auto=true", meta: autoCM2, sources: []source{cm, {name: "cm2"}}, changed: "cm2"})
	add(compatRow{spec: cb + "auto=true with explicit reload annotations should reload when Secret changes with auto=true and explicit Secret annotation",
		meta: merged(auto, map[string]string{confighash.ReloaderSecretReload: "{s2}"}), sources: []source{sec, {name: "s2"}}, changed: "s2"})
	excludeCM2 := merged(auto, map[string]string{confighash.ReloaderConfigMapExclude: "{cm2}"})
	add(compatRow{spec: cb + "auto=true with exclude annotations should NOT reload when excluded ConfigMap changes", meta: excludeCM2, sources: []source{cm, cm2}, changed: "cm2", want: notReloaded})
	add(compatRow{spec: cb + "auto=true with exclude annotations should reload when non-excluded ConfigMap changes", meta: excludeCM2, sources: []source{cm, cm2}, changed: "cm"})
	add(compatRow{spec: cb + "auto=true with exclude annotations should NOT reload when excluded Secret changes",
		meta: merged(auto, map[string]string{confighash.ReloaderSecretExclude: "{s2}"}), sources: []source{sec, sec2}, changed: "s2", want: notReloaded})
	add(compatRow{spec: cb + "multiple explicit references should reload when any of multiple explicitly listed ConfigMaps change",
		meta: map[string]string{confighash.ReloaderConfigMapReload: "{cm},{cm2}"}, changed: "cm2"})
	add(compatRow{spec: cb + "multiple explicit references should reload when any of multiple explicitly listed Secrets change",
		meta: map[string]string{confighash.ReloaderSecretReload: "{s},{s2}"}, changed: "s"})
	add(compatRow{spec: cb + "multiple explicit references should reload when both ConfigMap and Secret annotations are present", meta: merged(cmNamed, sNamed), changed: "s"})

	const ex = "Exclude Annotation Tests "
	excludeCM := merged(auto, map[string]string{confighash.ReloaderConfigMapExclude: "{cm}"})
	excludeS := merged(auto, map[string]string{confighash.ReloaderSecretExclude: "{s}"})
	add(compatRow{spec: ex + "ConfigMap exclude annotation should NOT reload when excluded ConfigMap changes", meta: excludeCM, sources: []source{cm, cm2}, changed: "cm", want: notReloaded})
	add(compatRow{spec: ex + "ConfigMap exclude annotation should reload when non-excluded ConfigMap changes", meta: excludeCM, sources: []source{cm, cm2}, changed: "cm2"})
	add(compatRow{spec: ex + "Secret exclude annotation should NOT reload when excluded Secret changes", meta: excludeS, sources: []source{sec, sec2}, changed: "s", want: notReloaded})
	add(compatRow{spec: ex + "Secret exclude annotation should reload when non-excluded Secret changes", meta: excludeS, sources: []source{sec, sec2}, changed: "s2"})

	// With --pause-deployments, as Reloader, the reload pauses the Deployment for its
	// pause period (TestPauseDeploymentsPausesAsReloaderDoes); by default confighash
	// rolls the first change at once and holds the changes within the period after it
	// (TestReloaderPausePeriodRollsChangesMadeDuringItOnce).
	const pp = "Pause Period Tests with pause-period annotation "
	add(compatRow{spec: pp + "should pause Deployment after reload", meta: merged(cmNamed, map[string]string{confighash.ReloaderPausePeriod: "10s"}), sources: []source{cm}, changed: "cm", pausedAt: true})
	add(compatRow{spec: pp + "should NOT pause Deployment without pause-period annotation", meta: cmNamed, sources: []source{cm}, changed: "cm"})

	const ri = "Resource Ignore Annotation Tests with reloader.stakater.com/ignore annotation on resource "
	ignore := map[string]string{confighash.ReloaderIgnore: "true"}
	add(compatRow{spec: ri + "should NOT reload when ConfigMap has ignore=true annotation", meta: cmNamed, sources: []source{cm}, sourceAnnotations: map[string]map[string]string{"cm": ignore}, changed: "cm", want: notReloaded})
	add(compatRow{spec: ri + "should NOT reload when Secret has ignore=true annotation", meta: sNamed, sources: []source{sec}, sourceAnnotations: map[string]map[string]string{"s": ignore}, changed: "s", want: notReloaded})

	const sm = "Search and Match Annotation Tests with search and match annotations "
	search := map[string]string{confighash.ReloaderSearch: "true"}
	match := map[string]map[string]string{"cm": {confighash.ReloaderMatch: "true"}}
	add(compatRow{spec: sm + "should reload when workload has search annotation and ConfigMap has match annotation", meta: search, sources: []source{cm}, sourceAnnotations: match, changed: "cm"})
	add(compatRow{spec: sm + "should NOT reload when workload has search but ConfigMap has no match", meta: search, sources: []source{cm}, changed: "cm", want: notReloaded})
	add(compatRow{spec: sm + "should NOT reload when resource has match but no Deployment has search", sources: []source{cm}, sourceAnnotations: match, changed: "cm", want: notReloaded})
	// Its fourth test has two Deployments use one ConfigMap: here, two rows.
	add(compatRow{spec: sm + "should reload only the deployment with search annotation when multiple deployments use same ConfigMap (with search)", meta: search, sources: []source{cm}, sourceAnnotations: match, changed: "cm"})
	add(compatRow{spec: sm + "should reload only the deployment with search annotation when multiple deployments use same ConfigMap (without)", sources: []source{cm}, sourceAnnotations: match, changed: "cm", want: notReloaded})
	return rows
}

func advancedRows() []compatRow {
	var rows []compatRow
	add := func(r compatRow, kind string) { rows = append(rows, forKinds(r, kind)...) }
	const jr = "Job Workload Recreation Tests "
	add(compatRow{spec: jr + "Job with ConfigMap reference should recreate Job when referenced ConfigMap changes", meta: cmNamed, sources: []source{cm}, changed: "cm"}, "Job")
	add(compatRow{spec: jr + "Job with Secret reference should recreate Job when referenced Secret changes", meta: sNamed, sources: []source{sec}, changed: "s"}, "Job")
	add(compatRow{spec: jr + "Job with auto annotation should recreate Job with auto=true when ConfigMap changes", meta: auto, sources: []source{cm}, changed: "cm"}, "Job")
	add(compatRow{spec: jr + "Job with valueFrom ConfigMap reference should recreate Job when ConfigMap referenced via valueFrom changes", meta: cmNamed, sources: []source{uses("cm", valueFrom)}, changed: "cm"}, "Job")
	add(compatRow{spec: jr + "Job with valueFrom Secret reference should recreate Job when Secret referenced via valueFrom changes", meta: sNamed, sources: []source{uses("s", valueFrom)}, changed: "s"}, "Job")

	const mc = "Multi-Container Tests "
	add(compatRow{spec: mc + "Multiple containers same ConfigMap should reload when ConfigMap used by multiple containers changes", meta: auto, sources: []source{cm}, containers: 2, changed: "cm"}, "Deployment")
	add(compatRow{spec: mc + "Multiple containers different ConfigMaps should reload when any container's ConfigMap changes", meta: auto, sources: []source{cm, uses("cm2", secondEnvFrom)}, containers: 2, changed: "cm"}, "Deployment")

	const re = "Regex Pattern Tests "
	add(compatRow{spec: re + "ConfigMap regex pattern should reload when ConfigMap matching pattern changes", meta: map[string]string{confighash.ReloaderConfigMapReload: "{cm}.*"}, sources: []source{cm}, changed: "cm"}, "Deployment")
	add(compatRow{spec: re + "ConfigMap regex pattern should NOT reload when ConfigMap NOT matching pattern changes", meta: map[string]string{confighash.ReloaderConfigMapReload: "{cm}"}, sources: []source{cm, {name: "cm2"}}, changed: "cm2", want: notReloaded}, "Deployment")
	add(compatRow{spec: re + "Secret regex pattern should reload when Secret matching pattern changes", meta: map[string]string{confighash.ReloaderSecretReload: "{s}.*"}, sources: []source{sec}, changed: "s"}, "Deployment")

	// Argo's suite: the default strategy rolls the Rollout's template; with restart,
	// spec.restartAt is set and the template left alone, as Reloader does
	// (TestAnArgoRolloutWithTheRestartStrategyIsRestartedOncePerChange).
	const argo = "Argo Rollout Strategy Tests Rollout strategy annotation "
	add(compatRow{spec: argo + "should use default rollout strategy (annotation-based reload)", meta: cmNamed, sources: []source{cm}, changed: "cm"}, "Rollout")
	add(compatRow{spec: argo + "should use restart strategy when specified (sets restartAt field)", meta: merged(cmNamed, map[string]string{"reloader.stakater.com/rollout-strategy": "restart"}),
		sources: []source{cm}, changed: "cm", want: restarted}, "Rollout")
	return rows
}

// TestReloaderSuiteCompatibility runs the rows of Reloader's core, annotations,
// advanced and argo suites against one install with the settings
// docs/migrating-from-reloader.md gives for Reloader's: Reloader's annotations, Argo
// Rollouts served, finished Jobs recreated (--recreate-finished-jobs), a CronJob's
// Job started at once (--run-cronjobs-on-change) and a Deployment paused for its pause
// period (--pause-deployments), as Reloader does.
func TestReloaderSuiteCompatibility(t *testing.T) {
	c := sharedCluster(t)
	installRolloutCRD(t, c)
	startWebhook(t, c)
	w := startWatcher(t, c, "--recreate-finished-jobs", "--run-cronjobs-on-change", "--pause-deployments")
	ns := labeledNamespace(t, c)
	rows := append(append(coreRows(), annotationRows()...), advancedRows()...)
	t.Logf("%d rows", len(rows))
	compatRun(t, c, w, ns, rows)
}
