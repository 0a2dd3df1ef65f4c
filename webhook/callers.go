package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/confighash/confighash/watches"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Callers is the set of addresses the API server calls the webhook from. The API
// server does not authenticate to webhooks unless it is given a client certificate
// (--client-ca-file), so a pod that reaches the admission port could post a forged
// review claiming any namespace and learn, from the patch, the names a pattern matches
// there and digests that tell when each changes. A review from another address is
// refused before its body is read, whatever NetworkPolicy the cluster enforces.
//
// The API server calls from one of these, per distribution (docs/install.md):
//   - the endpoints of the Service default/kubernetes: its own addresses, where it
//     routes to pods directly (kubeadm, kind, EKS's network interfaces in the VPC);
//   - the pods of kube-system labelled konnectivity-agent (k8s-app on GKE and
//     upstream, app on AKS), through which it reaches the cluster where it runs
//     outside it;
//   - the nodes, by their addresses and those their network plugin gives their host
//     on the pod network (the network and gateway addresses of the node's pod range,
//     Calico's tunnel address, OVN-Kubernetes' management port): a host-network API
//     server calls pods from them, and kube-proxy gives them to what it forwards to a
//     Service's ClusterIP from outside the pod network (an API server outside the
//     cluster that reaches Services through a node);
//   - the ranges given with --admission-callers.
//
// A source address is no proof of identity: a host-network process on a node, or a
// request the API server proxies (pods/proxy), shares it; a NetworkPolicy lets the
// webhook's own node in alike. Where the API server can
// present a client certificate, --client-ca-file is the stronger check.
type Callers struct {
	extra []netip.Prefix
	log   zerolog.Logger

	informers []watched
	// required must sync before the webhook is ready: the API server's endpoints. The
	// others are read where they can be, and are empty where they cannot.
	required cache.SharedIndexInformer
	addrs    atomic.Pointer[map[netip.Addr]bool]

	mu      sync.Mutex
	refused map[netip.Addr]bool // logged once each, up to maxLoggedCallers
	stops   map[string]context.CancelFunc
}

const maxLoggedCallers = 64

// ParseCallers reads --admission-callers: CIDRs or addresses, comma-separated.
func ParseCallers(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an address nor a CIDR", f)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// NewCallers returns the callers the webhook answers: those it finds with client, and
// the ranges in extra.
func NewCallers(client kubernetes.Interface, extra []netip.Prefix, log zerolog.Logger) *Callers {
	c := &Callers{extra: extra, log: log, refused: map[netip.Addr]bool{}, stops: map[string]context.CancelFunc{}}
	endpoints := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault)
	c.required = c.informer(&discoveryv1.EndpointSlice{}, watches.APIServerEndpoints, watches.APIServerEndpoints.Selector, lister{
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return endpoints.List(ctx, o) }, endpoints.Watch}, nil)
	// Only what names an address is kept of a pod or a node: not its spec, images or
	// conditions.
	konnectivity := func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, ResourceVersion: p.ResourceVersion},
				Status: corev1.PodStatus{PodIPs: p.Status.PodIPs}}, nil
		}
		return obj, nil
	}
	node := func(obj any) (any, error) {
		if n, ok := obj.(*corev1.Node); ok {
			return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion, Annotations: nodeAddressAnnotations(n.Annotations)},
				Spec: corev1.NodeSpec{PodCIDRs: n.Spec.PodCIDRs}, Status: corev1.NodeStatus{Addresses: n.Status.Addresses}}, nil
		}
		return obj, nil
	}
	pods, nodes := client.CoreV1().Pods(metav1.NamespaceSystem), client.CoreV1().Nodes()
	podLister := lister{func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) }, pods.Watch}
	nodeLister := lister{func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return nodes.List(ctx, o) }, nodes.Watch}
	for _, selector := range []string{"k8s-app=konnectivity-agent", "app=konnectivity-agent"} {
		c.informer(&corev1.Pod{}, watches.KonnectivityAgents, selector, podLister, konnectivity)
	}
	c.informer(&corev1.Node{}, watches.Nodes, "", nodeLister, node)
	c.addrs.Store(&map[netip.Addr]bool{})
	return c
}

// watched is an informer of the callers, and what it watches.
type watched struct {
	cache.SharedIndexInformer
	what     string
	optional bool
}

// lister lists and watches the objects of one kind, namespace and label selector.
type lister struct {
	list  func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watch func(context.Context, metav1.ListOptions) (watch.Interface, error)
}

