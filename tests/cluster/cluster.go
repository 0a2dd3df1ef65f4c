// Package cluster runs a real Kubernetes control plane on loopback for tests,
// benchmarks and local runs: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok, whose fake nodes run pods without containers.
//
// Binaries are built once per machine from the Go module proxy by build-binaries.sh and
// cached outside the repository; versions are chosen with CONFIGHASH_KUBE_VERSION,
// CONFIGHASH_ETCD_VERSION and CONFIGHASH_KWOK_VERSION.
package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash/certs"
)

// NodeName is the kwok node that runs every pod.
const NodeName = "kwok-node-0"

// kwokNodeAnnotation marks the nodes kwok manages.
const kwokNodeAnnotation = "kwok.x-k8s.io/node"

// startTimeout bounds the whole start, from the first process to a Ready node.
const startTimeout = 2 * time.Minute

// Options tune a cluster. The zero value is ready to use.
type Options struct {
	// Dir holds certificates, data and logs. Default: a new temporary directory,
	// removed by Stop.
	Dir string
	// Detached lets the processes outlive the caller (make cluster-up).
	Detached bool
	// Large raises the controller-manager's client limits and workers, for thousands
	// of workloads. Its defaults (20 requests per second, 5 Deployment workers) left
	// 193 of 2,000 new Deployments unobserved after 5 minutes; raised, it competes for
	// the CPU with everything else, which slows a small test down.
	Large bool
	// Controllers, when set, are the only controllers the controller-manager runs (its
	// --controllers), for a test that reads the work of a few and would be slowed by
	// the others'.
	Controllers []string
	// RealNode, when set, places the control plane for a real node (tests/node) instead
	// of kwok's fake one: the API server listens on the node network's host address and
	// gives Services its range. No fake node is started.
	RealNode *Network
}

// Network is where a real node reaches the control plane.
type Network struct {
	// HostIP is the host's address on the link to the node; the API server listens
	// there and advertises it as the kubernetes Service's endpoint.
	HostIP net.IP
	// ServiceCIDR is the Services' range, routed only towards the node.
	ServiceCIDR *net.IPNet
}

// loopbackNetwork is the default: everything on loopback, Services on a range no
// packet ever uses (kwok's pods have no network).
var loopbackNetwork = Network{
	HostIP:      net.IPv4(127, 0, 0, 1),
	ServiceCIDR: &net.IPNet{IP: net.IPv4(10, 96, 0, 0), Mask: net.CIDRMask(16, 32)},
}

// Cluster is a running control plane.
type Cluster struct {
	// Dir holds the cluster's certificates, data and logs.
	Dir string
	// Kubeconfig is the path of an admin kubeconfig (system:masters).
	Kubeconfig string
	// Config is the admin client configuration.
	Config *rest.Config
	// Client is an admin clientset.
	Client kubernetes.Interface
	// KubectlPath is the kubectl binary of the same version as the API server.
	KubectlPath string

	processes []*process
	ownsDir   bool
	detached  bool
}

