package e2e

import (
	"slices"
	"strings"
	"testing"

	"github.com/confighash/confighash"
)

// Reloader's flags suite: each of its contexts installs Reloader with some flags; here,
// confighash with the equivalent docs/migrating-from-reloader.md gives, and the
// namespaces labelled as a migrating user labels them.

type flagsContext struct {
	name  string // Reloader's Describe and Context
	flags []string
	// places are where its rows run: each a namespace's labels (nil: the install
	// namespace) and the rows there.
	places []place
}

type place struct {
	labels map[string]string
	rows   []compatRow
}

var enabled = map[string]string{confighash.InjectionLabel: confighash.InjectionEnabled}

func flagsContexts(scoped string) []flagsContext {
	deployment := func(spec string, meta map[string]string, src source, changed string, how change, want outcome, differs string) compatRow {
		return compatRow{spec: spec, kind: "Deployment", meta: meta, sources: []source{src}, changed: changed, change: how, want: want, differs: differs}
	}
	autoCM := func(spec string, want outcome) compatRow {
		return deployment(spec, auto, cm, "cm", updateData, want, "")
	}
	all := []string{"deployments", "statefulsets", "daemonsets", "cronjobs", "jobs", "rollouts"}
	without := func(drop ...string) string {
		var kept []string
		for _, k := range all {
			if !slices.Contains(drop, k) {
				kept = append(kept, k)
			}
		}
		return "--kinds=" + strings.Join(kept, ",")
	}
	cronJob := func(spec string) compatRow {
		return compatRow{spec: spec, kind: "CronJob", meta: auto, sources: []source{cm}, changed: "cm", want: notReloaded}
	}
	return []flagsContext{
		{name: "Auto Reload All Flag Tests with autoReloadAll=true flag", places: []place{{
			labels: map[string]string{confighash.InjectionLabel: confighash.InjectionEvery}, rows: []compatRow{
				deployment("should reload workloads without any annotations when autoReloadAll is true", nil, cm, "cm", updateData, reloaded, ""),
				deployment("should respect auto=false annotation even when autoReloadAll is true", map[string]string{confighash.ReloaderAuto: "false"}, cm, "cm", updateData, notReloaded, ""),
			}}}},
		{name: "Ignore Resources Flag Tests with ignoreSecrets=true flag", flags: []string{"--resources-to-ignore=secrets"}, places: []place{{enabled, []compatRow{
			deployment("should NOT reload when Secret changes with ignoreSecrets=true", auto, sec, "s", updateData, notReloaded, ""),
			autoCM("should still reload when ConfigMap changes with ignoreSecrets=true", reloaded),
		}}}},
		{name: "Ignore Resources Flag Tests with ignoreConfigMaps=true flag", flags: []string{"--resources-to-ignore=configMaps"}, places: []place{{enabled, []compatRow{
			autoCM("should NOT reload when ConfigMap changes with ignoreConfigMaps=true", notReloaded),
			deployment("should still reload when Secret changes with ignoreConfigMaps=true", auto, sec, "s", updateData, reloaded, ""),
		}}}},
		{name: "Ignored Workloads Flag Tests with ignoreCronJobs=true flag", flags: []string{without("cronjobs")}, places: []place{{enabled, []compatRow{
			cronJob("should NOT reload CronJobs when ignoreCronJobs=true"),
			autoCM("should still reload Deployments when ignoreCronJobs=true", reloaded),
		}}}},
		{name: "Ignored Workloads Flag Tests with both ignoreCronJobs=true and ignoreJobs=true flags", flags: []string{without("cronjobs", "jobs")}, places: []place{{enabled, []compatRow{
			cronJob("should NOT reload CronJobs when both job flags are true"),
		}}}},
		{name: "Namespace Ignore Flag Tests with ignoreNamespaces flag", places: []place{
			{map[string]string{}, []compatRow{deployment("should NOT reload in ignored namespace", cmNamed, cm, "cm", updateData, notReloaded, "")}},
			{enabled, []compatRow{deployment("should reload in watched (non-ignored) namespace", cmNamed, cm, "cm", updateData, reloaded, "")}},
		}},
		{name: "Namespace Selector Flag Tests with namespaceSelector flag", flags: []string{"--namespace-selector=env=test"}, places: []place{
			{map[string]string{"env": "test"}, []compatRow{autoCM("should reload workloads in matching namespaces", reloaded)}},
			{map[string]string{}, []compatRow{autoCM("should NOT reload workloads in non-matching namespaces", notReloaded)}},
		}},
		{name: "Reload On Create Flag Tests with reloadOnCreate=true flag", places: []place{{enabled, []compatRow{
			{spec: "should reload when a new ConfigMap is created", kind: "Deployment", meta: cmNamed, absent: []string{"cm"}, change: createIt, changed: "cm"},
			{spec: "should reload when a new Secret is created", kind: "Deployment", meta: sNamed, absent: []string{"s"}, change: createIt, changed: "s"},
		}}}},
		{name: "Reload On Create Flag Tests with reloadOnCreate=false (default)", flags: []string{"--reload-on-create=false"}, places: []place{{enabled, []compatRow{
			{spec: "should NOT reload when a new ConfigMap is created (default behavior)", kind: "Deployment", meta: cmNamed, absent: []string{"cm"}, change: createIt, changed: "cm", want: notReloaded},
		}}}},
		{name: "Reload On Delete Flag Tests with reloadOnDelete=true flag", flags: []string{"--reload-on-delete"}, places: []place{{enabled, []compatRow{
			{spec: "should reload when a referenced ConfigMap is deleted", kind: "Deployment", meta: cmNamed, change: deleteIt, changed: "cm"},
			{spec: "should reload when a referenced Secret is deleted", kind: "Deployment", meta: sNamed, change: deleteIt, changed: "s"},
		}}}},
		{name: "Reload On Delete Flag Tests with reloadOnDelete=false (default)", places: []place{{enabled, []compatRow{
			{spec: "should NOT reload when a referenced ConfigMap is deleted (default behavior)", kind: "Deployment", meta: cmNamed, change: deleteIt, changed: "cm", want: notReloaded},
		}}}},
		{name: "Resource Label Selector Flag Tests with resourceLabelSelector flag", flags: []string{"--source-label-selector=reload=true"}, places: []place{{enabled, []compatRow{
			{spec: "should reload when labeled ConfigMap changes", kind: "Deployment", meta: auto, sources: []source{cm}, sourceLabels: map[string]map[string]string{"cm": {"reload": "true"}}, changed: "cm"},
			autoCM("should NOT reload when unlabeled ConfigMap changes", notReloaded),
		}}}},
		// Reloader's release namespace is confighash's install namespace, where it
		// never acts: its webhook must not depend on itself.
		{name: "Watch Globally Flag Tests with watchGlobally=false flag", flags: []string{"--namespaces=" + scoped}, places: []place{
			{nil, []compatRow{deployment("should reload workloads in Reloader's namespace when watchGlobally=false", auto, cm, "cm", updateData, notReloaded, diffOwnNamespace)}},
			{enabled, []compatRow{autoCM("should NOT reload workloads in other namespaces when watchGlobally=false", notReloaded)}},
		}},
		{name: "Watch Globally Flag Tests with scoped namespaces list (watchGlobally=false + reloader.namespaces)", flags: []string{"--namespaces=" + scoped}, places: []place{
			{map[string]string{"scoped": scoped}, []compatRow{autoCM("should reload workloads in a listed namespace", reloaded)}},
			{nil, []compatRow{deployment("should reload workloads in Reloader's auto-included release namespace", auto, cm, "cm", updateData, notReloaded, diffOwnNamespace)}},
			{enabled, []compatRow{autoCM("should NOT reload workloads in an unlisted namespace", notReloaded)}},
		}},
		{name: "Watch Globally Flag Tests with watchGlobally=true flag (default)", places: []place{{enabled, []compatRow{
			autoCM("should reload workloads in any namespace when watchGlobally=true", reloaded),
		}}}},
	}
}

// TestReloaderFlagsSuiteCompatibility runs the rows of Reloader's flags suite, each
// context with its own install.
func TestReloaderFlagsSuiteCompatibility(t *testing.T) {
	c := isolatedCluster(t) // among the longest: the own lane evens the lanes
	scoped := labeledNamespace(t, c)
	for _, fc := range flagsContexts(scoped) {
		t.Run(fc.name, func(t *testing.T) {
			startWebhook(t, c, fc.flags...)
			w := startWatcher(t, c, fc.flags...)
			for _, p := range fc.places {
				var ns string
				switch {
				case p.labels == nil:
					ns = installNamespace
				case p.labels["scoped"] != "":
					ns = p.labels["scoped"]
				default:
					ns = namespace(t, c, p.labels)
				}
				compatRun(t, c, w, ns, p.rows)
			}
		})
	}
}
