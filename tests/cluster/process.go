package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// stopGrace bounds how long a component may take to exit after SIGTERM before SIGKILL.
const stopGrace = 10 * time.Second

// process is one running control-plane component.
type process struct {
	Name    string   `json:"name"`
	Pid     int      `json:"pid"`
	Binary  string   `json:"binary"`
	Args    []string `json:"args"`
	LogPath string   `json:"log"`

	cmd  *exec.Cmd
	done chan struct{}
}

// startProcess runs binary with args and this process's environment plus env,
// appending to dir/name.log. With detached, the process gets its own session and
// outlives this one (make cluster-up); otherwise the kernel kills it if this process
// dies, so a crashed test leaves no orphans.
func startProcess(dir, name, binary string, args, env []string, detached bool) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	// Appended to: a restarted component's log keeps what its first run wrote.
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create %s log: %w", name, err)
	}
	defer logFile.Close()

	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Its own process group keeps a terminal's Ctrl-C from reaching the components
	// directly: they must be stopped in order, apiserver before etcd.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if detached {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{Name: name, Pid: cmd.Process.Pid, Binary: binary, Args: args, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether a process started by this one has exited.
func (p *process) exited() bool {
	if p.done == nil {
		return !p.alive()
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// alive reports whether the pid still runs p's binary; a pid recorded by an earlier
// `cluster-up` may have been reused by an unrelated process.
func (p *process) alive() bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.Pid))
	if err != nil {
		return false
	}
	argv0, _, _ := strings.Cut(string(cmdline), "\x00")
	if argv0 != p.Binary {
		return false
	}
	// A zombie still has a cmdline until reaped; it is not running.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// stop sends SIGTERM, waits up to stopGrace, then sends SIGKILL and waits for the exit.
func (p *process) stop() error {
	if p.exited() {
		return nil
	}
	if err := syscall.Kill(p.Pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %s: %w", p.Name, err)
	}
	if p.waitExit(stopGrace) {
		return nil
	}
	return p.kill()
}

func (p *process) waitExit(timeout time.Duration) bool {
	if p.done != nil {
		select {
		case <-p.done:
			return true
		case <-time.After(timeout):
			return false
		}
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !p.alive() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return !p.alive()
}

// logTail returns the last lines of the process log, for error messages.
func (p *process) logTail(lines int) string { return LogTail(p.LogPath, lines) }

// LogTail returns the last lines of a log file, or "" if it cannot be read.
func LogTail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// kill sends SIGKILL, as a crash or a lost node would, and waits for the exit.
func (p *process) kill() error {
	if err := syscall.Kill(p.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s: %w", p.Name, err)
	}
	if !p.waitExit(stopGrace) {
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.Name, p.Pid)
	}
	return nil
}

// Process is a process another harness runs beside the control plane (a real node's
// components), logged and stopped as the control plane's own are.
type Process struct{ p *process }

// StartProcess runs binary with args and this process's environment plus env, logging
// to dir/name.log. The kernel kills it if this process dies.
func StartProcess(dir, name, binary string, args, env []string) (*Process, error) {
	p, err := startProcess(dir, name, binary, args, env, false)
	if err != nil {
		return nil, err
	}
	return &Process{p}, nil
}

// Stop sends SIGTERM, then SIGKILL if it has not exited after a grace period.
func (p *Process) Stop() error { return p.p.stop() }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool { return p.p.exited() }

// Pid is the process's id.
func (p *Process) Pid() int { return p.p.Pid }

// Name is the name it was started with, which also names its log.
func (p *Process) Name() string { return p.p.Name }

// LogTail returns the last lines of its log, for error messages.
func (p *Process) LogTail(lines int) string { return p.p.logTail(lines) }
