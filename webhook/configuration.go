package webhook

import (
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
)

// OptInCondition is the CEL expression of the webhook's matchCondition: the API server
// calls the webhook only for workloads that carry an annotation that can opt them in,
// on their metadata or their pod template.
func OptInCondition(v confighash.Vocabulary) string {
	return "['" + strings.Join(v.OptInAnnotations(), "', '") + `'].exists(k,
  (has(object.metadata.annotations) && k in object.metadata.annotations) ||
  (has(object.spec) && has(object.spec.template) && has(object.spec.template.metadata) &&
    has(object.spec.template.metadata.annotations) && k in object.spec.template.metadata.annotations) ||
  (has(object.spec) && has(object.spec.jobTemplate) && has(object.spec.jobTemplate.spec) &&
    has(object.spec.jobTemplate.spec.template) && has(object.spec.jobTemplate.spec.template.metadata) &&
    has(object.spec.jobTemplate.spec.template.metadata.annotations) && k in object.spec.jobTemplate.spec.template.metadata.annotations))`
}

// Timeout is how long the API server waits for the webhook (timeoutSeconds) before it
// gives up and, failing open, admits the workload unchanged.
const Timeout = 5 * time.Second

// Scope is where, and for which workloads, the API server calls the webhook.
type Scope struct {
	// InstallNamespace is never in scope: the webhook must not depend on itself.
	InstallNamespace string
	// Namespaces, when set, limits the scope to these namespaces.
	Namespaces []string
	// Vocabulary names the annotations that opt a workload in.
	Vocabulary confighash.Vocabulary
}

// Configuration returns the MutatingWebhookConfiguration that registers the webhook:
// creates and updates of the supported kinds, in namespaces labelled for injection
// within the scope, that carry an annotation that may opt them in; failing open,
// without side effects, and called again if a later webhook changes the object. The
// install manifests hold the same, checked by a test.
func Configuration(name string, client admissionregistrationv1.WebhookClientConfig, scope Scope) *admissionregistrationv1.MutatingWebhookConfiguration {
	installNamespace, namespaces := scope.InstallNamespace, scope.Namespaces
	var rules []admissionregistrationv1.RuleWithOperations
	for _, k := range confighash.Kinds {
		rules = append(rules, admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{k.Group}, APIVersions: []string{k.Version}, Resources: []string{k.Resource},
				Scope: ptr.To(admissionregistrationv1.NamespacedScope),
			},
		})
	}
	selected := []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{installNamespace},
	}}
	if len(namespaces) > 0 {
		selected = append(selected, metav1.LabelSelectorRequirement{
			Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: namespaces,
		})
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         "hash.confighash.dev",
			ClientConfig: client,
			Rules:        rules,
			NamespaceSelector: &metav1.LabelSelector{
				MatchLabels:      map[string]string{confighash.InjectionLabel: confighash.InjectionEnabled},
				MatchExpressions: selected,
			},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "opted-in", Expression: OptInCondition(scope.Vocabulary)}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			TimeoutSeconds:          ptr.To(int32(Timeout / time.Second)),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}
