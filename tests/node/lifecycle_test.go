package node

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// admissions streams server-side dry-run creates of the opted-in demo Deployment from
// several clients and counts those the webhook did not mutate: with failurePolicy
// Ignore, a failed call shows only as a missing hash.
type admissions struct {
	total, failed atomic.Int64
	firstFailure  atomic.Value
	stop          context.CancelFunc
	done          sync.WaitGroup
}

// admissionStreams is how many clients stream at once: the API server opens a
// connection to the webhook per concurrent call, so that several meet a terminating pod.
const admissionStreams = 4

func streamAdmissions(ctx context.Context, env *Env) *admissions {
	ctx, cancel := context.WithCancel(ctx)
	a := &admissions{stop: cancel}
	for range admissionStreams {
		a.done.Add(1)
		go a.stream(ctx, env)
	}
	return a
}

// stream creates one dry-run Deployment after another until ctx ends.
func (a *admissions) stream(ctx context.Context, env *Env) {
	defer a.done.Done()
	for ctx.Err() == nil {
		mutated, err := env.Mutated(ctx)
		if ctx.Err() != nil {
			return
		}
		a.total.Add(1)
		if !mutated {
			a.failed.Add(1)
			a.firstFailure.CompareAndSwap(nil, fmt.Sprintf("at %s: error %v", time.Now().Format(time.TimeOnly), err))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// finish stops the stream and fails the test if any admission was not mutated,
// with the API server's account of the failed calls.
func (a *admissions) finish(t *testing.T, env *Env) {
	t.Helper()
	a.stop()
	a.done.Wait()
	t.Logf("figures: %d admissions while it happened, %d not mutated", a.total.Load(), a.failed.Load())
	if a.total.Load() < 10 {
		t.Fatalf("only %d admissions streamed", a.total.Load())
	}
	if a.failed.Load() > 0 {
		log, _ := os.ReadFile(filepath.Join(env.Cluster.Dir, "kube-apiserver.log"))
		var calls []string
		for _, l := range strings.Split(string(log), "\n") {
			if strings.Contains(l, "failed calling webhook") {
				calls = append(calls, l)
			}
		}
		t.Fatalf("%d of %d admissions were not mutated (first %v); the API server says:\n%s",
			a.failed.Load(), a.total.Load(), a.firstFailure.Load(), strings.Join(calls, "\n"))
	}
}

// servingCertificateRenewed renews the webhook's certificate as `cmctl renew` does and
// waits until every webhook pod serves the new one, read by the running process from
// the kubelet-updated mount, while admissions stream.
func servingCertificateRenewed(t *testing.T, env *Env) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	secrets := env.Cluster.Client.CoreV1().Secrets(InstallNamespace)
	old, err := secrets.Get(ctx, "confighash-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stream := streamAdmissions(ctx, env)
	start := time.Now()
	if _, err := env.Cluster.Kubectl(ctx, nil, "-n", InstallNamespace, "patch", "certificate", "confighash-webhook",
		"--subresource=status", "--type=json", "-p",
		`[{"op":"add","path":"/status/conditions/-","value":{"type":"Issuing","status":"True","reason":"ManuallyTriggered","message":"renewed by the node suite"}}]`); err != nil {
		t.Fatal(err)
	}
	var renewed []byte
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		s, err := secrets.Get(ctx, "confighash-webhook-tls", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		renewed = s.Data["tls.crt"]
		return !bytes.Equal(renewed, old.Data["tls.crt"]), nil
	})
	if err != nil {
		t.Fatalf("cert-manager did not renew the certificate: %v", err)
	}
	issued := time.Since(start)
	block, _ := pem.Decode(renewed)
	if block == nil {
		t.Fatal("the renewed tls.crt holds no PEM block")
	}
	// Every pod: the Service picks one per connection, so the new certificate must
	// come back many times in a row.
	addr := net.JoinHostPort(serviceIP(ctx, t, env, InstallNamespace, "confighash-webhook"), "443")
	inARow := 0
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		served, err := servedCertificate(ctx, addr)
		if err != nil || !bytes.Equal(served, block.Bytes) {
			inARow = 0
			return false, nil
		}
		inARow++
		return inARow >= 20, nil
	})
	if err != nil {
		t.Fatalf("the webhook pods did not all serve the renewed certificate: %v", err)
	}
	t.Logf("figures: renewal issued in %s, served by every webhook pod %s after the renewal",
		issued.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
	time.Sleep(2 * time.Second) // admissions on the new certificate too
	stream.finish(t, env)
}

// servedCertificate returns the leaf certificate a TLS server presents.
func servedCertificate(ctx context.Context, addr string) ([]byte, error) {
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} // the leaf is compared byte for byte
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].Raw, nil
}

func serviceIP(ctx context.Context, t *testing.T, env *Env, ns, name string) string {
	t.Helper()
	svc, err := env.Cluster.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc.Spec.ClusterIP
}

// leaderDeleted deletes the leading watcher's pod, changes the ConfigMap at once, and
// expects the other replica to lead and roll the demo exactly once.
func leaderDeleted(t *testing.T, env *Env) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	leases := env.Cluster.Client.CoordinationV1().Leases(InstallNamespace)
	lease, err := leases.Get(ctx, "confighash-watcher", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leader := *lease.Spec.HolderIdentity
	pod := leaderPod(ctx, t, env, leader)
	before, err := env.ReplicaSets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := env.Cluster.Client.CoreV1().Pods(InstallNamespace).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.SetDemoMessage(ctx, "v3"); err != nil {
		t.Fatal(err)
	}
	page, err := env.DemoPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := waitPage(ctx, t, page, "v3"); got != "v3" {
		t.Fatalf("the page never showed v3 after the leader's pod was deleted")
	}
	t.Logf("figures: change made as the leader's pod was deleted, served %s later", time.Since(start).Round(100*time.Millisecond))
	lease, err = leases.Get(ctx, "confighash-watcher", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *lease.Spec.HolderIdentity == leader {
		t.Fatalf("the deleted pod %s still leads", leader)
	}
	expectRollouts(ctx, t, env, before)
}

// leaderPod is the watcher pod whose name the Lease's holder identity begins with.
func leaderPod(ctx context.Context, t *testing.T, env *Env, identity string) string {
	t.Helper()
	pods, err := env.Cluster.Client.CoreV1().Pods(InstallNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=confighash-watcher"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if strings.HasPrefix(identity, p.Name) {
			return p.Name
		}
	}
	t.Fatalf("no watcher pod holds the Lease (holder %q)", identity)
	return ""
}

// webhookTerminated deletes a webhook pod, so kubelet sends it SIGTERM, while
// admissions stream, and expects every admission to be mutated.
func webhookTerminated(t *testing.T, env *Env) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	pods, err := env.Cluster.Client.CoreV1().Pods(InstallNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=confighash-webhook"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("no webhook pod: %v", err)
	}
	stream := streamAdmissions(ctx, env)
	time.Sleep(2 * time.Second)
	if err := env.Cluster.Client.CoreV1().Pods(InstallNamespace).Delete(ctx, pods.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Cluster.Kubectl(ctx, nil, "-n", InstallNamespace, "wait", "--for=delete", "--timeout=90s", "pod/"+pods.Items[0].Name); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Cluster.Kubectl(ctx, nil, "-n", InstallNamespace, "rollout", "status", "--timeout=90s", "deployment/confighash-webhook"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	stream.finish(t, env)
}
