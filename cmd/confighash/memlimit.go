package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// cgroupMemoryMax is where cgroup v2 gives the container's memory limit: a number of
// bytes, or "max".
const cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// limitMemory sets Go's soft memory limit to 90 % of the container's, read from path,
// unless GOMEMLIMIT sets one: near the limit the collector then runs more often,
// rather than the kernel killing the process. The rest is for what the runtime does
// not count (the binary, thread stacks). It returns the limit set, 0 for none.
func limitMemory(path string) int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0 // not in a cgroup v2 container
	}
	limit, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil || limit <= 0 {
		return 0 // "max": no limit
	}
	soft := limit / 10 * 9
	debug.SetMemoryLimit(soft)
	return soft
}
