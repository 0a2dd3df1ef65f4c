package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/namespaces"
	"github.com/confighash/confighash/sourcecache"
	"github.com/confighash/confighash/watcher"
	"github.com/confighash/confighash/watches"
)

// explain's live half: workloads, sources and the namespace read from the cluster.

func (c *explainConfig) explainLive(ctx context.Context, in confighash.ExplainInput, selectors namespaces.Selectors, target string) ([]confighash.Explanation, error) {
	kinds, err := workloadKinds(c.extraKinds)
	if err != nil {
		return nil, err
	}
	config, ns, err := userKubeconfig(c.kubeconfig, c.context, c.namespace)
	if err != nil {
		return nil, err
	}
	if target == "" && c.namespace == "" {
		return nil, badInput("name a workload (deployment/web) or a namespace (-n shop)")
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	if target != "" {
		kindName, name, ok := strings.Cut(target, "/")
		k, isKind := workloadKind(kindName, kinds)
		if !ok || name == "" || !isKind {
			return nil, badInput("%q: want kind/name, the kind one of deployment, statefulset, daemonset, cronjob, rollout, or an --extra-kind", target)
		}
		u, err := dyn.Resource(k.GroupVersion().WithResource(k.Resource)).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, badInput("%s %s/%s does not exist", k.Kind, ns, name)
		}
		if err != nil {
			return nil, fmt.Errorf("read %s %s/%s: %w", k.Kind, ns, name, err)
		}
		objs = append(objs, u)
	}
	// The namespace's workloads: each explained with -n, and the users of a source
	// whose waves hold a change.
	var all []*unstructured.Unstructured
	skip := func(k confighash.Kind, err error) bool {
		if !apierrors.IsForbidden(err) {
			return false
		}
		in.Unseen = append(in.Unseen, fmt.Sprintf("%s in namespace %s: list refused, so they are not explained nor counted in waves", k.Resource, ns))
		return true
	}
	err = eachWorkload(ctx, dyn, ns, kinds, skip, func(_ confighash.Kind, u *unstructured.Unstructured) error {
		all = append(all, u)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if target == "" {
		objs = all
	}

	in.Now = time.Now()
	var pacingErr error
	namespace, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	switch {
	case apierrors.IsForbidden(err):
		in.ModeUnseen = true
		in.Unseen = append(in.Unseen, fmt.Sprintf("namespace %s: get refused, so its mode and pacing are the watcher's as written on the workload", ns))
	case err != nil:
		return nil, fmt.Errorf("read namespace %s: %w", ns, err)
	default:
		in.Mode = selectors.ModeOf(namespace)
		var nsPacing confighash.Pacing
		nsPacing, pacingErr = namespaces.PacingOf(namespace)
		in.Pacing = nsPacing.Over(in.Pacing)
	}
	var csi dynamic.Interface
	if c.csi {
		csi = dyn
	}
	if err := readSources(ctx, client, csi, confighash.SourceKinds(c.ignored), ns, &in); err != nil {
		return nil, err
	}
	if in.Key, in.HaveKey, err = c.fileKey(); err != nil {
		return nil, err
	}
	if !in.HaveKey {
		if in.Key, err = keyFromSecret(ctx, client, c.installNamespace, c.keySecret); err != nil {
			in.Unseen = append(in.Unseen, "the hash key: "+err.Error()+", so the hash is not recomputed")
		}
		in.HaveKey = err == nil
	}
	events, err := watcherWarnings(ctx, client, ns)
	if apierrors.IsForbidden(err) {
		in.Unseen = append(in.Unseen, fmt.Sprintf("events in namespace %s: list refused, so the watcher's warnings and holds are not shown", ns))
	} else if err != nil {
		return nil, err
	}
	held := flappingOf(events)
	in.WaveUsers = waveUsers(all, kinds, in.Vocabulary, in.Mode)
	var out []confighash.Explanation
	for _, u := range objs {
		w, err := kinds.WorkloadOf(u)
		if err != nil {
			if target != "" {
				return nil, badInput("%s %s: %v", u.GetKind(), u.GetName(), err)
			}
			continue
		}
		in.Workload, in.Flapping, in.Admitted = w, held[u.GetUID()], lastWritten(u)
		in.Warnings = warningWords(events[u.GetUID()])
		in.InPlaceOff = slices.ContainsFunc(events[u.GetUID()], func(e corev1.Event) bool { return e.Reason == watcher.ReasonRollsInstead })
		e := confighash.Explain(in)
		if pacingErr != nil {
			e.Problems = append(e.Problems, fmt.Sprintf("namespace %s: ignored, the rest stands: %v", ns, pacingErr))
		}
		switch {
		case in.Mode == confighash.ModeOff && !in.ModeUnseen:
			e.Verdict, e.Why = confighash.VerdictNoRollout, fmt.Sprintf("namespace %s is not enabled: --namespace-selector %q does not select it, so confighash never admits its workloads; label it %s=%s", ns, c.namespaceSelector, confighash.InjectionLabel, confighash.InjectionEnabled)
		case !e.OptedIn && target == "":
			continue // -n lists the opted-in workloads
		}
		out = append(out, e)
	}
	return out, nil
}

// lastWritten is when the workload was last written but for its status: an admission
// of that write hashed the sources as they were then.
func lastWritten(u *unstructured.Unstructured) time.Time {
	t := u.GetCreationTimestamp().Time
	for _, f := range u.GetManagedFields() {
		if f.Subresource == "" && f.Time != nil && f.Time.After(t) {
			t = f.Time.Time
		}
	}
	return t
}

// maxWarnings is how many of the watcher's latest Warning Events on a workload explain
// shows.
const maxWarnings = 3

// watcherWarnings returns, by workload, the watcher's Warning Events on it, newest
// first. Events are the watcher's word on what it keeps in memory (a flapping hold)
// and on what went wrong; they are readable with a namespace's view rights.
func watcherWarnings(ctx context.Context, client kubernetes.Interface, ns string) (map[types.UID][]corev1.Event, error) {
	selector := fields.Set{"type": corev1.EventTypeWarning, "source": watcher.FieldManager}.AsSelector().String()
	events, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		return nil, err
	}
	out := map[types.UID][]corev1.Event{}
	for _, e := range events.Items {
		out[e.InvolvedObject.UID] = append(out[e.InvolvedObject.UID], e)
	}
	for _, list := range out {
		slices.SortFunc(list, func(a, b corev1.Event) int { return eventTime(b).Compare(eventTime(a)) })
	}
	return out, nil
}

// eventTime is when an Event last happened, whichever API wrote it.
func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// warningWords renders the latest Warning Events for people.
func warningWords(events []corev1.Event) []string {
	var out []string
	for _, e := range events[:min(len(events), maxWarnings)] {
		out = append(out, fmt.Sprintf("%s at %s: %s", e.Reason, eventTime(e).UTC().Format(time.RFC3339), e.Message))
	}
	return out
}

// flappingOf returns, by workload, what the watcher last said when it held one because
// a source keeps changing: its latest FlappingHeld Event.
func flappingOf(events map[types.UID][]corev1.Event) map[types.UID]string {
	out := map[types.UID]string{}
	for uid, list := range events {
		if i := slices.IndexFunc(list, func(e corev1.Event) bool { return e.Reason == "FlappingHeld" }); i >= 0 {
			out[uid] = list[i].Message + " (at " + eventTime(list[i]).UTC().Format(time.RFC3339) + ")"
		}
	}
	return out
}

// userKubeconfig loads a user's kubeconfig as kubectl does, and the namespace: the
// one given, or else the context's.
func userKubeconfig(path, context, namespace string) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context})
	config, err := loader.ClientConfig()
	if err != nil {
		return nil, "", badInput("kubeconfig: %v", err)
	}
	if namespace == "" {
		if namespace, _, err = loader.Namespace(); err != nil {
			return nil, "", badInput("kubeconfig: %v", err)
		}
	}
	return config, namespace, nil
}

