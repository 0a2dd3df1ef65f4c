package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/confighash/confighash"
)

const resumeSummary = `confighash resume: roll what a halted wave holds, or what the watcher holds because a source keeps changing.

  confighash resume configmap/app -n shop     every workload held for a change of ConfigMap app
  confighash resume deployment/web -n shop    one workload

A workload a halted wave holds: it removes its ` + confighash.AnnotationHeld + ` annotation, as kubectl annotate ... ` + confighash.AnnotationHeld + `- does,
and the watcher rolls it in waves again. A workload held because a source keeps changing (its FlappingHeld Event):
it writes the source's current version in its ` + confighash.AnnotationTrigger + ` annotation, as the watcher does, and it rolls at once,
with the latest data; while the source goes on changing, the watcher holds it again.`

type resumeConfig struct {
	kubeconfig, context, namespace string
	extraKinds                     stringList
}

func runResume(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var cfg resumeConfig
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	fs.StringVar(&cfg.kubeconfig, "kubeconfig", "", "kubeconfig file; default: $KUBECONFIG or ~/.kube/config")
	fs.StringVar(&cfg.context, "context", "", "kubeconfig context")
	fs.StringVar(&cfg.namespace, "n", "", "the namespace; default: the context's")
	fs.StringVar(&cfg.namespace, "namespace", "", "the namespace (as -n)")
	fs.Var(&cfg.extraKinds, "extra-kind", extraKindUsage)
	positional, err := parseInterspersed(fs, args, stdout, resumeSummary)
	if positional == nil || err != nil {
		return err
	}
	if len(positional) != 1 || positional[0] == "" {
		return badInput("name a source (configmap/app) or a workload (deployment/web)")
	}
	kinds, err := workloadKinds(cfg.extraKinds)
	if err != nil {
		return err
	}
	held, err := heldMatcher(positional[0], kinds)
	if err != nil {
		return err
	}
	config, ns, err := userKubeconfig(cfg.kubeconfig, cfg.context, cfg.namespace)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	flapping := flappingHolds(ctx, client, ns)
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, confighash.AnnotationHeld))
	resumed, rolled := 0, 0
	var malformed []error
	err = listWorkloads(ctx, dyn, ns, kinds, func(k confighash.Kind, u *unstructured.Unstructured) error {
		text, ok := u.GetAnnotations()[confighash.AnnotationHeld]
		if !ok {
			said, flapped := flapping[u.GetUID()]
			if !flapped {
				return nil
			}
			touched, err := held.resumeFlapping(ctx, client, dyn, k, u, said)
			if touched != "" {
				fmt.Fprintf(stdout, "touched %s/%s, held because %s kept changing: it rolls now, with the latest data, if a change is due\n", k.Kind, u.GetName(), touched)
				rolled++
			}
			return err
		}
		marker, err := confighash.ParseMarker(text)
		if err == nil && marker.IsZero() {
			err = errors.New("empty")
		}
		if err != nil {
			// Whoever may edit the workload writes the marker: name it, and go on.
			if held.selects(k.Kind, u.GetName(), nil) {
				malformed = append(malformed, fmt.Errorf("%s %s/%s: %s: %w", k.Kind, ns, u.GetName(), confighash.AnnotationHeld, err))
			}
			return nil
		}
		if !held.selects(k.Kind, u.GetName(), &marker.Change.SourceRef) {
			return nil
		}
		api := dyn.Resource(k.GroupVersion().WithResource(k.Resource)).Namespace(ns)
		if _, err := api.Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "confighash-resume"}); err != nil {
			return fmt.Errorf("resume %s %s/%s: %w", k.Kind, ns, u.GetName(), err)
		}
		fmt.Fprintf(stdout, "resumed %s/%s, held for %s\n", k.Kind, u.GetName(), marker.Change)
		resumed++
		return nil
	})
	if err != nil {
		return err
	}
	if len(malformed) > 0 {
		return badInput("%v; remove it with kubectl annotate ... %s-", errors.Join(malformed...), confighash.AnnotationHeld)
	}
	if resumed+rolled == 0 {
		return badInput("nothing in %s is held for %s", ns, positional[0])
	}
	if resumed > 0 {
		fmt.Fprintf(stdout, "the watcher rolls the %d in waves\n", resumed)
	}
	return nil
}