// Start builds the binaries if needed and starts a control plane with one Ready kwok node.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	bins, err := ensureBinaries(ctx, "etcd", "kwok", "kubernetes")
	if err != nil {
		return nil, err
	}
	c = &Cluster{Dir: opts.Dir, KubectlPath: filepath.Join(bins["kubernetes"], "kubectl"), detached: opts.Detached}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "confighash-cluster-"); err != nil {
			return nil, fmt.Errorf("create cluster directory: %w", err)
		}
		c.ownsDir = true
	} else if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cluster directory: %w", err)
	}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()

	network := loopbackNetwork
	if opts.RealNode != nil {
		network = *opts.RealNode
	}
	ports, err := FreePorts(3)
	if err != nil {
		return c, err
	}
	etcdPort, etcdPeerPort, apiPort := ports[0], ports[1], ports[2]
	if err := c.writePKI(network, apiPort); err != nil {
		return c, err
	}

	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeerPort)
	if err := c.start("etcd", filepath.Join(bins["etcd"], "etcd"),
		"--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync", "--log-level=warn",
		// Room for the flood test's gigabyte of large objects beside the rest: etcd's
		// default quota is 2 GiB, and a deleted object's space comes back only when
		// its revisions are compacted.
		"--quota-backend-bytes="+strconv.Itoa(8<<30),
	); err != nil {
		return c, err
	}
	if err := WaitHTTP(ctx, etcdURL+"/health"); err != nil {
		return c, c.startError("etcd", err)
	}

	kube := bins["kubernetes"]
	// Endpoints may not hold loopback addresses: with the API server on loopback, the
	// kubernetes Service gets none (nothing uses it); a real node's pods use it.
	endpoints := "--endpoint-reconciler-type=none"
	if opts.RealNode != nil {
		endpoints = "--endpoint-reconciler-type=lease"
	}
	if err := c.start("kube-apiserver", filepath.Join(kube, "kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address="+network.HostIP.String(), "--advertise-address="+network.HostIP.String(),
		"--secure-port="+strconv.Itoa(apiPort),
		"--cert-dir="+c.Dir,
		"--tls-cert-file="+c.path("apiserver.crt"), "--tls-private-key-file="+c.path("apiserver.key"),
		"--client-ca-file="+c.path("ca.crt"),
		"--service-account-key-file="+c.path("sa.crt"),
		"--service-account-signing-key-file="+c.path("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range="+network.ServiceCIDR.String(),
		"--authorization-mode=Node,RBAC",
		"--admission-control-config-file="+c.path(admissionConfigFile),
		"--allow-privileged=true",
		endpoints,
		"--profiling=false",
	); err != nil {
		return c, err
	}
	if err := c.connect(); err != nil {
		return c, err
	}
	if err := c.waitAPIServer(ctx); err != nil {
		return c, c.startError("kube-apiserver", err)
	}

	controllerManager := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--secure-port=0", "--leader-elect=false",
		"--service-account-private-key-file=" + c.path("sa.key"),
		"--root-ca-file=" + c.path("ca.crt"),
		"--use-service-account-credentials=false",
		"--profiling=false",
	}
	switch {
	case len(opts.Controllers) > 0:
		controllerManager = append(controllerManager, "--controllers="+strings.Join(opts.Controllers, ","))
	case opts.RealNode == nil:
		// kwok's node heartbeats can lag on a loaded machine; the node lifecycle
		// controller would then mark every pod not ready. It has nothing to do there.
		// A real node needs it: it lifts the taint a new node is registered with.
		controllerManager = append(controllerManager, "--controllers=*,-node-lifecycle-controller")
	}
	if opts.Large {
		controllerManager = append(controllerManager, "--kube-api-qps=300", "--kube-api-burst=600",
			"--concurrent-deployment-syncs=20", "--concurrent-replicaset-syncs=20")
	}
	if err := c.start("kube-controller-manager", filepath.Join(kube, "kube-controller-manager"), controllerManager...); err != nil {
		return c, err
	}
	if err := c.start("kube-scheduler", filepath.Join(kube, "kube-scheduler"),
		"--kubeconfig="+c.Kubeconfig,
		"--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false",
		"--profiling=false",
	); err != nil {
		return c, err
	}
	if opts.RealNode == nil {
		if err := c.startFakeNode(ctx, bins["kwok"]); err != nil {
			return c, err
		}
	}
	if err := c.waitServiceAccount(ctx, metav1.NamespaceDefault); err != nil {
		return c, c.startError("kube-controller-manager", err)
	}
	if err := c.writeState(); err != nil {
		return c, err
	}
	return c, nil
}

// startFakeNode starts kwok and registers the node it manages.
func (c *Cluster) startFakeNode(ctx context.Context, kwokDir string) error {
	kwokPorts, err := FreePorts(1)
	if err != nil {
		return err
	}
	if err := c.start("kwok", filepath.Join(kwokDir, "kwok"),
		"--kubeconfig="+c.Kubeconfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+kwokNodeAnnotation+"=fake",
		"--server-address="+fmt.Sprintf("127.0.0.1:%d", kwokPorts[0]),
		"--node-ip=127.0.0.1",
	); err != nil {
		return err
	}
	if err := c.addNode(ctx); err != nil {
		return c.startError("kwok", err)
	}
	return nil
}

