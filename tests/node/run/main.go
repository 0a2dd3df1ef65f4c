// Command run is make run-node: the demo on a real node. It starts the local control
// plane and a node (containerd, kubelet, kube-proxy in a network namespace of their
// own), installs cert-manager and confighash from the project's image as
// docs/install.md says, serves the demo app's page, edits its ConfigMap, and shows
// the page change from v1 to v2 after one rollout, then, restarted in place, to v3 from
// the same pod. Ctrl-C stops everything and puts
// the host back as it was. It needs root on Linux.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/confighash/confighash/tests/node"
)

func main() {
	if reason := node.Unavailable(); reason != "" {
		fmt.Fprintln(os.Stderr, "make run-node:", reason)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env, err := node.Up(ctx, say)
	if err == nil {
		err = demo(ctx, env)
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		say("stopping: the node, the control plane, the network")
		err = errors.Join(err, env.Down())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "make run-node:", err)
		os.Exit(1)
	}
	say("stopped; the host is as it was")
}

func say(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}

func demo(ctx context.Context, env *node.Env) error {
	if err := env.StartCertManager(ctx); err != nil {
		return err
	}
	start := time.Now()
	say("kubectl apply -k manifests/ (with the image built here)")
	if err := env.ApplyKustomize(ctx); err != nil {
		return err
	}
	say("confighash's webhook and watcher are Ready, %s after apply", time.Since(start).Round(100*time.Millisecond))
	if err := env.CreateDemoNamespace(ctx); err != nil {
		return err
	}
	if err := waitMutated(ctx, env); err != nil {
		return err
	}
	if _, err := env.Cluster.Client.AppsV1().Deployments(node.DemoNamespace).Create(ctx, node.DemoDeployment(), metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := env.Cluster.WaitRolledOut(ctx, node.DemoNamespace, "demo"); err != nil {
		return err
	}
	page, err := env.DemoPage(ctx)
	if err != nil {
		return err
	}
	if err := showUntil(ctx, page, "v1"); err != nil {
		return err
	}
	say("kubectl -n demo patch configmap demo-settings: message v1 -> v2")
	changed := time.Now()
	if err := env.SetDemoMessage(ctx, "v2"); err != nil {
		return err
	}
	if err := showUntil(ctx, page, "v2"); err != nil {
		return err
	}
	if err := env.Cluster.WaitRolledOut(ctx, node.DemoNamespace, "demo"); err != nil {
		return err
	}
	n, err := env.ReplicaSets(ctx)
	if err != nil {
		return err
	}
	say("v2 served %s after the edit; the demo has %d ReplicaSets: one rollout", time.Since(changed).Round(100*time.Millisecond), n)
	if err := restartInPlace(ctx, env, page); err != nil {
		return err
	}
	say("try it: KUBECONFIG=%s kubectl -n demo edit configmap demo-settings; the page is %s", env.Cluster.Kubeconfig, page)
	say("Ctrl-C stops everything")
	<-ctx.Done()
	return ctx.Err()
}

// restartInPlace switches the demo to restart in place (one rollout, for the
// restarter), then changes its message: the same pod serves it, its app restarted once.
func restartInPlace(ctx context.Context, env *node.Env, page string) error {
	say("kubectl -n demo patch deployment demo: confighash.dev/restart: in-place on its pod template (one rollout: its pods get the restarter)")
	if err := env.SwitchDemoToInPlace(ctx); err != nil {
		return err
	}
	if err := env.Cluster.WaitRolledOut(ctx, node.DemoNamespace, "demo"); err != nil {
		return err
	}
	before, err := env.DemoPod(ctx)
	if err != nil {
		return err
	}
	say("kubectl -n demo patch configmap demo-settings: message v2 -> v3")
	changed := time.Now()
	if err := env.SetDemoMessage(ctx, "v3"); err != nil {
		return err
	}
	if err := showUntil(ctx, page, "v3"); err != nil {
		return err
	}
	after, err := env.DemoPod(ctx)
	if err != nil {
		return err
	}
	n, err := env.ReplicaSets(ctx)
	if err != nil {
		return err
	}
	say("v3 served %s after the edit, restarted in place: pod %s (UID %s, then %s), app restarts %d, then %d; %d ReplicaSets",
		time.Since(changed).Round(100*time.Millisecond), after.Name, before.UID, after.UID, node.AppRestarts(before), node.AppRestarts(after), n)
	return nil
}

// waitMutated waits until the webhook mutates a dry-run create through its Service.
func waitMutated(ctx context.Context, env *node.Env) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return env.Mutated(ctx)
	})
}

// showUntil prints the page each time it changes, until it shows want.
func showUntil(ctx context.Context, url, want string) error {
	last := ""
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := node.Get(ctx, url)
		if err == nil && got != last {
			say("GET %s -> %s", url, got)
			last = got
		}
		return got == want, nil
	})
}