// flappingChanged finds the sources a FlappingHeld Event names.
var flappingChanged = regexp.MustCompile(`\b(ConfigMap|Secret)/([a-z0-9.-]+) changed \d+ times`)

// resumeFlapping touches a workload the watcher holds because a source keeps changing,
// if the target selects it: the source's current version in its trigger annotation,
// so that the webhook rolls it with the latest data. It returns the sources named.
func (t heldTarget) resumeFlapping(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, k confighash.Kind, u *unstructured.Unstructured, said string) (string, error) {
	var triggers []confighash.Trigger
	for _, m := range flappingChanged.FindAllStringSubmatch(said, -1) {
		ref := confighash.SourceRef{Kind: confighash.SourceKind(m[1]), Name: m[2]}
		if !t.selects(k.Kind, u.GetName(), &ref) {
			continue
		}
		var meta metav1.Object
		var err error
		if ref.Kind == confighash.ConfigMap {
			meta, err = client.CoreV1().ConfigMaps(u.GetNamespace()).Get(ctx, ref.Name, metav1.GetOptions{})
		} else {
			meta, err = client.CoreV1().Secrets(u.GetNamespace()).Get(ctx, ref.Name, metav1.GetOptions{})
		}
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("read %s: %w", ref, err)
		}
		triggers = append(triggers, confighash.Trigger{SourceRef: ref, ResourceVersion: meta.GetResourceVersion()})
	}
	if len(triggers) == 0 {
		return "", nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{confighash.AnnotationTrigger: confighash.FormatTriggers(triggers)}}})
	if err != nil {
		return "", err
	}
	api := dyn.Resource(k.GroupVersion().WithResource(k.Resource)).Namespace(u.GetNamespace())
	if _, err := api.Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "confighash-resume"}); err != nil {
		return "", fmt.Errorf("roll %s %s/%s: %w", k.Kind, u.GetNamespace(), u.GetName(), err)
	}
	refs := make([]confighash.SourceRef, len(triggers))
	for i, tr := range triggers {
		refs[i] = tr.SourceRef
	}
	return confighash.ListRefs(refs), nil
}

// heldTarget is what a resume selects: the workloads held for a change of a source, or
// one workload.
type heldTarget struct {
	source     *confighash.SourceRef
	kind, name string
}

// selects reports whether the target selects the workload held for a change of
// source; nil when the marker could not say which source: a source target may be it.
func (t heldTarget) selects(kind, name string, source *confighash.SourceRef) bool {
	if t.source == nil {
		return kind == t.kind && name == t.name
	}
	return source == nil || *source == *t.source
}

// heldMatcher returns what selects the held workloads to resume: those held for a
// change of a source, or one workload.
func heldMatcher(target string, kinds confighash.Kinds) (heldTarget, error) {
	kindName, name, ok := strings.Cut(target, "/")
	if !ok || name == "" {
		return heldTarget{}, badInput("%q: want kind/name", target)
	}
	for _, source := range []confighash.SourceKind{confighash.ConfigMap, confighash.Secret} {
		if strings.EqualFold(kindName, string(source)) {
			return heldTarget{source: &confighash.SourceRef{Kind: source, Name: name}}, nil
		}
	}
	kind, ok := workloadKind(kindName, kinds)
	if !ok {
		return heldTarget{}, badInput("%q: want configmap/name, secret/name, or a workload such as deployment/name", target)
	}
	return heldTarget{kind: kind.Kind, name: name}, nil
}
