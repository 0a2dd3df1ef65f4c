// Command demo is `make run`: it starts the local control plane, the webhook and the
// watcher, applies the demo app, changes its ConfigMap and shows the rollout that
// follows, then stays up until Ctrl-C and stops everything it started.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/certs"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/webhook"
)

const (
	namespace  = "demo"
	deployment = "demo"
	configMap  = "demo-settings"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "make run: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	binary := fs.String("binary", "bin/confighash", "the confighash binary to run")
	demo := fs.String("manifest", "manifests/examples/demo.yaml", "the demo app")
	if err := fs.Parse(args); err != nil {
		return err
	}
	say := func(format string, a ...any) { fmt.Fprintf(out, "==> "+format+"\n", a...) }

	say("starting the local control plane")
	c, err := cluster.Start(ctx, cluster.Options{})
	if err != nil {
		return err
	}
	defer func() {
		say("stopping everything")
		if err := c.Stop(); err != nil {
			fmt.Fprintf(out, "stop: %v\n", err)
		}
	}()

	say("starting the webhook and the watcher (logs in %s)", c.Dir)
	url, caPEM, err := startComponents(ctx, c, *binary)
	if err != nil {
		return err
	}
	cfg := webhook.Configuration("confighash", admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
		webhook.Scope{InstallNamespace: "confighash", Vocabulary: confighash.Vocabulary{Reloader: true}})
	if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("register the webhook: %w", err)
	}
	time.Sleep(2 * time.Second) // the API server loads webhook configurations asynchronously

	say("applying %s: a Deployment using a ConfigMap (envFrom) and a Secret (volume)", *demo)
	manifest, err := os.ReadFile(*demo)
	if err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, manifest, "apply", "-f", "-"); err != nil {
		return err
	}
	if err := c.WaitRolledOut(ctx, namespace, deployment); err != nil {
		return err
	}
	before, err := hash(ctx, c)
	if err != nil {
		return err
	}
	show(ctx, out, c, "kubectl get replicasets,pods", "-n", namespace, "get", "replicasets,pods", "-o", "wide")
	fmt.Fprintf(out, "\npod template hash: %s\n\n", before)

	say("changing the ConfigMap: COLOR blue -> green")
	changed := time.Now()
	patch := `{"data":{"COLOR":"green"}}`
	if _, err := c.Client.CoreV1().ConfigMaps(namespace).Patch(ctx, configMap, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return err
	}
	var after string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		after, err = hash(ctx, c)
		return err == nil && after != before, nil
	}); err != nil {
		return fmt.Errorf("the hash did not change: %w", err)
	}
	fmt.Fprintf(out, "\nold hash: %s\nnew hash: %s\n\n", before, after)
	if err := c.WaitRolledOut(ctx, namespace, deployment); err != nil {
		return err
	}
	show(ctx, out, c, fmt.Sprintf("the new ReplicaSet took over, %s after the change", time.Since(changed).Round(100*time.Millisecond)), "-n", namespace, "get", "replicasets,pods", "-o", "wide")
	show(ctx, out, c, "the Event naming the ConfigMap", "-n", namespace, "get", "events", "--field-selector", "reason=ConfigChanged")

	fmt.Fprintf(out, "\nThe control plane stays up. In another shell:\n\n")
	fmt.Fprintf(out, "  export KUBECONFIG=%s\n", c.Kubeconfig)
	fmt.Fprintf(out, "  %s -n %s edit configmap %s\n\n", c.KubectlPath, namespace, configMap)
	fmt.Fprintf(out, "Ctrl-C stops everything.\n")
	<-ctx.Done()
	return nil
}

// startComponents starts the webhook, with a self-signed certificate for 127.0.0.1,
// and the watcher, and waits until both are ready. It returns the webhook's URL and CA.
func startComponents(ctx context.Context, c *cluster.Cluster, binary string) (string, []byte, error) {
	ports, err := cluster.FreePorts(3)
	if err != nil {
		return "", nil, err
	}
	ca, err := certs.NewAuthority("confighash-demo-ca", 24*time.Hour)
	if err != nil {
		return "", nil, err
	}
	serving, err := ca.Issue(certs.Leaf{CommonName: "confighash-webhook", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Validity: 24 * time.Hour})
	if err != nil {
		return "", nil, err
	}
	tlsDir := filepath.Join(c.Dir, "webhook-tls")
	if err := os.MkdirAll(tlsDir, 0o700); err != nil {
		return "", nil, err
	}
	if err := serving.WriteFiles(tlsDir, "tls.crt", "tls.key"); err != nil {
		return "", nil, err
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "confighash"}}, metav1.CreateOptions{}); err != nil {
		return "", nil, err
	}
	bin, err := filepath.Abs(binary)
	if err != nil {
		return "", nil, err
	}
	common := []string{"--kubeconfig=" + c.Kubeconfig, "--namespace=confighash", "--log-format=console"}
	webhookOps := fmt.Sprintf("127.0.0.1:%d", ports[1])
	watcherOps := fmt.Sprintf("127.0.0.1:%d", ports[2])
	if err := c.Run("webhook", bin, append([]string{"webhook",
		fmt.Sprintf("--listen-address=127.0.0.1:%d", ports[0]), "--ops-address=" + webhookOps,
		"--admission-callers=127.0.0.1", // the local API server's address, which no Endpoints may list
		"--tls-cert-file=" + filepath.Join(tlsDir, "tls.crt"), "--tls-key-file=" + filepath.Join(tlsDir, "tls.key"),
		"--shutdown-delay=0", // no Service routes to it: Ctrl-C stops it at once
	}, common...)...); err != nil {
		return "", nil, err
	}
	if err := c.Run("watcher", bin, append([]string{"watcher", "--ops-address=" + watcherOps}, common...)...); err != nil {
		return "", nil, err
	}
	ready, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, ops := range []string{webhookOps, watcherOps} {
		if err := cluster.WaitHTTP(ready, "http://"+ops+"/readyz"); err != nil {
			return "", nil, fmt.Errorf("%s never answered ready: %w", ops, err)
		}
	}
	return fmt.Sprintf("https://127.0.0.1:%d", ports[0]), ca.CertPEM, nil
}

func hash(ctx context.Context, c *cluster.Cluster) (string, error) {
	d, err := c.Client.AppsV1().Deployments(namespace).Get(ctx, deployment, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	h, ok := d.Spec.Template.Annotations[confighash.AnnotationHash]
	if !ok {
		return "", errors.New("the demo Deployment has no hash: the webhook did not admit it")
	}
	return h, nil
}

// show prints a kubectl command's output under a title.
func show(ctx context.Context, out io.Writer, c *cluster.Cluster, title string, args ...string) {
	fmt.Fprintf(out, "\n--- %s\n", title)
	res, err := c.Kubectl(ctx, nil, args...)
	if err != nil {
		fmt.Fprintf(out, "%v\n", err)
		return
	}
	fmt.Fprint(out, strings.TrimRight(string(res), "\n")+"\n")
}
