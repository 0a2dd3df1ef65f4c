package node

import (
	"bytes"
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestInstalledAsTheDocsSay installs confighash on the real node exactly as
// docs/install.md says, from the project's image, with TLS from a real cert-manager,
// and runs the demo: each step needs the one before, so they run in order.
func TestInstalledAsTheDocsSay(t *testing.T) {
	env := requireNode(t)
	if err := env.StartCertManager(t.Context()); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		run  func(t *testing.T, env *Env)
	}{
		{"kubectl apply -k: Ready, certificate issued, caBundle injected, admission through the Service", func(t *testing.T, env *Env) { applyWithKustomize(t, env) }},
		{"the demo page changes from v1 to v2 with one rollout", demoServesTheNewValue},
		{"the renewed serving certificate is served with no failed admission", servingCertificateRenewed},
		{"the leading watcher's pod deleted: the other leads, a change rolls once", leaderDeleted},
		{"a webhook pod terminated while admissions stream: none fails", webhookTerminated},
		{"the demo switched to restart in place: a change is served by the same pod, restarted once", demoRestartsInPlace},
		{"a StatefulSet of 3 with volumes restarts in place one pod at a time, and halts on a bad change", statefulSetRestartsInPlace},
		{"pods an operator made, and a bare pod, restart in place", operatorPodsRestartInPlace},
		{"apps that reload their files on a signal or a POST serve a change with no restart", appsReloadWithoutARestart},
		{"restarts in place go in waves across controllers, and a bad change halts after the first", restartsInPlaceGoInWaves},
		{"a template change with the data rolls once: no pod is restarted in place too", aTemplateChangeWithTheDataRollsOnce},
		{"6 pinned Deployments revert a removed key, a crash in a 1-minute bake and a metric gate past its threshold", badChangesRevertThemselves},
		{"kubectl delete -k, then helm install: Ready, caBundle injected, admission through the Service", reinstallWithHelm},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, env) }) {
			return
		}
	}
}

func applyWithKustomize(t testing.TB, env *Env) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	if err := env.ApplyKustomize(ctx); err != nil {
		t.Fatal(err)
	}
	ready := time.Since(start)
	if _, err := env.Cluster.Kubectl(ctx, nil, "-n", InstallNamespace, "wait", "--for=condition=Ready", "--timeout=60s",
		"certificate/confighash-ca", "certificate/confighash-webhook"); err != nil {
		t.Fatal(err)
	}
	ca := waitCABundle(ctx, t, env)
	tls, err := env.Cluster.Client.CoreV1().Secrets(InstallNamespace).Get(ctx, "confighash-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ca, tls.Data["ca.crt"]) {
		t.Fatalf("caBundle is not the CA of the serving certificate's Secret")
	}

	// The first write the webhook mutates, through the API server, the Service and
	// kube-proxy's rules to a pod on the node.
	if err := env.CreateDemoNamespace(ctx); err != nil {
		t.Fatal(err)
	}
	var first time.Duration
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		first = time.Since(start)
		return env.Mutated(ctx)
	})
	if err != nil {
		t.Fatalf("no admission through the Service was mutated: %v\n%s", err, env.describe(ctx, InstallNamespace))
	}
	t.Logf("figures: apply to Ready %s; first admission through the Service %s after apply (%s after Ready)",
		ready.Round(100*time.Millisecond), first.Round(100*time.Millisecond), (first - ready).Round(100*time.Millisecond))
}

// waitCABundle waits until cert-manager's CA injector has filled every caBundle of
// confighash's webhook configuration, and returns it.
func waitCABundle(ctx context.Context, t testing.TB, env *Env) []byte {
	t.Helper()
	var bundle []byte
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		cfg, err := env.Cluster.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "confighash", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, w := range cfg.Webhooks {
			if len(w.ClientConfig.CABundle) == 0 {
				return false, nil
			}
			bundle = w.ClientConfig.CABundle
		}
		return len(cfg.Webhooks) > 0, nil
	})
	if err != nil {
		t.Fatalf("the CA injector did not fill the caBundle: %v", err)
	}
	return bundle
}

func demoServesTheNewValue(t *testing.T, env *Env) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if _, err := env.Cluster.Client.AppsV1().Deployments(DemoNamespace).Create(ctx, DemoDeployment(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Cluster.WaitRolledOut(ctx, DemoNamespace, "demo"); err != nil {
		t.Fatal(err)
	}
	page, err := env.DemoPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := waitPage(ctx, t, page, "v1"); got != "v1" {
		t.Fatalf("page through the Service = %q, want v1", got)
	}
	start := time.Now()
	if err := env.SetDemoMessage(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	var rolled time.Duration
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if n, _ := env.ReplicaSets(ctx); rolled == 0 && n > 1 {
			rolled = time.Since(start)
		}
		got, _ := Get(ctx, page)
		return got == "v2", nil
	})
	if err != nil {
		t.Fatalf("the page never showed v2: %v", err)
	}
	t.Logf("figures: ConfigMap edit to a new ReplicaSet %s, to v2 served through the Service %s",
		rolled.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
	expectRollouts(ctx, t, env, 1)
}

// expectRollouts waits for the demo to settle and checks it rolled out n times in
// all: its first ReplicaSet and one more per rollout, and no other after a while.
func expectRollouts(ctx context.Context, t *testing.T, env *Env, n int) {
	t.Helper()
	if err := env.Cluster.WaitRolledOut(ctx, DemoNamespace, "demo"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	got, err := env.ReplicaSets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got != n+1 {
		t.Fatalf("%d ReplicaSets, want %d (%d rollouts)", got, n+1, n)
	}
}

// waitPage fetches a page until it answers want, or the context ends; it returns the
// last answer.
func waitPage(ctx context.Context, t *testing.T, url, want string) string {
	t.Helper()
	var got string
	var lastErr error
	_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		got, lastErr = Get(ctx, url)
		return got == want, nil
	})
	if got != want {
		t.Logf("GET %s: %q, last error %v", url, got, lastErr)
	}
	return got
}

func reinstallWithHelm(t *testing.T, env *Env) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if err := env.UninstallKustomize(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := env.HelmInstall(ctx); err != nil {
		t.Fatal(err)
	}
	ready := time.Since(start)
	waitCABundle(ctx, t, env)
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return env.Mutated(ctx)
	})
	if err != nil {
		t.Fatalf("no admission through the Service was mutated after helm install: %v\n%s", err, env.describe(ctx, InstallNamespace))
	}
	t.Logf("figures: helm install to Ready %s; first admission through the Service %s after install",
		ready.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
}
