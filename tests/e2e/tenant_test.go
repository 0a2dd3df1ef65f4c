package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// TestAHostileNameListCostsOnlyItsWorkload (issue 32, point 1): a tenant who may edit
// Deployments in two namespaces, one confighash acts in and one it does not, writes a
// 21 KB named list of costly regular expressions on a Deployment in each, and
// rewrites them. The watcher stays small (it took 504 MiB and was OOM-killed under
// the install's 256 Mi limit), the webhook admits the write with a warning, and a
// change in a third namespace rolls its user once, within seconds.
func TestAHostileNameListCostsOnlyItsWorkload(t *testing.T) {
	c := sharedCluster(t)
	wh := startWebhook(t, c)
	w := startWatcher(t, c)
	victim := usedConfigMap(t, c)

	off, on := namespace(t, c, nil), labeledNamespace(t, c)
	tenant, warned := tenantClient(t, c, "tenant", off, on)
	parts := make([]string, 1000)
	for i := range parts {
		parts[i] = fmt.Sprintf("(?:[a-z]?){1000}x%d", i)
	}
	hostile := strings.Join(parts, "|")
	for _, ns := range []string{off, on} {
		d := fixtures.AnnotatedDeployment("evil", map[string]string{confighash.ReloaderConfigMapReload: hostile}, fixtures.EnvFromTemplate("cfg"))
		if _, err := tenant.AppsV1().Deployments(ns).Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create the hostile Deployment in %s: %v", ns, err)
		}
		for i := range 3 { // each write is read again
			patch := fmt.Sprintf(`{"metadata":{"annotations":{"rewrite":"%d"}}}`, i)
			if _, err := tenant.AppsV1().Deployments(ns).Patch(t.Context(), "evil", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !warned.has("bytes long at most; ignored") {
		t.Errorf("no warning about the hostile list; warnings:\n%s", warned.all())
	}

	setKey(t, c, victim, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	expectReplicaSets(t, c, victim, "web", 2)
	for name, pid := range map[string]int{"watcher": w.cmd.Process.Pid, "webhook": wh.cmd.Process.Pid} {
		peak := peakRSSMiB(t, pid)
		t.Logf("%s peak RSS %.1f MiB", name, peak)
		if peak > 128 {
			t.Errorf("the %s's peak RSS is %.0f MiB, want it far under the install's 256 Mi limit", name, peak)
		}
	}
	if w.metric(t, "confighash_watcher_leader") != 1 {
		t.Error("the watcher no longer leads")
	}
}

// tenantClient returns a client acting as user, who may create, read and change
// Deployments in the namespaces given and nothing else, and the warnings it is given.
func tenantClient(t testing.TB, c *cluster.Cluster, user string, namespaces ...string) (kubernetes.Interface, *warnings) {
	t.Helper()
	for _, ns := range namespaces {
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"},
				Verbs: []string{"get", "list", "watch", "create", "update", "patch"}}},
		}
		if _, err := c.Client.RbacV1().Roles(ns).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}
		if _, err := c.Client.RbacV1().RoleBindings(ns).Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitAuthorized(t, c, user, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "apps", Resource: "deployments"}, true)
	}
	return warnedClient(t, c, rest.ImpersonationConfig{UserName: user})
}

// waitAuthorized waits until the API server's authorizer answers want for user doing
// attrs: it reads Roles, RoleBindings and aggregated ClusterRoles from a cache a moment
// behind their writes, and a tenant's first create, right after its grant, was refused
// on a loaded machine.
func waitAuthorized(t testing.TB, c *cluster.Cluster, user string, attrs authorizationv1.ResourceAttributes, want bool) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("%s to be allowed %+v: %v", user, attrs, want), func() bool {
		review, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &attrs}}, metav1.CreateOptions{})
		return err == nil && review.Status.Allowed == want
	})
}
