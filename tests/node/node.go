// Package node runs a real Kubernetes node next to the local control plane, for what
// kwok's fake nodes cannot show: the project's image running, kubelet mounting and
// renewing the serving certificate, Services, probes, SIGTERM.
//
// containerd, runc and the CNI plugins come from Debian's packages (install.sh);
// kubelet, kube-proxy and pause are built from the control plane's Kubernetes module.
// The node lives in a network namespace of its own on documentation ranges and puts
// the host back as it found it: Stop removes what the node made and reports anything
// left. It needs root on Linux.
package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/confighash/confighash/tests/cluster"
)

// Name is the node's name.
const Name = "confighash-node"

// PauseImage is the sandbox image, built from Kubernetes' pause.c.
const PauseImage = "registry.k8s.io/pause:3.10"

// Node is a running node: containerd, kubelet and kube-proxy in its network namespace.
type Node struct {
	// Network is the node's network namespace.
	Network *Network

	dir        string
	cgroupRoot string
	before     hostState // the host before the node started
	processes  []*cluster.Process
	cluster    *cluster.Cluster
}

// Unavailable says why a node cannot run here, or "" if it can.
func Unavailable() string {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		return "the real node needs root on Linux (it makes a network namespace and runs containerd)"
	}
	for _, tool := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip", "nsenter", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is not installed: make test-node installs the node's packages"
		}
	}
	if _, err := os.Stat(filepath.Join(cniBinDir, "bridge")); err != nil {
		return "the CNI plugins are not installed: make test-node installs the node's packages"
	}
	return ""
}

// cniBinDir is where Debian's containernetworking-plugins puts the plugins.
const cniBinDir = "/usr/lib/cni"

// Start starts a node in network, registered with c, and waits until it is Ready.
// dir holds its state; Stop removes it.
func Start(ctx context.Context, c *cluster.Cluster, network *Network, dir string) (n *Node, err error) {
	bins, err := cluster.NodeBinaries(ctx)
	if err != nil {
		return nil, err
	}
	n = &Node{Network: network, dir: dir, cluster: c, cgroupRoot: cgroupRootOf(network)}
	if n.before, err = readHostState(dir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Stop(context.Background()))
		}
	}()
	if err := n.writeConfig(c); err != nil {
		return n, err
	}
	if err := n.makeCgroupRoot(); err != nil {
		return n, err
	}
	if err := n.start("containerd", "containerd", "--config", n.path("containerd.toml")); err != nil {
		return n, err
	}
	if err := n.waitFile(ctx, "containerd", n.socket()); err != nil {
		return n, err
	}
	pause := n.path("pause.tar")
	if err := writePauseImage(pause, filepath.Join(bins, "pause")); err != nil {
		return n, err
	}
	if err := n.Import(ctx, pause); err != nil {
		return n, err
	}
	if err := n.start("kubelet", filepath.Join(bins, "kubelet"),
		"--config="+n.path("kubelet.yaml"),
		"--kubeconfig="+c.Kubeconfig,
		"--hostname-override="+Name,
		"--node-ip="+network.NodeIP.String(),
		"--root-dir="+n.path("kubelet"),
		"--cert-dir="+n.path("kubelet-pki"),
	); err != nil {
		return n, err
	}
	if err := n.start("kube-proxy", filepath.Join(bins, "kube-proxy"), "--config="+n.path("kube-proxy.yaml")); err != nil {
		return n, err
	}
	return n, n.waitReady(ctx)
}

// cgroupRootOf is the cgroup of the node on network: the pods' parent.
func cgroupRootOf(network *Network) string { return "/" + network.Namespace }

func (n *Node) path(name string) string { return filepath.Join(n.dir, name) }

func (n *Node) socket() string { return n.path("containerd.sock") }

// start runs a component in the node's network namespace. iptables' lock file is
// kept in the node's directory rather than the host's /run.
func (n *Node) start(name, binary string, args ...string) error {
	cmd := n.Network.Command(binary, args...)
	p, err := cluster.StartProcess(n.dir, name, cmd.Path, cmd.Args[1:], []string{"XTABLES_LOCKFILE=" + n.path("xtables.lock")})
	if err != nil {
		return err
	}
	n.processes = append(n.processes, p)
	return nil
}

// waitFile waits until path exists, failing early if the component exits.
func (n *Node) waitFile(ctx context.Context, component, path string) error {
	return n.poll(ctx, component, 30*time.Second, func(context.Context) (bool, error) {
		_, err := os.Stat(path)
		return err == nil, nil
	})
}

func (n *Node) waitReady(ctx context.Context) error {
	return n.poll(ctx, "kubelet", 2*time.Minute, func(ctx context.Context) (bool, error) {
		node, err := n.cluster.Client.CoreV1().Nodes().Get(ctx, Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, n.givePodCIDR(ctx, node)
			}
		}
		return false, nil
	})
}

// givePodCIDR records the node's pod range on the Node, as kube-controller-manager's
// --allocate-node-cidrs does where a cluster's network plugin takes ranges from it:
// the webhook reads it to know the node's bridge, the address its kube-proxy gives
// what it forwards to a Service from outside the pod network.
func (n *Node) givePodCIDR(ctx context.Context, node *corev1.Node) error {
	if node.Spec.PodCIDR != "" {
		return nil
	}
	patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, podCIDR, podCIDR)
	_, err := n.cluster.Client.CoreV1().Nodes().Patch(ctx, Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// poll runs cond until it holds or timeout passes, failing early if any component
// has exited; the error carries the named component's last log lines.
func (n *Node) poll(ctx context.Context, component string, timeout time.Duration, cond wait.ConditionWithContextFunc) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, p := range n.processes {
			if p.Exited() {
				return false, fmt.Errorf("%s exited:\n%s", p.Name(), p.LogTail(30))
			}
		}
		return cond(ctx)
	})
	if err != nil {
		for _, p := range n.processes {
			if p.Name() == component {
				return fmt.Errorf("%s: %w\n%s", component, err, p.LogTail(30))
			}
		}
	}
	return err
}

