package e2e

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/fixtures"
)

// TestChartHoldsTheWatcherToItsWritesOnEveryKindItGrants: the chart installed with an
// extra kind whose pod template is at a path of its own, with kinds narrowed to
// Deployments, and with a namespace selector of its own. The watcher's ServiceAccount
// touches and heals an object of the extra kind, and cannot change anything else of
// it; it may not write the kinds left out at all (RBAC); and it writes only where the
// chart's selector selects, not where the default label is.
func TestChartHoldsTheWatcherToItsWritesOnEveryKindItGrants(t *testing.T) {
	c := sharedCluster(t)
	ctx := t.Context()
	installCRD(t, c, webGVR, "Web")
	home := namespace(t, c, nil)
	rendered := helmTemplate(t, c, []string{"--namespace", home, "--set", "certManager.enabled=false", "--set", "kinds={deployments}",
		"--set-json", `namespaceSelector={"matchLabels":{"confighash.dev/injection":null,"team.example.com/confighash":"on"}}`,
		"--set-json", `everyNamespaceSelector={"matchLabels":null,"matchExpressions":[{"key":"team.example.com/confighash","operator":"In","values":["every"]}]}`,
		"--set-json", `extraKinds=[{"apiVersion":"apps.example.com/v1","kind":"Web","resource":"webs","template":"spec.workload.template"}]`})
	applyForTest(t, c, rbacOnly(t, rendered))

	ns := namespace(t, c, map[string]string{"team.example.com/confighash": "on"})
	every := namespace(t, c, map[string]string{"team.example.com/confighash": "every"})
	defaultLabel := labeledNamespace(t, c) // the default label, which this install does not select
	for _, in := range []string{ns, every, defaultLabel} {
		web := customWorkload(t, webGVR, "Web", "web", map[string]any{confighash.AnnotationInject: "true"}, fixtures.EnvFromTemplate("cfg"), "spec", "workload", "template")
		createCustom(t, c, webGVR, in, web)
		createDeployment(t, c, in, fixtures.Deployment("app", 1, fixtures.EnvFromTemplate("cfg")))
	}
	if _, err := c.Client.AppsV1().StatefulSets(ns).Create(ctx, fixtures.StatefulSet("db", fixtures.EnvFromTemplate("cfg")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	client, _ := warnedClient(t, c, rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + home + ":confighash-watcher",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + home, "system:authenticated"},
	})
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + home + ":confighash-watcher",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + home, "system:authenticated"}}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	patchWeb := func(in string, pt types.PatchType, patch string) func(context.Context, []string) error {
		return func(ctx context.Context, dryRun []string) error {
			_, err := dyn.Resource(webGVR).Namespace(in).Patch(ctx, "web", pt, []byte(patch), metav1.PatchOptions{DryRun: dryRun})
			return err
		}
	}
	touch := `{"metadata":{"annotations":{"confighash.dev/trigger":"ConfigMap/cfg@1"}}}`
	checkPolicyCases(t, []policyCase{
		{"a touch of the extra kind", true, patchWeb(ns, types.MergePatchType, touch)},
		{"a heal of the extra kind's pod template, at its own path", true,
			patchWeb(ns, types.MergePatchType, `{"spec":{"workload":{"template":{"metadata":{"annotations":{"confighash.dev/hash":"v1:00"}}}}}}`)},
		{"a touch where the chart's every-workload selector selects", true, patchWeb(every, types.MergePatchType, touch)},
		{"a touch of a Deployment", true, patchDeployment(client, ns, "app", types.MergePatchType, touch)},

		{"the extra kind's spec changed beside its pod template", false, patchWeb(ns, types.MergePatchType, `{"spec":{"replicas":5}}`)},
		{"the extra kind's workload changed beside its pod template", false, patchWeb(ns, types.MergePatchType, `{"spec":{"workload":{"paused":true}}}`)},
		{"the extra kind's pod template image changed", false,
			patchWeb(ns, types.JSONPatchType, `[{"op":"replace","path":"/spec/workload/template/spec/containers/0/image","value":"example.com/evil:1"}]`)},
		{"an annotation of another domain on the extra kind", false, patchWeb(ns, types.MergePatchType, `{"metadata":{"annotations":{"example.com/x":"1"}}}`)},
		{"a touch of the extra kind where only the default label is", false, patchWeb(defaultLabel, types.MergePatchType, touch)},
		{"a touch of a Deployment where only the default label is", false, patchDeployment(client, defaultLabel, "app", types.MergePatchType, touch)},
	})

	// The kinds left out: no grant at all, so RBAC refuses before any policy.
	_, err = client.AppsV1().StatefulSets(ns).Patch(ctx, "db", types.MergePatchType, []byte(touch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	if !forbiddenByRBAC(err) {
		t.Errorf("a touch of a StatefulSet, a kind left out: got %v, want a refusal by RBAC", err)
	}
	_, err = client.BatchV1().Jobs(ns).Create(ctx, fixtures.Job("again", map[string]string{confighash.AnnotationRecreatedFrom: "0f0e0d0c-0b0a-0908-0706-050403020100"}, fixtures.EnvFromTemplate("cfg")),
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !forbiddenByRBAC(err) {
		t.Errorf("a Job made, with Jobs and CronJobs left out: got %v, want a refusal by RBAC", err)
	}
}
