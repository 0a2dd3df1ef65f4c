package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
	"k8s.io/client-go/discovery"
)

// inPlaceServed reports whether the API server can restart pods in place: Kubernetes
// 1.36 turned container restart rules and their RestartAllContainers action on. On an
// older one, or one whose version cannot be read, restart in place is off, said once,
// and the workloads that ask for it roll; both components read the same version.
func inPlaceServed(d discovery.ServerVersionInterface, log zerolog.Logger) bool {
	v, err := d.ServerVersion()
	if err != nil {
		log.Warn().Err(err).Msg("restart in place is off: the API server's version could not be read; the workloads that ask for it roll")
		return false
	}
	if !atLeast(v.Major, v.Minor, 1, 36) {
		log.Warn().Str("version", v.GitVersion).Msg(fmt.Sprintf("restart in place is off: Kubernetes %s.%s has no RestartAllContainers action (1.36 and later); the workloads that ask for it roll", v.Major, v.Minor))
		return false
	}
	return true
}

// atLeast compares a server's major and minor version, as discovery spells them
// ("1", "36+"), with major.minor.
func atLeast(majorText, minorText string, major, minor int) bool {
	m, err1 := strconv.Atoi(majorText)
	n, err2 := strconv.Atoi(strings.TrimSuffix(minorText, "+"))
	return err1 == nil && err2 == nil && (m > major || m == major && n >= minor)
}