// path returns the path of a file in the cluster directory.
func (c *Cluster) path(name string) string { return filepath.Join(c.Dir, name) }

func (c *Cluster) start(name, binary string, args ...string) error {
	p, err := startProcess(c.Dir, name, binary, args, nil, c.detached)
	if err != nil {
		return err
	}
	c.processes = append(c.processes, p)
	return nil
}

// Run starts another process beside the control plane, logging to Dir/name.log. Stop
// stops it before the control plane, as it stops everything in reverse start order.
func (c *Cluster) Run(name, binary string, args ...string) error {
	return c.start(name, binary, args...)
}

// startError adds the component's last log lines to err, or notes that it exited.
func (c *Cluster) startError(name string, err error) error {
	for _, p := range c.processes {
		if p.Name == name {
			state := "running"
			if p.exited() {
				state = "exited"
			}
			return fmt.Errorf("%s (%s, log %s): %w\n%s", name, state, p.LogPath, err, p.logTail(20))
		}
	}
	return err
}

// Stop stops every component in reverse start order: etcd goes last, because a
// kube-apiserver whose etcd is gone hangs in shutdown. It removes a directory it created.
func (c *Cluster) Stop() error {
	var errs []error
	for i := len(c.processes) - 1; i >= 0; i-- {
		errs = append(errs, c.processes[i].stop())
	}
	c.processes = nil
	if c.ownsDir {
		errs = append(errs, os.RemoveAll(c.Dir))
	} else {
		errs = append(errs, removeIfExists(c.path(stateFile)))
	}
	return errors.Join(errs...)
}

// writePKI writes a CA, the API server's serving certificate, an admin client
// certificate, the service-account signing key and the admin kubeconfig.
func (c *Cluster) writePKI(network Network, apiPort int) error {
	const validity = 365 * 24 * time.Hour
	ca, err := certs.NewAuthority("confighash-local-ca", validity)
	if err != nil {
		return err
	}
	serving, err := ca.Issue(certs.Leaf{
		CommonName: "kube-apiserver",
		DNSNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPs:        []net.IP{network.HostIP, firstIP(network.ServiceCIDR)},
		Validity:   validity,
	})
	if err != nil {
		return err
	}
	admin, err := ca.Issue(certs.Leaf{
		CommonName: "confighash-admin", Organizations: []string{"system:masters"},
		Client: true, Validity: validity,
	})
	if err != nil {
		return err
	}
	// Any key pair serves as a service-account signing key; the API server reads the
	// public key from the certificate.
	sa, err := ca.Issue(certs.Leaf{CommonName: "service-accounts", Client: true, Validity: validity})
	if err != nil {
		return err
	}
	for _, f := range []struct {
		kp         *certs.KeyPair
		cert, name string
	}{{&ca.KeyPair, "ca.crt", "ca.key"}, {serving, "apiserver.crt", "apiserver.key"}, {admin, "admin.crt", "admin.key"}, {sa, "sa.crt", "sa.key"}} {
		if err := f.kp.WriteFiles(c.Dir, f.cert, f.name); err != nil {
			return err
		}
	}

	if err := c.writeWebhookClient(validity); err != nil {
		return err
	}

	c.Kubeconfig = c.path("kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["confighash"] = &clientcmdapi.Cluster{
		Server:                   "https://" + net.JoinHostPort(network.HostIP.String(), strconv.Itoa(apiPort)),
		CertificateAuthorityData: ca.CertPEM,
	}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: admin.CertPEM, ClientKeyData: admin.KeyPEM}
	cfg.Contexts["confighash"] = &clientcmdapi.Context{Cluster: "confighash", AuthInfo: "admin"}
	cfg.CurrentContext = "confighash"
	if err := clientcmd.WriteToFile(*cfg, c.Kubeconfig); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// admissionConfigFile gives the API server a client certificate for webhooks, signed
// by a CA of its own (WebhookClientCA): a webhook that asks for one gets it, as where
// a cluster's AdmissionConfiguration names a kubeConfigFile.
const admissionConfigFile = "admission-config.yaml"

