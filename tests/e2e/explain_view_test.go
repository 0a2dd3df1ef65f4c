package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// TestExplainWithTheNamespacesViewRoleSaysWhatItCouldNotSee: a user bound to the
// built-in view role in one namespace runs `kubectl confighash explain` as
// confighash ships it. It exits 0 with a verdict, names what it could not read (the
// Secrets, the hash key), shows the watcher's status and its pause period, and prints
// no Secret value and no key; in a namespace not labelled (readable or not), and for
// inject: "yes", it says why nothing rolls.
func TestExplainWithTheNamespacesViewRoleSaysWhatItCouldNotSee(t *testing.T) {
	c := sharedCluster(t)
	viewRole, err := os.ReadFile(filepath.Join("..", "..", "manifests", "base", "view-role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	applyForTest(t, c, viewRole)
	startWebhook(t, c)
	startWatcher(t, c)
	ns, unlabelled := labeledNamespace(t, c), namespace(t, c, nil)
	viewer := "viewer@" + ns
	for _, n := range []string{ns, unlabelled} {
		bind(t, c, n, viewer, "ClusterRole", "view")
	}
	kubeconfig := impersonating(t, c, viewer)

	// What the install adds to view, and what it never grants.
	for _, check := range []struct {
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "list", Group: "argoproj.io", Resource: "rollouts"}, true},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "list", Resource: "secrets"}, false},
		{authorizationv1.ResourceAttributes{Namespace: installNamespace, Verb: "get", Resource: "secrets", Name: "confighash-hash-key"}, false},
	} {
		waitAuthorized(t, c, viewer, check.attrs, check.want) // once the view role is aggregated
	}

	const password = "correct-horse-battery-staple"
	createConfigMap(t, c, ns, "app", map[string]string{"greeting": "v1"})
	createSecret(t, c, ns, "db", map[string]string{"password": password})
	web := fixtures.Deployment("web", 0, fixtures.UsingTemplate([]string{"app"}, []string{"db"}))
	web.Annotations[confighash.AnnotationPausePeriod] = "1h"
	createDeployment(t, c, ns, web)
	waitFor(t, 10*time.Second, "web to be hashed", func() bool { return templateHash(t, c, ns, "web") != "" })

	// A change rolls it, and the watcher says so; the next waits for the pause period.
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "app"}, "greeting", "v2")
	waitFor(t, 20*time.Second, "the watcher's status on web", func() bool {
		d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), "web", metav1.GetOptions{})
		return err == nil && strings.HasPrefix(d.Annotations[confighash.AnnotationStatus], string(confighash.ActRolled)+" ")
	})
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "app"}, "greeting", "v3")

	out := explainAs(t, kubeconfig, "deployment/web", "-n", ns)
	for _, want := range []string{
		"Deployment " + ns + "/web: HELD",
		"ConfigMap/app was written after the last rollout (resourceVersion ",
		"holds further changes for its pause period, until ",
		"could not see:            secrets in namespace " + ns + ": list refused, so their digests are not checked",
		"the hash key: get of Secret " + installNamespace + "/confighash-hash-key refused, so the hash is not recomputed",
		"the watcher:              rolled at ",
		"Secret/db  ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain as %s does not say %q:\n%s", viewer, want, out)
		}
	}
	key, err := c.Client.CoreV1().Secrets(installNamespace).Get(t.Context(), "confighash-hash-key", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw := key.Data["key"]
	for _, secret := range []string{password, base64.StdEncoding.EncodeToString([]byte(password)), string(raw), base64.StdEncoding.EncodeToString(raw), hex.EncodeToString(raw)} {
		if strings.Contains(out, secret) {
			t.Errorf("explain as %s printed a Secret value or the key:\n%s", viewer, out)
		}
	}

	// Not labelled: never admitted, and why.
	createDeployment(t, c, unlabelled, fixtures.Deployment("web", 0, fixtures.UsingTemplate([]string{"app"}, nil)))
	if out := explainAs(t, kubeconfig, "deployment/web", "-n", unlabelled); !strings.Contains(out, "NOTHING WILL ROLL") ||
		!strings.Contains(out, "namespace "+unlabelled+" is not enabled") || !strings.Contains(out, "label it confighash.dev/injection=enabled") {
		t.Errorf("in a namespace not labelled:\n%s", out)
	}

	// Where even the namespace may not be read: never admitted, and the likely cause.
	narrow := "narrow@" + unlabelled
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "narrow"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps", "events"}, Verbs: []string{"list"}}}}
	if _, err := c.Client.RbacV1().Roles(unlabelled).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind(t, c, unlabelled, narrow, "Role", "narrow")
	if out := explainAs(t, impersonating(t, c, narrow), "deployment/web", "-n", unlabelled); !strings.Contains(out, "never admitted by confighash") ||
		!strings.Contains(out, "lacks the label confighash.dev/injection=enabled") ||
		!strings.Contains(out, "namespace "+unlabelled+": get refused, so its mode and pacing are the watcher's as written on the workload") {
		t.Errorf("where the namespace may not be read:\n%s", out)
	}

	// The namespace's opted-in workloads, as the viewer lists them.
	if out := explainAs(t, kubeconfig, "-n", ns); !strings.Contains(out, "Deployment "+ns+"/web: HELD") {
		t.Errorf("explain -n %s:\n%s", ns, out)
	}

	// inject: "yes" is not a boolean: ignored, and the values taken named.
	yes := fixtures.AnnotatedDeployment("yes", map[string]string{confighash.AnnotationInject: "yes"}, fixtures.UsingTemplate([]string{"app"}, nil))
	createDeployment(t, c, ns, yes)
	if out := explainAs(t, kubeconfig, "deployment/yes", "-n", ns); !strings.Contains(out, "NOTHING WILL ROLL") ||
		!strings.Contains(out, `confighash.dev/inject=yes is not a boolean and is ignored: want "true" or "false"`) {
		t.Errorf("inject: \"yes\":\n%s", out)
	}
}

// bind binds a ClusterRole or Role to user in namespace ns.
func bind(t *testing.T, c *cluster.Cluster, ns, user, kind, role string) {
	t.Helper()
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	if _, err := c.Client.RbacV1().RoleBindings(ns).Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// impersonating writes a kubeconfig of the admin's that acts as user.
func impersonating(t *testing.T, c *cluster.Cluster, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Impersonate = user
	path := filepath.Join(t.TempDir(), "viewer.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// explainAs runs `confighash explain` with kubeconfig, as kubectl confighash runs it,
// and returns what it printed; it must exit 0.
func explainAs(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	cmd := exec.Command(confighashBinary(t), append([]string{"explain", "--kubeconfig", kubeconfig, "--install-namespace", installNamespace}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("explain %v: exit status %d: %s%s", args, exit.ExitCode(), stderr.String(), stdout.String())
		}
		t.Fatal(err)
	}
	t.Logf("explain %v as the viewer:\n%s", args, stdout.String())
	return stdout.String()
}