// informer watches what l lists, and makes the set again at each change. One that is
// not required stops at a refusal to list: a namespaced install may read the API
// server's endpoints and the konnectivity agents, not the nodes.
func (c *Callers) informer(obj runtime.Object, kind watches.Kind, selector string, l lister, transform cache.TransformFunc) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			return l.list(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			return l.watch(ctx, opts)
		},
	}
	// Cannot fail: a registered kind no tenant writes, on an informer not started.
	inf, _ := watches.Informer(kind, cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{}), transform)
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.rebuild() },
		// A node's status is written every few minutes, its addresses seldom changed:
		// the set is made again only when they do.
		UpdateFunc: func(old, obj any) {
			if !slices.Equal(addrsOf(old), addrsOf(obj)) {
				c.rebuild()
			}
		},
		DeleteFunc: func(any) { c.rebuild() },
	})
	what := kind.Name
	if selector != "" {
		what += " (" + selector + ")"
	}
	w := watched{SharedIndexInformer: inf, what: what, optional: len(c.informers) > 0} // the first, the API server's endpoints, is required
	if w.optional {
		_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			if apierrors.IsForbidden(err) {
				c.log.Info().Str("what", what).Msg("not allowed to list; its addresses are not used")
				c.stopped(what)
				return
			}
			cache.DefaultWatchErrorHandler(ctx, r, err)
		})
	}
	c.informers = append(c.informers, w)
	return inf
}

// stopped stops the informer of what.
func (c *Callers) stopped(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if stop := c.stops[what]; stop != nil {
		stop()
	}
}

// Run watches the callers until ctx is done.
func (c *Callers) Run(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.informers {
		run := ctx
		if w.optional {
			run, c.stops[w.what] = context.WithCancel(ctx)
		}
		go w.RunWithContext(run)
	}
}

// Synced reports whether the API server's own endpoints have been read.
func (c *Callers) Synced() bool { return c.required.HasSynced() }

// rebuild makes the set of addresses from what the informers hold.
func (c *Callers) rebuild() {
	set := map[netip.Addr]bool{}
	for _, w := range c.informers {
		for _, obj := range w.GetStore().List() {
			for _, a := range addrsOf(obj) {
				set[a] = true
			}
		}
	}
	c.addrs.Store(&set)
}

// addrsOf returns the addresses an object of the informers names a caller by.
func addrsOf(obj any) []netip.Addr {
	var out []netip.Addr
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a.Unmap())
		}
	}
	switch o := obj.(type) {
	case *discoveryv1.EndpointSlice:
		for _, e := range o.Endpoints {
			for _, a := range e.Addresses {
				add(a)
			}
		}
	case *corev1.Pod:
		for _, ip := range o.Status.PodIPs {
			add(ip.IP)
		}
	case *corev1.Node:
		for _, a := range o.Status.Addresses {
			if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
				add(a.Address)
			}
		}
		out = append(out, nodePodNetworkAddrs(o)...)
	}
	return out
}

// Allows reports whether a request from remoteAddr (host:port) comes from a caller.
func (c *Callers) Allows(remoteAddr string) bool {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return false
	}
	a := ap.Addr().Unmap()
	if (*c.addrs.Load())[a] {
		return true
	}
	for _, p := range c.extra {
		if p.Contains(a) {
			return true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.refused[a] && len(c.refused) < maxLoggedCallers {
		c.refused[a] = true
		c.log.Warn().Str("address", a.String()).
			Msg("refused a review from an address not known to be the API server's; if the API server calls from it, add it to --admission-callers")
	}
	return false
}

// The annotations in which network plugins give a node its address on the pod network.
const (
	annotationCalicoIPIP    = "projectcalico.org/IPv4IPIPTunnelAddr"
	annotationCalicoVXLAN   = "projectcalico.org/IPv4VXLANTunnelAddr"
	annotationCalicoVXLANv6 = "projectcalico.org/IPv6VXLANTunnelAddr"
	annotationOVNSubnets    = "k8s.ovn.org/node-subnets"
)

func nodeAddressAnnotations(in map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range []string{annotationCalicoIPIP, annotationCalicoVXLAN, annotationCalicoVXLANv6, annotationOVNSubnets} {
		if v, ok := in[k]; ok && len(v) <= 1024 {
			out[k] = v
		}
	}
	return out
}

// nodePodNetworkAddrs are the addresses a node's host calls pods from: Calico's
// tunnel addresses; the network address of each of its pod ranges (Flannel's tunnel)
// and the next (the bridge's, the pods' gateway); and the management port of
// OVN-Kubernetes (the second address of each subnet it gives the node). None is ever
// a pod's.
func nodePodNetworkAddrs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, k := range []string{annotationCalicoIPIP, annotationCalicoVXLAN, annotationCalicoVXLANv6} {
		if a, err := netip.ParseAddr(n.Annotations[k]); err == nil {
			out = append(out, a.Unmap())
		}
	}
	for _, cidr := range n.Spec.PodCIDRs {
		if p, err := netip.ParsePrefix(cidr); err == nil {
			out = append(out, p.Masked().Addr(), p.Masked().Addr().Next())
		}
	}
	var ovn map[string]json.RawMessage
	if s := n.Annotations[annotationOVNSubnets]; s != "" && json.Unmarshal([]byte(s), &ovn) == nil {
		for _, raw := range ovn {
			var subnets []string
			var one string
			if json.Unmarshal(raw, &subnets) != nil && json.Unmarshal(raw, &one) == nil {
				subnets = []string{one}
			}
			for _, s := range subnets {
				if p, err := netip.ParsePrefix(s); err == nil {
					out = append(out, p.Masked().Addr().Next().Next())
				}
			}
		}
	}
	return out
}
