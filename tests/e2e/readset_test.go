package e2e

import (
	"fmt"
	"slices"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/confighash/confighash/watches"
)

// TestTheReadSetIsThePolicy (rule 13, issue 52): in every variant of the install, each
// component's ServiceAccount may list and watch what its code watches, every kind in
// watches.Kinds where the door watches it, and not the same resource anywhere else.
// Before, the webhook's ServiceAccount could list every pod of the cluster, with their
// env values, to find kube-system's konnectivity agents.
func TestTheReadSetIsThePolicy(t *testing.T) {
	c := sharedCluster(t)
	ensureNamespaces(t, c, append([]string{"confighash"}, exampleNamespaces...)...)
	tenant := exampleNamespaces[0]
	variants := []struct {
		name       string
		rbac       func() []byte
		namespaced bool
	}{
		{"kustomize", func() []byte { return kustomize(t, c, "manifests") }, false},
		{"kustomize, namespaced", func() []byte { return kustomize(t, c, "manifests/variants/namespaced") }, true},
		{"chart", func() []byte { return helmTemplate(t, c, nil) }, false},
		{"chart, namespaced", func() []byte {
			return helmTemplate(t, c, []string{"--set", fmt.Sprintf("namespaces={%s,%s}", exampleNamespaces[0], exampleNamespaces[1])})
		}, true},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			applyForTest(t, c, rbacOnly(t, v.rbac()))
			for _, component := range []string{"webhook", "watcher"} {
				user := "system:serviceaccount:confighash:confighash-" + component
				may := func(verb string, res schema.GroupVersionResource, namespace, name string) bool {
					t.Helper()
					review, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
						User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{
							Group: res.Group, Version: res.Version, Resource: res.Resource, Namespace: namespace, Name: name, Verb: verb}}}, metav1.CreateOptions{})
					if err != nil {
						t.Fatal(err)
					}
					return review.Status.Allowed
				}
				// What the code watches, where.
				watched := map[schema.GroupVersionResource][]string{}
				for _, k := range watches.Kinds {
					if !slices.Contains(k.By, component) || k.Resource.Resource == "" {
						continue
					}
					var where []string
					switch k.Scope {
					case watches.Tenant:
						where = []string{tenant}
						if !v.namespaced {
							where = append(where, metav1.NamespaceAll)
						}
					case watches.Cluster:
						if v.namespaced {
							continue // its gate reads its namespaces one by one; it finds no node
						}
						where = []string{metav1.NamespaceAll}
					case watches.Install:
						where = []string{"confighash"}
					case watches.System:
						where = []string{k.Namespace}
					}
					if k.Resource.Group == "secrets-store.csi.x-k8s.io" || k.Resource.Group == "argoproj.io" {
						// Granted only where the install turns them on.
						watched[k.Resource] = append(watched[k.Resource], where...)
						continue
					}
					name := ""
					if k.Name == watches.WatcherLease.Name {
						name = "confighash-watcher" // the Lease by name, and no other
					}
					for _, ns := range where {
						verbs := []string{"list", "watch"}
						if k.Listed {
							verbs = verbs[:1]
						}
						for _, verb := range verbs {
							if !may(verb, k.Resource, ns, name) {
								t.Errorf("%s: %s may not %s %s in %q: it watches them there", v.name, component, verb, k.Name, ns)
							}
						}
					}
					watched[k.Resource] = append(watched[k.Resource], where...)
				}
				// The same resources anywhere else: not readable, unless another read of
				// the code's needs them (its own pod, in the install's namespace).
				for res, where := range watched {
					for _, ns := range []string{tenant, metav1.NamespaceAll, metav1.NamespaceSystem, metav1.NamespaceDefault} {
						if slices.Contains(where, ns) || slices.Contains(where, metav1.NamespaceAll) {
							continue
						}
						if may("list", res, ns, "") {
							t.Errorf("%s: %s may list %s in %q, which it does not watch there", v.name, component, res.Resource, ns)
						}
					}
				}
			}
			// The finding itself, said plainly.
			webhookUser := "system:serviceaccount:confighash:confighash-webhook"
			for _, ns := range []string{tenant, metav1.NamespaceAll} {
				review, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: webhookUser, ResourceAttributes: &authorizationv1.ResourceAttributes{Resource: "pods", Namespace: ns, Verb: "list"}}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if review.Status.Allowed {
					t.Errorf("%s: the webhook may list the pods of %q", v.name, ns)
				}
			}
		})
	}
}
