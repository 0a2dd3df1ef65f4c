package watcher

import (
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	policyinformers "k8s.io/client-go/informers/policy/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash/watches"
)

// disruptions tells whether the PodDisruptionBudgets that select a pod allow it to be
// taken down now: a restart in place bypasses the eviction API, which would ask them.
type disruptions struct {
	budgets *watches.Informers
}

func newDisruptions(client kubernetes.Interface, door watches.Door) (*disruptions, error) {
	budgets, err := door.Open(watches.Budgets, func(ns string) cache.SharedIndexInformer {
		return policyinformers.NewPodDisruptionBudgetInformer(client, ns, 0, cache.Indexers{cache.NamespaceIndex: watches.NamespaceIndex})
	}, keepBudget)
	return &disruptions{budgets}, err
}

// keepBudget keeps of a budget what allowed reads.
func keepBudget(obj any) (any, error) {
	if b, ok := obj.(*policyv1.PodDisruptionBudget); ok {
		return &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: b.Name, ResourceVersion: b.ResourceVersion},
			Spec:       policyv1.PodDisruptionBudgetSpec{Selector: b.Spec.Selector},
			Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: b.Status.DisruptionsAllowed},
		}, nil
	}
	return obj, nil
}

// allowed reports whether every budget that selects the pod allows a disruption now;
// a budget whose selector cannot be read selects nothing, as the disruption
// controller has it. A pod whose labels were too many to keep is not restarted while
// its namespace has a budget.
func (d *disruptions) allowed(p *podView) bool {
	inf := d.budgets.For(p.Namespace)
	if inf == nil {
		return true
	}
	objs, _ := inf.GetIndexer().ByIndex(cache.NamespaceIndex, p.Namespace)
	for _, obj := range objs {
		if k, ok := obj.(*watches.Key); ok && k.Over {
			return false // a budget too large to read may select it
		}
		b, ok := obj.(*policyv1.PodDisruptionBudget)
		if !ok || b.Spec.Selector == nil {
			continue
		}
		if p.LabelsOver {
			return false
		}
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		// An empty selector selects every pod of the namespace (policy/v1): a freeze.
		if err != nil || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		if b.Status.DisruptionsAllowed < 1 {
			return false
		}
	}
	return true
}
