package watches

import (
	"slices"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/confighash/confighash"
)

// Scope says whose objects a kind holds, and so where it is watched.
type Scope int

const (
	// Tenant objects are written by the users of the namespaces they live in: they are
	// read whole only in the namespaces confighash acts in, each within its kind's
	// bound (Door.Open).
	Tenant Scope = iota
	// Cluster objects have no namespace, and only the cluster's operators write them.
	Cluster
	// Install objects live in the install's own namespace.
	Install
	// System objects live in one namespace of the cluster's own, Kind.Namespace.
	System
)

// Bounds on one object of a tenant's kind as read, beyond which it is kept as its key
// alone and not acted on. The API server takes objects of up to about 1.5 MiB (etcd's
// request limit); a tenant's pods and workloads of 1.2 MB, their references parsed,
// took the watcher past its memory limit.
const (
	// MaxWorkloadBytes bounds a workload or a pod restarted in place: room for
	// annotations at the API server's cap (256 KiB, which confighash tells of rather
	// than ignores) and as much again for the rest, ten times a large pod template.
	MaxWorkloadBytes = 512 << 10
	// MaxBudgetBytes bounds a PodDisruptionBudget, whose selector is kept.
	MaxBudgetBytes = 64 << 10
)

// Kind is one kind of object a component watches.
type Kind struct {
	// Name says what is watched, and why; unique in Kinds.
	Name     string
	Resource schema.GroupVersionResource
	Scope    Scope
	// Namespace is the one namespace a System kind is watched in.
	Namespace string
	// Selector is the label selector of the objects watched, "" for all.
	Selector string
	// MaxBytes bounds each object read (sizeOf), 0 for no bound but the API server's:
	// what is kept of such an object does not grow with it (a source's digests, a
	// snapshot's size).
	MaxBytes int
	// By names the components that watch it.
	By []string
	// Listed kinds are read by a list through the door alone, never watched.
	Listed bool
}

func (k Kind) registered() bool {
	return slices.ContainsFunc(Kinds, func(r Kind) bool { return r.Name == k.Name })
}

// WithSelector sets the options' label selector to the kind's.
func (k Kind) WithSelector(o *metav1.ListOptions) { o.LabelSelector = k.Selector }

const (
	webhook = "webhook"
	watcher = "watcher"
)

var (
	core = corev1.SchemeGroupVersion
)

