package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/confighash/confighash/bounded"
)

// restartAllContainers is the feature a node declares (status.declaredFeatures) when
// its kubelet restarts every container of a pod on a RestartAllContainers rule; the
// scheduler places a pod carrying such a rule only on a node that declares it.
const restartAllContainers = "RestartAllContainersOnContainerExits"

// nodesLimits bound the one list of nodes made at start: a node's status lists its
// images, so pages are small; 5,000 nodes is Kubernetes' largest tested cluster.
var nodesLimits = bounded.Limits{Page: 50, PageBytes: 16 << 20, Items: 20000, Bytes: 1 << 30}

// inPlaceServed reports whether pods can be restarted in place: Kubernetes 1.36 turned
// container restart rules and their RestartAllContainers action on, and every node
// that takes pods declares it (a pod made restartable could not be placed on one that
// does not: a control plane upgraded before its nodes would leave such pods Pending).
// Otherwise, or when either cannot be read, restart in place is off, said once, and
// the workloads that ask for it roll. Both components read the same facts at start.
func inPlaceServed(ctx context.Context, client kubernetes.Interface, log zerolog.Logger) bool {
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		log.Warn().Err(err).Msg("restart in place is off: the API server's version could not be read; the workloads that ask for it roll")
		return false
	}
	if !atLeast(v.Major, v.Minor, 1, 36) {
		log.Warn().Str("version", v.GitVersion).Msg(fmt.Sprintf("restart in place is off: Kubernetes %s.%s has no RestartAllContainers action (1.36 and later); the workloads that ask for it roll", v.Major, v.Minor))
		return false
	}
	var lacking *corev1.Node
	nodes := bounded.Resource{GroupVersionResource: corev1.SchemeGroupVersion.WithResource("nodes")}
	err = bounded.Each(ctx, bounded.New(client.CoreV1().RESTClient()), nodes, metav1.ListOptions{}, nodesLimits, func(page []corev1.Node) error {
		if i := slices.IndexFunc(page, func(n corev1.Node) bool {
			return !n.Spec.Unschedulable && !slices.Contains(n.Status.DeclaredFeatures, restartAllContainers)
		}); i >= 0 {
			lacking = &page[i]
			return errNodeLacks
		}
		return nil
	})
	switch {
	case lacking != nil:
		log.Warn().Str("node", lacking.Name).Str("kubelet", lacking.Status.NodeInfo.KubeletVersion).Msg("restart in place is off: node " + lacking.Name +
			" does not declare " + restartAllContainers + " (a kubelet older than 1.36, or the feature turned off), so pods restartable in place could not run there; the workloads that ask for it roll. Restart both components once every node declares it")
		return false
	case err != nil:
		log.Warn().Err(err).Msg("restart in place is off: the nodes could not be listed, to see that each declares " + restartAllContainers + "; the workloads that ask for it roll")
		return false
	}
	return true
}

// errNodeLacks ends the list of nodes at the first that does not declare the feature.
var errNodeLacks = errors.New("a node does not declare " + restartAllContainers)

// atLeast compares a server's major and minor version, as discovery spells them
// ("1", "36+"), with major.minor.
func atLeast(majorText, minorText string, major, minor int) bool {
	m, err1 := strconv.Atoi(majorText)
	n, err2 := strconv.Atoi(strings.TrimSuffix(minorText, "+"))
	return err1 == nil && err2 == nil && (m > major || m == major && n >= minor)
}