// workloadKind reads a workload kind of kinds as kubectl takes it: deployment,
// deployments, Deployment.
func workloadKind(name string, kinds confighash.Kinds) (confighash.Kind, bool) {
	name = strings.ToLower(name)
	for _, k := range kinds {
		if name == k.Resource || name == strings.ToLower(k.Kind) || name+"s" == k.Resource {
			return k, true
		}
	}
	return confighash.Kind{}, false
}

// listWorkloads calls fn with each workload of the namespace, of every kind served.
func listWorkloads(ctx context.Context, dyn dynamic.Interface, ns string, kinds confighash.Kinds, fn func(confighash.Kind, *unstructured.Unstructured) error) error {
	return eachWorkload(ctx, dyn, ns, kinds, func(confighash.Kind, error) bool { return false }, fn)
}

// eachWorkload is listWorkloads, going on past the kinds whose list error skip takes.
// waveUsers returns the users of a source that waves take, in their order, as the
// watcher takes them: the workloads that act in the namespace's mode and may use it,
// but Jobs, by WaveOrder.
func waveUsers(all []*unstructured.Unstructured, kinds confighash.Kinds, v confighash.Vocabulary, mode confighash.Mode) func(confighash.SourceRef) []string {
	type user struct {
		kind, name string
		state      confighash.State
	}
	var users []user
	for _, u := range all {
		w, err := kinds.WorkloadOf(u)
		if err != nil || w.Kind.Recreated() {
			continue
		}
		state := v.Read(w)
		if _, acts := state.PolicyIn(mode); acts {
			users = append(users, user{w.Kind.Kind, w.Name, state})
		}
	}
	slices.SortFunc(users, func(a, b user) int { return confighash.WaveOrder(a.kind, a.name, b.kind, b.name) })
	return func(ref confighash.SourceRef) []string {
		var out []string
		for _, u := range users {
			if u.state.MayUse(ref) {
				out = append(out, u.kind+"/"+u.name)
			}
		}
		return out
	}
}