// WebhookClientCA is the file of the CA that signed the client certificate the API
// server presents to webhooks; empty for a cluster started before it had one.
func (c *Cluster) WebhookClientCA() string {
	if _, err := os.Stat(c.path("webhook-client-ca.crt")); err != nil {
		return ""
	}
	return c.path("webhook-client-ca.crt")
}

// writeWebhookClient writes the webhook client CA, its certificate for the API server,
// the kubeconfig that presents it to every webhook ("*") and the AdmissionConfiguration
// that names it.
func (c *Cluster) writeWebhookClient(validity time.Duration) error {
	ca, err := certs.NewAuthority("confighash-webhook-client-ca", validity)
	if err != nil {
		return err
	}
	client, err := ca.Issue(certs.Leaf{CommonName: "kube-apiserver-webhook-client", Client: true, Validity: validity})
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.path("webhook-client-ca.crt"), ca.CertPEM, 0o644); err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.AuthInfos["*"] = &clientcmdapi.AuthInfo{ClientCertificateData: client.CertPEM, ClientKeyData: client.KeyPEM}
	if err := clientcmd.WriteToFile(*cfg, c.path("webhook-client.kubeconfig")); err != nil {
		return fmt.Errorf("write webhook client kubeconfig: %w", err)
	}
	webhooks := fmt.Sprintf(`  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %q
`, c.path("webhook-client.kubeconfig"))
	config := "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n" +
		"- name: MutatingAdmissionWebhook\n" + webhooks + "- name: ValidatingAdmissionWebhook\n" + webhooks
	return os.WriteFile(c.path(admissionConfigFile), []byte(config), 0o644)
}

// firstIP is the first address of a range, which the kubernetes Service gets.
func firstIP(r *net.IPNet) net.IP {
	ip := slices.Clone(r.IP.To4())
	ip[3]++
	return ip
}

func (c *Cluster) waitAPIServer(ctx context.Context) error {
	return c.poll(ctx, "kube-apiserver", func(ctx context.Context) (bool, error) {
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
}

// nodeResources is generous so that scheduling never limits a test or benchmark.
var nodeResources = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("64"),
	corev1.ResourceMemory: resource.MustParse("256Gi"),
	corev1.ResourcePods:   resource.MustParse("5000"),
}

// addNode registers the fake node kwok manages and waits until kwok reports it Ready.
func (c *Cluster) addNode(ctx context.Context) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        NodeName,
			Annotations: map[string]string{kwokNodeAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels: map[string]string{
				"kubernetes.io/hostname": NodeName, "kubernetes.io/os": "linux",
				"kubernetes.io/arch": "amd64", "type": "kwok",
			},
		},
		Status: corev1.NodeStatus{
			Allocatable: nodeResources,
			Capacity:    nodeResources,
			// As a 1.36 kubelet declares it: pods restartable in place may run here.
			DeclaredFeatures: []string{"RestartAllContainersOnContainerExits"},
		},
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create node: %w", err)
	}
	if err := c.poll(ctx, "kwok", func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	// The API server taints a new node not-ready; with the node lifecycle controller
	// off (see kube-controller-manager's flags), nothing else would lift it.
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, NodeName, types.MergePatchType, []byte(`{"spec":{"taints":null}}`), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("untaint node: %w", err)
	}
	return nil
}

// waitServiceAccount waits for the controller-manager to create the namespace's default
// ServiceAccount, without which the API server rejects pods.
func (c *Cluster) waitServiceAccount(ctx context.Context, namespace string) error {
	return c.poll(ctx, "kube-controller-manager", func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// poll runs cond until it holds, failing fast when the named component has exited.
func (c *Cluster) poll(ctx context.Context, component string, cond wait.ConditionWithContextFunc) error {
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, p := range c.processes {
			if p.Name == component && p.exited() {
				return false, fmt.Errorf("%s exited", component)
			}
		}
		return cond(ctx)
	})
}

// CreateNamespace creates a namespace with a generated name from prefix and the given
// labels, and waits until pods can be created in it.
func (c *Cluster) CreateNamespace(ctx context.Context, prefix string, labels map[string]string) (string, error) {
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: labels},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create namespace: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.waitServiceAccount(ctx, ns.Name); err != nil {
		return "", fmt.Errorf("wait for default service account in %s: %w", ns.Name, err)
	}
	return ns.Name, nil
}