// Import loads an image archive (docker save or OCI layout) into the node's
// containerd, where kubelet finds it without pulling.
func (n *Node) Import(ctx context.Context, archive string, flags ...string) error {
	args := append([]string{"--address", n.socket(), "--namespace", "k8s.io", "images", "import", "--no-unpack=false"}, flags...)
	cmd := exec.CommandContext(ctx, "ctr", append(args, archive)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("import %s: %w: %s", archive, err, out)
	}
	return nil
}

// Stop removes every pod from the node, stops its components, and removes what they
// left on the host: containers' shims and mounts, pod network namespaces, cgroups,
// CNI state, log links; it puts kubelet's sysctls back and removes the node's
// directory. The network stays (Network.Close).
func (n *Node) Stop(ctx context.Context) error {
	var errs []error
	if len(n.processes) > 0 && !n.processes[0].Exited() {
		errs = append(errs, n.drain(ctx))
	}
	for i := len(n.processes) - 1; i >= 0; i-- {
		errs = append(errs, n.processes[i].Stop())
	}
	n.processes = nil
	return errors.Join(append(errs, clearHost(n.dir, n.cgroupRoot, n.before))...)
}

// clearHost removes what a node whose state is in dir left on the host, from the
// processes naming dir (containers' shims, which containerd starts detached and which
// outlive it) to its cgroups, puts the sysctls of before back, and then removes dir.
func clearHost(dir, cgroupRoot string, before hostState) error {
	errs := []error{killProcessesNaming(dir), unmountUnder(dir), removeNewHostPaths(dir, before.paths), removeCgroup(cgroupRoot)}
	for k, v := range before.sysctls {
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s: %w", k, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err // dir, and a killed run's record in it, stay for another try
	}
	return os.RemoveAll(dir)
}

// removeNewHostPaths removes what appeared under hostPaths since before was read
// (pod network namespaces are mounts: they are detached first), deepest first.
func removeNewHostPaths(dir string, before []string) error {
	now, err := readHostState(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range slices.Backward(now.paths) {
		if slices.Contains(before, p) {
			continue
		}
		if slices.Contains(now.mounts, p) {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
			}
		}
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// drain deletes every pod on the node and waits until containerd runs no container,
// so that kubelet and containerd tear down each pod's network and mounts themselves.
func (n *Node) drain(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	pods := n.cluster.Client.CoreV1().Pods(metav1.NamespaceAll)
	// Controllers would replace deleted pods: the node takes no new ones.
	if _, err := n.cluster.Client.CoreV1().Nodes().Patch(ctx, Name, types.MergePatchType,
		[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("cordon the node: %w", err)
	}
	return wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + Name})
		if err != nil {
			return false, nil
		}
		for _, p := range list.Items {
			_ = n.cluster.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
		out, err := exec.CommandContext(ctx, "ctr", "--address", n.socket(), "--namespace", "k8s.io", "tasks", "list", "--quiet").Output()
		return err == nil && len(list.Items) == 0 && strings.TrimSpace(string(out)) == "", nil
	})
}

// makeCgroupRoot creates the cgroup every pod of the node lives under, in each
// hierarchy, so that Stop can remove them all.
func (n *Node) makeCgroupRoot() error {
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hierarchies {
		if err := os.Mkdir(filepath.Join(h, n.cgroupRoot), 0o755); err != nil && !os.IsExist(err) {
			return fmt.Errorf("create cgroup: %w", err)
		}
	}
	return nil
}

func cgroupHierarchies() ([]string, error) {
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil, fmt.Errorf("list cgroup hierarchies: %w", err)
	}
	var dirs []string
	for _, e := range entries {
		if p := filepath.Join("/sys/fs/cgroup", e.Name()); e.IsDir() {
			dirs = append(dirs, p)
		}
	}
	return dirs, nil
}

// removeCgroup removes root and every cgroup under it, children first, killing
// what still runs in them (a container whose shim was killed keeps running).
func removeCgroup(root string) error {
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hierarchies {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, d := range slices.Backward(dirs) {
			if err := emptyCgroup(d); err != nil {
				errs = append(errs, err)
			} else if err := syscall.Rmdir(d); err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// emptyCgroup kills the processes of the cgroup dir and waits until they are gone.
func emptyCgroup(dir string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil || len(strings.TrimSpace(string(procs))) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes %s", dir, strings.Fields(string(procs)))
		}
		for _, f := range strings.Fields(string(procs)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	points, err := mountPoints()
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range slices.Backward(points) {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
			}
		}
	}
	return errors.Join(errs...)
}

// killProcessesNaming kills the processes whose command line holds mark and waits
// until they are gone.
func killProcessesNaming(mark string) error {
	var errs []error
	for _, p := range processesNaming(mark) {
		var pid int
		if _, err := fmt.Sscan(p, &pid); err == nil {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("kill %s: %w", p, err))
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(processesNaming(mark)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	return errors.Join(errs...)
}
