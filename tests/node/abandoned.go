package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// A run stopped without Down (killed, or its machine's session ended under it)
// leaves its node on the host: processes, mounts, pod network namespaces, cgroups,
// and a link whose routes make the next run fail. Each run writes what undoing it
// needs into its directory and holds a lock on that record while it lives; Up first
// undoes every run whose lock is free.

// recordFile is the record's name in a run's directory.
const recordFile = "run.json"

// runRecord is what undoing a run needs: the host before it, and the names it used.
type runRecord struct {
	Namespace string            `json:"namespace"`
	HostLink  string            `json:"hostLink"`
	Sysctls   map[string]string `json:"sysctls"`
	Paths     []string          `json:"paths"`
	Run       []string          `json:"run"`
}

// recordRun writes how to undo a run on network, started with the host in before,
// into dir, and locks it. The lock lasts while the returned file is open, and goes
// with the process however it ends.
func recordRun(dir string, network *Network, before hostState) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, recordFile), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	r := runRecord{Namespace: network.Namespace, HostLink: network.hostLink, Sysctls: before.sysctls, Paths: before.paths, Run: before.run}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return nil, errors.Join(fmt.Errorf("lock %s: %w", f.Name(), err), f.Close())
	}
	if err := json.NewEncoder(f).Encode(r); err != nil {
		return nil, errors.Join(fmt.Errorf("write %s: %w", f.Name(), err), f.Close())
	}
	return f, nil
}

// undoAbandonedRuns undoes every run under os.TempDir() whose record no live run
// holds, and returns their directories. A directory without a record is left: its
// run was killed before it changed anything, or it is not a run's.
func undoAbandonedRuns() ([]string, error) {
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), "confighash-node-*"))
	if err != nil {
		return nil, err
	}
	var undone []string
	var errs []error
	for _, dir := range dirs {
		f, err := os.Open(filepath.Join(dir, recordFile))
		if err != nil {
			continue
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close() // a live run's
			continue
		}
		var r runRecord
		err = json.NewDecoder(f).Decode(&r)
		f.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("read the record of %s: %w", dir, err))
			continue
		}
		if err := undo(dir, r); err != nil {
			errs = append(errs, fmt.Errorf("undo the run of %s: %w", dir, err))
			continue
		}
		undone = append(undone, dir)
	}
	return undone, errors.Join(errs...)
}

// undo does what Down would have done for the run of dir.
func undo(dir string, r runRecord) error {
	network := &Network{Namespace: r.Namespace, hostLink: r.HostLink}
	for _, p := range netnsDirs {
		if !slices.Contains(r.Run, filepath.Base(p)) {
			network.made = append(network.made, p)
		}
	}
	return errors.Join(clearHost(dir, cgroupRootOf(network), hostState{sysctls: r.Sysctls, paths: r.Paths}), network.Close())
}