// DeleteNamespace deletes a namespace without waiting for its contents to go.
func (c *Cluster) DeleteNamespace(ctx context.Context, name string) error {
	err := c.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete namespace %s: %w", name, err)
	}
	return nil
}

// Kubectl runs kubectl against the cluster and returns its combined output.
func (c *Cluster) Kubectl(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.KubectlPath, append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// Helm returns the path of a helm binary, to lint and render the chart, building it
// first if needed. Only the tests need it, so a cluster does not build it.
func Helm(ctx context.Context) (string, error) {
	bins, err := ensureBinaries(ctx, "helm")
	if err != nil {
		return "", err
	}
	return filepath.Join(bins["helm"], "helm"), nil
}

// StartPrometheus starts a real Prometheus (built first if needed) with the scrape
// config on a free port of host, its data and log in dir, and returns it and its URL
// once it is ready. Stop stops it, by its pid; the kernel kills it if the test dies.
func StartPrometheus(ctx context.Context, dir, host, config string) (*Process, string, error) {
	bins, err := ensureBinaries(ctx, "prometheus")
	if err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600); err != nil {
		return nil, "", err
	}
	ports, err := FreePorts(1)
	if err != nil {
		return nil, "", err
	}
	addr := net.JoinHostPort(host, strconv.Itoa(ports[0]))
	p, err := StartProcess(dir, "prometheus", filepath.Join(bins["prometheus"], "prometheus"),
		[]string{"--config.file=" + filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + addr}, nil)
	if err != nil {
		return nil, "", err
	}
	url := "http://" + addr
	ready := func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/-/ready", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, ready); err != nil {
		return nil, "", errors.Join(fmt.Errorf("prometheus not ready: %w\n%s", err, p.LogTail(20)), p.Stop())
	}
	return p, url, nil
}

// NodeBinaries returns the directory holding kubelet, kube-proxy and pause, of the
// control plane's version, building them first if needed (tests/node).
func NodeBinaries(ctx context.Context) (string, error) {
	bins, err := ensureBinaries(ctx, "node")
	if err != nil {
		return "", err
	}
	return bins["node"], nil
}

// ensureBinaries runs build-binaries.sh, which builds the named components that are not
// cached yet, and returns each one's directory.
func ensureBinaries(ctx context.Context, names ...string) (map[string]string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(sourceDir(), "build-binaries.sh"), names...)
	cmd.Stderr = os.Stderr
	// Cancelling stops the script's go commands too, not only the script.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("build control-plane binaries: %w", err)
	}
	dirs := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if name, dir, ok := strings.Cut(sc.Text(), "="); ok {
			dirs[name] = dir
		}
	}
	for _, name := range names {
		if dirs[name] == "" {
			return nil, fmt.Errorf("build-binaries.sh did not report a %s directory", name)
		}
	}
	return dirs, nil
}

