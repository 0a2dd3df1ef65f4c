package main

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestTheMemoryLimitFollowsTheContainers(t *testing.T) {
	t.Cleanup(func() { debug.SetMemoryLimit(math.MaxInt64) })
	t.Setenv("GOMEMLIMIT", "")
	dir := t.TempDir()
	write := func(content string) string {
		path := filepath.Join(dir, "memory.max")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	if got := limitMemory(write("268435456\n")); got != 241591905 || debug.SetMemoryLimit(-1) != 241591905 {
		t.Fatalf("a 256 MiB container: limit %d, Go's %d; want 90 %%, 241591905", got, debug.SetMemoryLimit(-1))
	}
	debug.SetMemoryLimit(math.MaxInt64)
	for _, content := range []string{"max\n", "garbage", ""} {
		if got := limitMemory(write(content)); got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
			t.Errorf("memory.max %q: limit %d, want none", content, got)
		}
	}
	if got := limitMemory(filepath.Join(dir, "absent")); got != 0 {
		t.Errorf("no cgroup file: limit %d, want none", got)
	}
	t.Setenv("GOMEMLIMIT", "100MiB")
	if got := limitMemory(write("268435456")); got != 0 {
		t.Errorf("with GOMEMLIMIT set: limit %d, want it left alone", got)
	}
}
