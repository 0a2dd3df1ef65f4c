package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/namespaces"
	"github.com/confighash/confighash/sourcecache"
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
	} else {
		err := listWorkloads(ctx, dyn, ns, kinds, func(_ confighash.Kind, u *unstructured.Unstructured) error {
			objs = append(objs, u)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}

	namespace, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read namespace %s: %w", ns, err)
	}
	in.Mode = selectors.ModeOf(namespace)
	in.Now = time.Now()
	nsPacing, pacingErr := namespaces.PacingOf(namespace)
	in.Pacing = nsPacing.Over(in.Pacing)
	var csi dynamic.Interface
	if c.csi {
		csi = dyn
	}
	if in.Sources, err = liveSources(ctx, client, csi, confighash.SourceKinds(c.ignored), ns); err != nil {
		return nil, err
	}
	var keyErr error
	if in.Key, in.HaveKey, keyErr = c.fileKey(); keyErr != nil {
		return nil, keyErr
	}
	if !in.HaveKey {
		in.Key, keyErr = keyFromSecret(ctx, client, c.installNamespace, c.keySecret)
		in.HaveKey = keyErr == nil
	}
	held := flappingHolds(ctx, client, ns)
	var out []confighash.Explanation
	for _, u := range objs {
		w, err := kinds.WorkloadOf(u)
		if err != nil {
			if target != "" {
				return nil, badInput("%s %s: %v", u.GetKind(), u.GetName(), err)
			}
			continue
		}
		in.Workload, in.Flapping = w, held[u.GetUID()]
		e := confighash.Explain(in)
		if pacingErr != nil {
			e.Problems = append(e.Problems, fmt.Sprintf("namespace %s: its pacing annotations are ignored: %v", ns, pacingErr))
		}
		switch {
		case in.Mode == confighash.ModeOff:
			e.Verdict, e.Why = confighash.VerdictNoRollout, fmt.Sprintf("namespace %s is not enabled: --namespace-selector %q does not select it; label it %s=%s", ns, c.namespaceSelector, confighash.InjectionLabel, confighash.InjectionEnabled)
		case !e.OptedIn && target == "":
			continue // -n lists the opted-in workloads
		case keyErr != nil && e.OptedIn:
			e.Why = "the hash key could not be read (" + keyErr.Error() + "), so digests are not compared; the sources and the keys that count are listed"
		}
		out = append(out, e)
	}
	return out, nil
}

// flappingHolds returns, by workload, what the watcher last said when it held one
// because a source keeps changing: its latest FlappingHeld Event. Events are the
// watcher's word on a hold it keeps in memory; one who may not list them is told
// nothing of it.
func flappingHolds(ctx context.Context, client kubernetes.Interface, ns string) map[types.UID]string {
	events, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FlappingHeld"})
	if err != nil {
		return nil
	}
	out := map[types.UID]string{}
	latest := map[types.UID]time.Time{}
	for _, e := range events.Items {
		uid, at := e.InvolvedObject.UID, e.LastTimestamp.Time
		if _, seen := latest[uid]; !seen || at.After(latest[uid]) {
			out[uid], latest[uid] = e.Message+" (at "+at.UTC().Format(time.RFC3339)+")", at
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
	for _, k := range kinds {
		list, err := dyn.Resource(k.GroupVersion().WithResource(k.Resource)).Namespace(ns).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) && !k.Typed() {
			continue // a custom resource not installed, as Argo Rollouts
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

// liveSources reads the namespace's ConfigMaps and Secrets, but the ignored kinds, and
// with csi its SecretProviderClasses, as digest views.
func liveSources(ctx context.Context, client kubernetes.Interface, csi dynamic.Interface, ignored confighash.SourceKinds, ns string) (map[confighash.SourceRef]confighash.Source, error) {
	out := map[confighash.SourceRef]confighash.Source{}
	if !ignored.Has(confighash.ConfigMap) {
		cms, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list the ConfigMaps of %s: %w", ns, err)
		}
		for i := range cms.Items {
			s := confighash.SourceOfConfigMap(&cms.Items[i])
			out[s.SourceRef] = s
		}
	}
	if !ignored.Has(confighash.Secret) {
		secrets, err := client.CoreV1().Secrets(ns).List(ctx, sourcecache.Filter{}.ListOptions(confighash.Secret))
		if err != nil {
			return nil, fmt.Errorf("list the Secrets of %s: %w", ns, err)
		}
		for i := range secrets.Items {
			s := confighash.SourceOfSecret(&secrets.Items[i])
			out[s.SourceRef] = s
		}
	}
	classes, err := sourcecache.ListProviderClasses(ctx, csi, ns)
	if err != nil {
		return nil, err
	}
	for _, d := range classes {
		out[d.Source.SourceRef] = d.Source
	}
	return out, nil
}

// keyFromSecret reads the hash key from its Secret, never creating it.
func keyFromSecret(ctx context.Context, client kubernetes.Interface, namespace, secret string) (confighash.Key, error) {
	s, err := client.CoreV1().Secrets(namespace).Get(ctx, secret, metav1.GetOptions{})
	if err != nil {
		return confighash.Key{}, fmt.Errorf("read Secret %s/%s: %s", namespace, secret, apierrors.ReasonForError(err))
	}
	return confighash.NewKey(s.Data[hashKeyDataKey])
}