func eachWorkload(ctx context.Context, dyn dynamic.Interface, ns string, kinds confighash.Kinds, skip func(confighash.Kind, error) bool, fn func(confighash.Kind, *unstructured.Unstructured) error) error {
	for _, k := range kinds {
		list, err := dyn.Resource(k.GroupVersion().WithResource(k.Resource)).Namespace(ns).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) && !k.Typed() {
			continue // a custom resource not installed, as Argo Rollouts
		}
		if err != nil && skip(k, err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("list %s in %s: %w", k.Resource, ns, err)
		}
		for i := range list.Items {
			if err := fn(k, &list.Items[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// readSources reads the namespace's ConfigMaps and Secrets, but the ignored kinds, and
// with csi its SecretProviderClasses, as digest views, with when each was last
// written. A kind whose list is refused is hidden, and said so.
func readSources(ctx context.Context, client kubernetes.Interface, csi dynamic.Interface, ignored confighash.SourceKinds, ns string, in *confighash.ExplainInput) error {
	in.Sources, in.Written = map[confighash.SourceRef]confighash.Source{}, map[confighash.SourceRef]confighash.Written{}
	add := func(meta *metav1.ObjectMeta, s confighash.Source) {
		d := sourcecache.NewDigested(meta, s)
		in.Sources[s.SourceRef] = s
		in.Written[s.SourceRef] = confighash.Written{Time: d.Written(), ResourceVersion: d.ResourceVersion}
	}
	hide := func(kind confighash.SourceKind, resource string, err error) error {
		if !apierrors.IsForbidden(err) {
			return err
		}
		in.Hidden = in.Hidden.With(kind, true)
		in.Unseen = append(in.Unseen, fmt.Sprintf("%s in namespace %s: list refused, so their digests are not checked", resource, ns))
		return nil
	}
	if !ignored.Has(confighash.ConfigMap) {
		cms, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			if err := hide(confighash.ConfigMap, "configmaps", fmt.Errorf("list the ConfigMaps of %s: %w", ns, err)); err != nil {
				return err
			}
		} else {
			for i := range cms.Items {
				add(&cms.Items[i].ObjectMeta, confighash.SourceOfConfigMap(&cms.Items[i]))
			}
		}
	}
	if !ignored.Has(confighash.Secret) {
		secrets, err := client.CoreV1().Secrets(ns).List(ctx, sourcecache.Filter{}.ListOptions(confighash.Secret))
		if err != nil {
			if err := hide(confighash.Secret, "secrets", fmt.Errorf("list the Secrets of %s: %w", ns, err)); err != nil {
				return err
			}
		} else {
			for i := range secrets.Items {
				add(&secrets.Items[i].ObjectMeta, confighash.SourceOfSecret(&secrets.Items[i]))
			}
		}
	}
	classes, err := sourcecache.ListProviderClasses(ctx, watches.Door{}, csi, ns)
	if err != nil {
		return hide(confighash.SecretProviderClass, "secretproviderclasspodstatuses", err)
	}
	for _, d := range classes {
		in.Sources[d.Source.SourceRef] = d.Source
	}
	return nil
}

// keyFromSecret reads the hash key from its Secret, never creating it.
func keyFromSecret(ctx context.Context, client kubernetes.Interface, namespace, secret string) (confighash.Key, error) {
	s, err := client.CoreV1().Secrets(namespace).Get(ctx, secret, metav1.GetOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return confighash.Key{}, fmt.Errorf("get of Secret %s/%s refused", namespace, secret)
	case apierrors.IsNotFound(err):
		return confighash.Key{}, fmt.Errorf("the Secret %s/%s does not exist (see --install-namespace and --hash-key-secret)", namespace, secret)
	case err != nil:
		return confighash.Key{}, fmt.Errorf("read Secret %s/%s: %s", namespace, secret, apierrors.ReasonForError(err))
	}
	return confighash.NewKey(s.Data[hashKeyDataKey])
}
