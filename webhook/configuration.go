package webhook

import (
	"slices"
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
// on their metadata or their pod template, wherever an extra kind keeps it.
func OptInCondition(v confighash.Vocabulary, kinds confighash.Kinds) string {
	cond := "['" + strings.Join(v.OptInAnnotations(), "', '") + `'].exists(k,
  (has(object.metadata.annotations) && k in object.metadata.annotations) ||
  (has(object.spec) && has(object.spec.template) && has(object.spec.template.metadata) &&
    has(object.spec.template.metadata.annotations) && k in object.spec.template.metadata.annotations) ||
  (has(object.spec) && has(object.spec.jobTemplate) && has(object.spec.jobTemplate.spec) &&
    has(object.spec.jobTemplate.spec.template) && has(object.spec.jobTemplate.spec.template.metadata) &&
    has(object.spec.jobTemplate.spec.template.metadata.annotations) && k in object.spec.jobTemplate.spec.template.metadata.annotations)`
	seen := map[string]bool{"spec.template": true, "spec.jobTemplate.spec.template": true}
	for _, k := range kinds {
		path := strings.Join(k.TemplatePath, ".")
		if seen[path] {
			continue
		}
		seen[path] = true
		var has []string
		field := "object"
		for _, name := range append(slices.Clone(k.TemplatePath), "metadata", "annotations") {
			field += "." + name
			has = append(has, "has("+field+")")
		}
		cond += " ||\n  (" + strings.Join(has, " && ") + " && k in " + field + ")"
	}
	return cond + ")"
}

// Timeout is how long the API server waits for the webhook (timeoutSeconds) before it
// gives up and, failing open, admits the workload unchanged.
const Timeout = 5 * time.Second

// The webhook's paths: for namespaces where workloads opt in, and for those where
// every workload that does not opt out counts.
const (
	Path      = "/mutate"
	EveryPath = "/mutate/every"
)

// Scope is where, and for which workloads, the API server calls the webhook.
type Scope struct {
	// InstallNamespace is never in scope: the webhook must not depend on itself.
	InstallNamespace string
	// Namespaces, when set, limits the scope to these namespaces.
	Namespaces []string
	// Vocabulary names the annotations that opt a workload in.
	Vocabulary confighash.Vocabulary
	// Kinds are the workload kinds handled; empty: the built-in kinds.
	Kinds confighash.Kinds
	// NamespaceSelector selects the namespaces where workloads opt in; default:
	// labelled confighash.dev/injection=enabled.
	NamespaceSelector *metav1.LabelSelector
	// EveryNamespaceSelector selects those where every workload counts unless it
	// opts out; default: labelled confighash.dev/injection=all.
	EveryNamespaceSelector *metav1.LabelSelector
}

// DefaultNamespaceSelector and DefaultEveryNamespaceSelector are the selectors of
// Scope's defaults, in label-selector syntax.
const (
	DefaultNamespaceSelector      = confighash.InjectionLabel + "=" + confighash.InjectionEnabled
	DefaultEveryNamespaceSelector = confighash.InjectionLabel + "=" + confighash.InjectionEvery
)

// Configuration returns the MutatingWebhookConfiguration that registers the webhook:
// creates and updates of the supported kinds (creates only of a recreated kind), and
// creates of the pods that say how they restart, within the scope; in the namespaces
// where workloads opt in, only those that carry an annotation that may opt them in;
// failing open, without side effects, and called again if a later webhook changes the
// object. client is the webhook's Service, or its URL, without a path. The install
// manifests hold the same, checked by a test.
func Configuration(name string, client admissionregistrationv1.WebhookClientConfig, scope Scope) *admissionregistrationv1.MutatingWebhookConfiguration {
	kinds := scope.Kinds
	if len(kinds) == 0 {
		kinds = confighash.Builtin
	}
	var rules []admissionregistrationv1.RuleWithOperations
	for _, k := range kinds {
		ops := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
		if k.Recreated() {
			ops = ops[:1] // its template cannot change after its creation
		}
		rules = append(rules, admissionregistrationv1.RuleWithOperations{
			Operations: ops,
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{k.Group}, APIVersions: []string{k.Version}, Resources: []string{k.Resource},
				Scope: ptr.To(admissionregistrationv1.NamespacedScope),
			},
		})
	}
	inScope := func(selector *metav1.LabelSelector, defaultValue string) *metav1.LabelSelector {
		if selector == nil {
			selector = &metav1.LabelSelector{MatchLabels: map[string]string{confighash.InjectionLabel: defaultValue}}
		}
		selector = selector.DeepCopy()
		selector.MatchExpressions = append(selector.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{scope.InstallNamespace},
		})
		if len(scope.Namespaces) > 0 {
			selector.MatchExpressions = append(selector.MatchExpressions, metav1.LabelSelectorRequirement{
				Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: scope.Namespaces,
			})
		}
		return selector
	}
	entry := func(name, path string, selector *metav1.LabelSelector, conditions []admissionregistrationv1.MatchCondition) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:                    name,
			ClientConfig:            withPath(client, path),
			Rules:                   rules,
			NamespaceSelector:       selector,
			MatchConditions:         conditions,
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			TimeoutSeconds:          ptr.To(int32(Timeout / time.Second)),
			AdmissionReviewVersions: []string{"v1"},
		}
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			entry("hash.confighash.dev", Path, inScope(scope.NamespaceSelector, confighash.InjectionEnabled),
				[]admissionregistrationv1.MatchCondition{{Name: "opted-in", Expression: OptInCondition(scope.Vocabulary, kinds)}}),
			// A matchCondition cannot see the namespace's labels: the namespaces that
			// opt every workload in take their own entry.
			entry("every.hash.confighash.dev", EveryPath, inScope(scope.EveryNamespaceSelector, confighash.InjectionEvery), nil),
			podEntry(entry("restart.confighash.dev", Path, inScope(scope.NamespaceSelector, confighash.InjectionEnabled), nil)),
			podEntry(entry("every.restart.confighash.dev", EveryPath, inScope(scope.EveryNamespaceSelector, confighash.InjectionEvery), nil)),
		},
	}
}

// RestartCondition is the CEL expression of the pod entries' matchCondition: only the
// creates of pods that say how they restart (confighash.AnnotationRestart) are sent.
const RestartCondition = "has(object.metadata.annotations) && '" + confighash.AnnotationRestart + "' in object.metadata.annotations"

// podEntry makes an entry admit the creates of pods that may ask to be restarted in
// place, and only those.
func podEntry(e admissionregistrationv1.MutatingWebhook) admissionregistrationv1.MutatingWebhook {
	e.Rules = []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}}
	e.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "asks-to-restart", Expression: RestartCondition}}
	return e
}

// withPath returns the client configuration with the path set.
func withPath(client admissionregistrationv1.WebhookClientConfig, path string) admissionregistrationv1.WebhookClientConfig {
	c := *client.DeepCopy()
	if c.Service != nil {
		c.Service.Path = ptr.To(path)
	}
	if c.URL != nil {
		c.URL = ptr.To(strings.TrimSuffix(*c.URL, "/") + path)
	}
	return c
}
