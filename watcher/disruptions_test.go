package watcher

import (
	"strings"
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash/watches"
)

// TestARestartAsksThePodsDisruptionBudgets: a pod is restarted in place only while
// each budget that selects it allows a disruption, as an eviction would be; budgets
// of other pods or namespaces do not hold it, and a pod whose labels were too many to
// keep is held wherever its namespace has a budget. A budget with an empty selector
// (every pod of its namespace, in policy/v1) freezes them all; one too large to read
// holds its namespace's pods.
func TestARestartAsksThePodsDisruptionBudgets(t *testing.T) {
	budget := func(ns, name, app string, allowed int32) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
			Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
	}
	freeze := budget("frozen", "all", "", 0)
	freeze.Spec.Selector = &metav1.LabelSelector{}
	huge := budget("huge", "big", "x", 1)
	huge.Annotations = map[string]string{"pad": strings.Repeat("x", watches.MaxBudgetBytes)}
	client := fake.NewClientset(budget("shop", "db", "db", 0), budget("shop", "web", "web", 1), budget("other", "api", "api", 0), freeze, huge)
	d, err := newDisruptions(client, watches.Door{Gate: modes{}})
	if err != nil {
		t.Fatal(err)
	}
	d.budgets.Run(t.Context())
	if !cache.WaitForCacheSync(t.Context().Done(), d.budgets.HasSynced) {
		t.Fatal("budgets not listed")
	}
	for _, tt := range []struct {
		name string
		pod  *podView
		want bool
	}{
		{"its budget allows none", &podView{Namespace: "shop", Labels: map[string]string{"app": "db"}}, false},
		{"its budget allows one", &podView{Namespace: "shop", Labels: map[string]string{"app": "web"}}, true},
		{"no budget selects it", &podView{Namespace: "shop", Labels: map[string]string{"app": "cache"}}, true},
		{"another namespace's budget", &podView{Namespace: "other", Labels: map[string]string{"app": "db"}}, true},
		{"its labels were too many to keep", &podView{Namespace: "shop", LabelsOver: true}, false},
		{"a namespace with no budget", &podView{Namespace: "quiet", LabelsOver: true}, true},
		{"a budget that selects every pod and allows none", &podView{Namespace: "frozen", Labels: map[string]string{"app": "web"}}, false},
		{"a budget too large to read", &podView{Namespace: "huge", Labels: map[string]string{"app": "web"}}, false},
	} {
		if got := d.allowed(tt.pod); got != tt.want {
			t.Errorf("%s: allowed %v, want %v", tt.name, got, tt.want)
		}
	}
}
