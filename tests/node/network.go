package node

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"

	"github.com/confighash/confighash/tests/cluster"
)

// Addresses of the node network, on ranges reserved for documentation and
// benchmarking (RFC 5737, RFC 2544), which no real network routes.
var (
	// linkRanges are the documentation ranges the host–node link may use: the first
	// the host has no address in (a sandboxed host may itself sit on 192.0.2.0/24).
	linkRanges = []*net.IPNet{mustCIDR("192.0.2.0/24"), mustCIDR("198.51.100.0/24"), mustCIDR("203.0.113.0/24")}
	// podCIDR holds the pods' addresses, routed only towards the node.
	podCIDR = mustCIDR("198.18.0.0/24")
	// serviceCIDR holds the Services' addresses, translated by kube-proxy in the node.
	serviceCIDR = mustCIDR("198.19.0.0/16")
)

func mustCIDR(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

// Network is the node's network namespace, joined to the host by a veth pair. The
// host only gains a link and two routes through it, which go with the link.
type Network struct {
	// Namespace is the network namespace's name (ip netns).
	Namespace string
	// HostIP is the host's end of the link; the API server listens there.
	HostIP net.IP
	// NodeIP is the node's end.
	NodeIP   net.IP
	hostLink string
	// made lists what ip netns adds to /run the first time, and Close removes: the
	// directory of namespaces (a mount point) and libmount's table.
	made []string
}

// netnsDirs are what ip netns adds to /run the first time it runs.
var netnsDirs = []string{"/run/netns", "/run/mount"}

// networkNamed is the network id names, before it is made.
func networkNamed(id string) *Network {
	return &Network{Namespace: "confighash-" + id, hostLink: "chn-" + id}
}

// NewNetwork creates the namespace of networkNamed(id) and its link.
func NewNetwork(id string) (n *Network, err error) {
	link, err := freeLinkRange()
	if err != nil {
		return nil, err
	}
	n = networkNamed(id)
	n.HostIP, n.NodeIP = addr(link, 1), addr(link, 2)
	for _, p := range netnsDirs {
		if _, err := os.Stat(p); os.IsNotExist(err) {
			n.made = append(n.made, p)
		}
	}
	if err := ip("netns", "add", n.Namespace); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = n.Close()
		}
	}()
	prefix := "/24"
	steps := [][]string{
		{"link", "add", n.hostLink, "type", "veth", "peer", "name", "eth0", "netns", n.Namespace},
		{"addr", "add", n.HostIP.String() + prefix, "dev", n.hostLink},
		{"link", "set", n.hostLink, "up"},
		{"route", "add", podCIDR.String(), "via", n.NodeIP.String()},
		{"route", "add", serviceCIDR.String(), "via", n.NodeIP.String()},
		{"-n", n.Namespace, "addr", "add", n.NodeIP.String() + prefix, "dev", "eth0"},
		{"-n", n.Namespace, "link", "set", "eth0", "up"},
		{"-n", n.Namespace, "link", "set", "lo", "up"},
		// A route for Service addresses, so that the node's own connections to them
		// reach kube-proxy's translation.
		{"-n", n.Namespace, "route", "add", serviceCIDR.String(), "via", n.HostIP.String()},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return n, err
		}
	}
	// Pods reach the API server through the node: it forwards, in its namespace only.
	if err := n.Command("sysctl", "-qw", "net.ipv4.ip_forward=1").Run(); err != nil {
		return n, fmt.Errorf("enable forwarding in %s: %w", n.Namespace, err)
	}
	return n, nil
}

// ControlPlane is where the control plane must listen for this node.
func (n *Network) ControlPlane() *cluster.Network {
	return &cluster.Network{HostIP: n.HostIP, ServiceCIDR: serviceCIDR}
}

// freeLinkRange returns the first of linkRanges that no address or route of the
// host's overlaps.
func freeLinkRange() (*net.IPNet, error) {
	var used []string
	for _, r := range linkRanges {
		addrs, err := exec.Command("ip", "-o", "addr", "show", "to", r.String()).Output()
		if err != nil {
			return nil, fmt.Errorf("list addresses: %w", err)
		}
		routes, err := exec.Command("ip", "-o", "route", "show", "match", r.String()).Output()
		if err != nil {
			return nil, fmt.Errorf("list routes: %w", err)
		}
		if len(addrs) == 0 && !strings.Contains(string(routes), r.String()) {
			return r, nil
		}
		used = append(used, r.String())
	}
	return nil, fmt.Errorf("every documentation range is in use on this host (%s): is another node suite running?", strings.Join(used, ", "))
}

// addr is the i-th address of r.
func addr(r *net.IPNet, i byte) net.IP {
	ip := slices.Clone(r.IP.To4())
	ip[3] += i
	return ip
}

// Command returns a command that runs in the node's network namespace, and in the
// host's mount namespace, where containerd and kubelet must share their mounts.
func (n *Network) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + n.path(), "--", name}, args...)...)
}

func (n *Network) path() string { return "/run/netns/" + n.Namespace }

// Close deletes the link (its routes and the node's end go with it) and the namespace.
func (n *Network) Close() error {
	var errs []string
	if linkExists(n.hostLink) {
		if err := ip("link", "del", n.hostLink); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if _, err := os.Stat(n.path()); err == nil {
		if err := ip("netns", "del", n.Namespace); err != nil {
			errs = append(errs, err.Error())
		}
	}
	for _, p := range n.made {
		_ = syscall.Unmount(p, syscall.MNT_DETACH) // only /run/netns is a mount
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("remove node network: %s", strings.Join(errs, "; "))
	}
	return nil
}

func linkExists(name string) bool {
	return exec.Command("ip", "link", "show", "dev", name).Run() == nil
}

func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
