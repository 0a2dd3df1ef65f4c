package node

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// kernelTunables are the host-wide sysctls kubelet sets at start (its container
// manager's kernel tunables); a node must put them back.
var kernelTunables = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// hostPaths are where containerd, kubelet and the CNI plugins write outside the
// directories they are given: pod network namespaces, shim sockets, the CNI result
// cache, container log links.
var hostPaths = []string{"/run/netns", "/run/containerd", "/var/lib/cni", "/var/log/containers"}

// hostState is what a node could leave behind on the host.
type hostState struct {
	sysctls   map[string]string
	links     []string
	mounts    []string
	paths     []string // every entry under hostPaths, and each of them
	run       []string
	iptables  string
	processes []string
}

// readHostState reads the host's state; processes are those whose command line
// names mark.
func readHostState(mark string) (hostState, error) {
	s := hostState{sysctls: map[string]string{}}
	for _, k := range kernelTunables {
		v, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return s, fmt.Errorf("read sysctl %s: %w", k, err)
		}
		s.sysctls[k] = strings.TrimSpace(string(v))
	}
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return s, fmt.Errorf("list links: %w", err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			s.links = append(s.links, strings.TrimSuffix(f[1], ":"))
		}
	}
	if s.mounts, err = mountPoints(); err != nil {
		return s, err
	}
	for _, p := range hostPaths {
		_ = filepath.WalkDir(p, func(path string, _ os.DirEntry, err error) error {
			if err == nil {
				s.paths = append(s.paths, path)
			}
			return nil
		})
	}
	entries, err := os.ReadDir("/run")
	if err != nil {
		return s, fmt.Errorf("list /run: %w", err)
	}
	for _, e := range entries {
		s.run = append(s.run, e.Name())
	}
	// The host's own rules, never written by a node: kubelet and kube-proxy run in
	// the node's namespace.
	if out, err := exec.Command("iptables-save").Output(); err == nil {
		s.iptables = stripCounters(string(out))
	}
	s.processes = processesNaming(mark)
	return s, nil
}

// diff lists what differs in after, one line each.
func (before hostState) diff(after hostState) []string {
	var d []string
	for _, k := range kernelTunables {
		if before.sysctls[k] != after.sysctls[k] {
			d = append(d, fmt.Sprintf("sysctl %s is %s, was %s", k, after.sysctls[k], before.sysctls[k]))
		}
	}
	d = append(d, listDiff("link", before.links, after.links)...)
	d = append(d, listDiff("mount", before.mounts, after.mounts)...)
	d = append(d, listDiff("path", before.paths, after.paths)...)
	d = append(d, listDiff("/run entry", before.run, after.run)...)
	if before.iptables != after.iptables {
		d = append(d, "the host's iptables rules changed")
	}
	d = append(d, listDiff("process", before.processes, after.processes)...)
	return d
}

func listDiff(what string, before, after []string) []string {
	var d []string
	for _, a := range after {
		if !slices.Contains(before, a) {
			d = append(d, fmt.Sprintf("%s %s left", what, a))
		}
	}
	for _, b := range before {
		if !slices.Contains(after, b) {
			d = append(d, fmt.Sprintf("%s %s gone", what, b))
		}
	}
	return d
}

// mountPoints lists the host's mount points (this process's mount namespace, which
// the node shares).
func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			points = append(points, fields[4])
		}
	}
	return points, sc.Err()
}

// processesNaming lists the pids and command lines of processes whose command line
// contains mark.
func processesNaming(mark string) []string {
	var found []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), mark) || d.Name() == fmt.Sprint(os.Getpid()) {
			continue
		}
		found = append(found, d.Name()+" "+strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " "))
	}
	return found
}

// stripCounters drops iptables-save's packet counters and comments, which change by
// themselves.
func stripCounters(rules string) string {
	var kept []string
	for _, l := range strings.Split(rules, "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		if i := strings.Index(l, " ["); strings.HasPrefix(l, ":") && i > 0 {
			l = l[:i]
		}
		kept = append(kept, l)
	}
	return strings.Join(kept, "\n")
}