// The kinds the components watch.
var (
	// ConfigMaps and Secrets are the sources, kept as their digests (sourcecache); the
	// snapshots of pinned workloads are not sources.
	ConfigMaps = Kind{Name: "ConfigMaps", Resource: core.WithResource("configmaps"), Scope: Tenant,
		Selector: "!" + confighash.LabelSnapshotOf, By: []string{webhook, watcher}}
	Secrets = Kind{Name: "Secrets", Resource: core.WithResource("secrets"), Scope: Tenant,
		Selector: "!" + confighash.LabelSnapshotOf, By: []string{webhook, watcher}}
	// ProviderClassPodStatuses are what the Secrets Store CSI driver's pods report of
	// the SecretProviderClasses they mount, kept as digests.
	ProviderClassPodStatuses = Kind{Name: "SecretProviderClassPodStatuses",
		Resource: schema.GroupVersionResource{Group: "secrets-store.csi.x-k8s.io", Version: "v1", Resource: "secretproviderclasspodstatuses"},
		Scope:    Tenant, MaxBytes: MaxWorkloadBytes, By: []string{webhook, watcher}}
	// SnapshotConfigMaps and SnapshotSecrets are the snapshots of pinned workloads,
	// counted against the namespace's cap by their size alone.
	SnapshotConfigMaps = Kind{Name: "snapshot ConfigMaps", Resource: core.WithResource("configmaps"), Scope: Tenant,
		Selector: confighash.LabelSnapshotOf, By: []string{webhook}}
	SnapshotSecrets = Kind{Name: "snapshot Secrets", Resource: core.WithResource("secrets"), Scope: Tenant,
		Selector: confighash.LabelSnapshotOf, By: []string{webhook}}

	Deployments  = workloads(confighash.Deployment)
	StatefulSets = workloads(confighash.StatefulSet)
	DaemonSets   = workloads(confighash.DaemonSet)
	CronJobs     = workloads(confighash.CronJob)
	Jobs         = workloads(confighash.Job)
	Rollouts     = workloads(confighash.Rollout)
	// ExtraWorkloads are those of a kind an install adds (--extra-kind).
	ExtraWorkloads = Kind{Name: "workloads of an extra kind", Scope: Tenant, MaxBytes: MaxWorkloadBytes, By: []string{watcher}}

	// RestartedPods are the pods restarted in place, labelled so by the webhook or by
	// anyone who may write a pod.
	RestartedPods = Kind{Name: "pods restarted in place", Resource: core.WithResource("pods"), Scope: Tenant,
		Selector: confighash.LabelRestart + " in (" + confighash.RestartInPlace.String() + "," + confighash.RestartReload.String() + ")",
		MaxBytes: MaxWorkloadBytes, By: []string{watcher}}
	// Budgets are the PodDisruptionBudgets a restart in place asks, as an eviction would.
	Budgets = Kind{Name: "PodDisruptionBudgets", Resource: policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets"), Scope: Tenant,
		MaxBytes: MaxBudgetBytes, By: []string{watcher}}

	// Namespaces say, by their labels, where confighash acts.
	Namespaces = Kind{Name: "Namespaces", Resource: core.WithResource("namespaces"), Scope: Cluster, By: []string{webhook, watcher}}
	// WatcherLease is the watcher's leader Lease, which the webhook reads for the record
	// forms the leader reads.
	WatcherLease = Kind{Name: "the watcher's Lease", Resource: coordinationv1.SchemeGroupVersion.WithResource("leases"), Scope: Install, By: []string{webhook}}
	// APIServerEndpoints, KonnectivityAgents and Nodes are where the API server calls
	// the webhook from.
	APIServerEndpoints = Kind{Name: "the API server's endpoints", Resource: discoveryv1.SchemeGroupVersion.WithResource("endpointslices"),
		Scope: System, Namespace: metav1.NamespaceDefault, Selector: discoveryv1.LabelServiceName + "=kubernetes", By: []string{webhook}}
	KonnectivityAgents = Kind{Name: "the konnectivity agents", Resource: core.WithResource("pods"),
		Scope: System, Namespace: metav1.NamespaceSystem, By: []string{webhook}}
	Nodes = Kind{Name: "Nodes", Resource: core.WithResource("nodes"), Scope: Cluster, By: []string{webhook}}
	// OwnPod is the webhook's own pod, listed by name once, for its image.
	OwnPod = Kind{Name: "the webhook's own pod", Resource: core.WithResource("pods"), Scope: Install, By: []string{webhook}, Listed: true}
)

// Kinds are all the kinds either component watches or lists.
var Kinds = []Kind{
	ConfigMaps, Secrets, ProviderClassPodStatuses, SnapshotConfigMaps, SnapshotSecrets,
	Deployments, StatefulSets, DaemonSets, CronJobs, Jobs, Rollouts, ExtraWorkloads,
	RestartedPods, Budgets,
	Namespaces, WatcherLease, APIServerEndpoints, KonnectivityAgents, Nodes, OwnPod,
}

func workloads(k confighash.Kind) Kind {
	return Kind{Name: k.Kind + "s", Resource: k.GroupVersion().WithResource(k.Resource), Scope: Tenant, MaxBytes: MaxWorkloadBytes, By: []string{watcher}}
}

// Workloads returns the registered kind of the workloads of k.
func Workloads(k confighash.Kind) Kind {
	for _, r := range []Kind{Deployments, StatefulSets, DaemonSets, CronJobs, Jobs, Rollouts} {
		if r.Resource == k.GroupVersion().WithResource(k.Resource) {
			return r
		}
	}
	return ExtraWorkloads
}
