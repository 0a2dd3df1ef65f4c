package node

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAKilledRunIsUndoneByTheNext leaves on the host what a run killed midway
// leaves (a process, a mount, a network namespace with its link, a cgroup with a
// process in it, a container log link, a sysctl changed) under a record no process
// holds, and checks that the next run's first step removes all of it and puts the
// sysctl back, while the live run's node is left alone.
func TestAKilledRunIsUndoneByTheNext(t *testing.T) {
	env := requireNode(t)
	dir, err := os.MkdirTemp("", "confighash-node-")
	if err != nil {
		t.Fatal(err)
	}
	before, err := readHostState(dir)
	if err != nil {
		t.Fatal(err)
	}
	network := networkNamed(fmt.Sprintf("t%x", os.Getpid()))
	record, err := recordRun(dir, network, before)
	if err != nil {
		t.Fatal(err)
	}

	// What the killed run leaves.
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
	}
	run("ip", "netns", "add", network.Namespace)
	run("ip", "link", "add", network.hostLink, "type", "veth", "peer", "name", "eth0", "netns", network.Namespace)
	mount := filepath.Join(dir, "node", "pod")
	if err := os.MkdirAll(mount, 0o755); err != nil {
		t.Fatal(err)
	}
	run("mount", "-t", "tmpfs", "tmpfs", mount)
	logFile := filepath.Join(dir, "node", "app.log")
	if err := os.WriteFile(logFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	shim := startReaped(t, "tail", "-f", logFile) // names the run's directory, as a shim does
	container := startReaped(t, "sleep", "300")   // names nothing: found by its cgroup
	cgroup := cgroupRootOf(network)
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		t.Fatal(err)
	}
	joined := 0
	for _, h := range hierarchies {
		if err := os.Mkdir(filepath.Join(h, cgroup), 0o755); err != nil {
			t.Fatal(err)
		}
		if os.WriteFile(filepath.Join(h, cgroup, "cgroup.procs"), []byte(strconv.Itoa(container.pid)), 0o644) == nil {
			joined++
		}
	}
	if joined == 0 {
		t.Fatalf("the process could not join cgroup %s in any hierarchy", cgroup)
	}
	logLink := filepath.Join("/var/log/containers", filepath.Base(dir)+".log")
	if err := os.Symlink(logFile, logLink); err != nil {
		t.Fatal(err)
	}
	const tunable = "kernel/keys/root_maxkeys"
	if err := os.WriteFile("/proc/sys/"+tunable, []byte(before.sysctls[tunable]+"1"), 0o644); err != nil {
		t.Fatal(err)
	}
	record.Close() // the run is gone

	undone, err := undoAbandonedRuns()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(undone, []string{dir}) {
		t.Errorf("undone = %v, want only the killed run's %s", undone, dir)
	}
	for name, p := range map[string]reaped{"the shim": shim, "the container": container} {
		select {
		case err := <-p.exited:
			if err == nil || !strings.Contains(err.Error(), "killed") {
				t.Errorf("%s ended with %v, want killed", name, err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("%s (pid %d) still runs", name, p.pid)
		}
	}
	after, err := readHostState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if left := before.diff(after); len(left) > 0 {
		t.Errorf("the killed run's leftovers are still there:\n  %s", strings.Join(left, "\n  "))
	}
	for _, p := range []string{dir, filepath.Join(hierarchies[0], cgroup)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there (%v)", p, err)
		}
	}

	// The live run keeps its record, locked, and its node.
	f, err := os.Open(filepath.Join(env.dir, recordFile))
	if err != nil {
		t.Fatalf("the live run's record: %v", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		t.Error("the live run's record is not locked")
	}
	for _, p := range env.Node.processes {
		if p.Exited() {
			t.Errorf("%s of the live node exited:\n%s", p.Name(), p.LogTail(10))
		}
	}
}

// reaped is a process started by startReaped: its end is sent on exited.
type reaped struct {
	pid    int
	exited <-chan error
}

// startReaped starts a command and waits for it in the background, so that it
// leaves no zombie once killed.
func startReaped(t *testing.T, name string, args ...string) reaped {
	t.Helper()
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return reaped{pid: cmd.Process.Pid, exited: exited}
}