// sourceDir is this package's directory, where build-binaries.sh lives.
func sourceDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// FreePorts returns n distinct loopback ports that were free a moment ago, each handed
// out once per process. They lie below the kernel's range for outgoing connections,
// which could otherwise take one between this check and the bind of the process it is
// for; the ports the kernel would choose for a listener on :0 lie in that range.
func FreePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	high := ephemeralPortsStart()
	low := high / 2
	ports := make([]int, 0, n)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for attempt := 0; len(ports) < n; attempt++ {
		if attempt == 1000 {
			return nil, fmt.Errorf("no free port in [%d, %d)", low, high)
		}
		p := low + mathrand.IntN(high-low)
		if handedOut[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		listeners = append(listeners, l)
		handedOut[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

var (
	portsMu   sync.Mutex
	handedOut = map[int]bool{}
)

// ephemeralPortsStart is the first port the kernel uses for outgoing connections.
func ephemeralPortsStart() int {
	const linuxDefault = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return linuxDefault
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return linuxDefault
	}
	start, err := strconv.Atoi(fields[0])
	if err != nil || start < 4096 {
		return linuxDefault
	}
	return start
}

// WaitHTTP polls url until it answers 200, as a readiness endpoint does.
func WaitHTTP(ctx context.Context, url string) error {
	client := &http.Client{Timeout: time.Second}
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// stateFile records a detached cluster's processes so `cluster-down` can stop them.
const stateFile = "state.json"

type state struct {
	Kubeconfig string     `json:"kubeconfig"`
	Kubectl    string     `json:"kubectl"`
	Processes  []*process `json:"processes"`
}

func (c *Cluster) writeState() error {
	data, err := json.MarshalIndent(state{Kubeconfig: c.Kubeconfig, Kubectl: c.KubectlPath, Processes: c.processes}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode cluster state: %w", err)
	}
	if err := os.WriteFile(c.path(stateFile), data, 0o644); err != nil {
		return fmt.Errorf("write cluster state: %w", err)
	}
	return nil
}

// Attach returns the cluster whose state is recorded in dir by a detached Start, or an
// error wrapping os.ErrNotExist if none is.
func Attach(dir string) (*Cluster, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("read cluster state: %w", err)
	}
	var s state
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("decode cluster state %s: %w", filepath.Join(dir, stateFile), err)
	}
	// What it restarts must outlive this process too, as the rest of the cluster does.
	c := &Cluster{Dir: dir, Kubeconfig: s.Kubeconfig, KubectlPath: s.Kubectl, processes: s.Processes, detached: true}
	if err := c.connect(); err != nil {
		return nil, err
	}
	return c, nil
}

// connect creates the admin client. Its client-side rate limit is off: tests and
// benchmarks measure the API server and confighash, not client-go's throttle.
func (c *Cluster) connect() error {
	var err error
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	c.Config.QPS = -1
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	return nil
}

// Running reports whether every recorded component still runs.
func (c *Cluster) Running() bool {
	for _, p := range c.processes {
		if p.exited() {
			return false
		}
	}
	return len(c.processes) > 0
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// WaitRolledOut waits until the Deployment's controller has observed its latest spec
// and every replica is updated and available, as `kubectl rollout status` does.
func (c *Cluster) WaitRolledOut(ctx context.Context, namespace, name string) error {
	var last *appsv1.Deployment
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = d
		want := ptr.Deref(d.Spec.Replicas, 1)
		s := d.Status
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want &&
			s.AvailableReplicas == want && s.Replicas == want, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("deployment %s/%s did not roll out: %w (status %+v)", namespace, name, err, last.Status)
	}
	return err
}

// SecretsStoreCSIVersion is the Secrets Store CSI driver whose CRDs the tests install.
const SecretsStoreCSIVersion = "v1.5.3"

// InstallSecretsStoreCRDs installs the Secrets Store CSI driver's CRDs, from its Go
// module, which the project does not require: it is downloaded from the module proxy.
func (c *Cluster) InstallSecretsStoreCRDs(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", "sigs.k8s.io/secrets-store-csi-driver@"+SecretsStoreCSIVersion).Output()
	if err != nil {
		return fmt.Errorf("download the Secrets Store CSI driver's module: %w", err)
	}
	var module struct{ Dir string }
	if err := json.Unmarshal(out, &module); err != nil || module.Dir == "" {
		return fmt.Errorf("download the Secrets Store CSI driver's module: %s", out)
	}
	crds := filepath.Join(module.Dir, "config", "crd", "bases")
	if _, err := c.Kubectl(ctx, nil, "apply", "--server-side", "-f", crds); err != nil {
		return err
	}
	_, err = c.Kubectl(ctx, nil, "wait", "--for=condition=Established", "--timeout=60s", "-f", crds)
	return err
}

// InstallCertManagerCRDs installs every CRD of the cert-manager module the project
// requires and waits until each is served.
func (c *Cluster) InstallCertManagerCRDs(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager").Output()
	if err != nil {
		return fmt.Errorf("locate the cert-manager module: %w", err)
	}
	crds := filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds")
	// Server-side: the CRDs are too large for client-side apply's annotation.
	if _, err := c.Kubectl(ctx, nil, "apply", "--server-side", "-f", crds); err != nil {
		return err
	}
	_, err = c.Kubectl(ctx, nil, "wait", "--for=condition=Established", "--timeout=60s", "-f", crds)
	return err
}
