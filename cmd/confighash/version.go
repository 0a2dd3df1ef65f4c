package main

import (
	"runtime"
	"runtime/debug"
)

// version and revision are set at build time with
// -ldflags "-X main.version=... -X main.revision=...".
var (
	version  = "dev"
	revision = ""
)

// buildInfo is the build that runs, as `confighash version`, GET /version and
// confighash_build_info tell it.
type buildInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// currentBuild returns the stamped version and revision. Without a stamped revision
// (make build, ko), it is the commit Go recorded when it built inside a checkout.
func currentBuild() buildInfo {
	b := buildInfo{Version: version, Revision: revision, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if b.Revision == "" {
		b.Revision = vcsRevision()
	}
	return b
}

// vcsRevision is the commit in Go's build settings, 12 hex digits, "-dirty" when the
// tree had changes; "unknown" when the build recorded none (-buildvcs=false).
func vcsRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(12, len(s.Value))]
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return "unknown"
	}
	return rev + dirty
}
