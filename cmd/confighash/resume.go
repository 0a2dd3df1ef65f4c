package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/confighash/confighash"
)

const resumeSummary = `confighash resume: roll what a halted wave holds, or what the watcher holds because a source keeps changing.

  confighash resume configmap/app -n shop     every workload held for a change of ConfigMap app
  confighash resume deployment/web -n shop    one workload

A workload a halted wave holds: it removes its ` + confighash.AnnotationHeld + ` annotation, as kubectl annotate ... ` + confighash.AnnotationHeld + `- does,
and the watcher rolls it in waves again. A workload held because a source keeps changing: it removes its
` + confighash.AnnotationFlapping + ` annotation, and it rolls at once, with the latest data; while the source goes on changing,
the watcher holds it again.`

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
	resumed, rolled := 0, 0
	var malformed []error
	err = listWorkloads(ctx, dyn, ns, kinds, func(k confighash.Kind, u *unstructured.Unstructured) error {
		annotation, changes, err := heldFor(u.GetAnnotations())
		switch {
		case annotation == "":
			return nil
		case err != nil:
			// Whoever may edit the workload writes the marker: name it, and go on.
			if held.selects(k.Kind, u.GetName(), nil) {
				malformed = append(malformed, fmt.Errorf("%s %s/%s: %s: %w", k.Kind, ns, u.GetName(), annotation, err))
			}
			return nil
		case !slices.ContainsFunc(changes, func(c confighash.Trigger) bool { return held.selects(k.Kind, u.GetName(), &c.SourceRef) }):
			return nil
		}
		patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, annotation))
		api := dyn.Resource(k.GroupVersion().WithResource(k.Resource)).Namespace(ns)
		if _, err := api.Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "confighash-resume"}); err != nil {
			return fmt.Errorf("resume %s %s/%s: %w", k.Kind, ns, u.GetName(), err)
		}
		if annotation == confighash.AnnotationFlapping {
			fmt.Fprintf(stdout, "resumed %s/%s, held because %s kept changing: it rolls now, with the latest data, if a change is due\n", k.Kind, u.GetName(), confighash.FormatTriggers(changes))
			rolled++
			return nil
		}
		fmt.Fprintf(stdout, "resumed %s/%s, held for %s\n", k.Kind, u.GetName(), changes[0])
		resumed++
		return nil
	})
	if err != nil {
		return err
	}
	if len(malformed) > 0 {
		return badInput("%v; remove it with kubectl annotate ... <annotation>-", errors.Join(malformed...))
	}
	if resumed+rolled == 0 {
		return badInput("nothing in %s is held for %s", ns, positional[0])
	}
	if resumed > 0 {
		fmt.Fprintf(stdout, "the watcher rolls the %d in waves\n", resumed)
	}
	return nil
}

// heldFor reads the marker of a held workload: the halted wave's (AnnotationHeld) and
// its change, or the flapping breaker's (AnnotationFlapping) and the sources that kept
// changing; "" for a workload with neither.
func heldFor(annotations map[string]string) (annotation string, changes []confighash.Trigger, err error) {
	if text, ok := annotations[confighash.AnnotationHeld]; ok {
		m, err := confighash.ParseMarker(text)
		if err == nil && m.IsZero() {
			err = errors.New("empty")
		}
		return confighash.AnnotationHeld, []confighash.Trigger{m.Change}, err
	}
	if text, ok := annotations[confighash.AnnotationFlapping]; ok {
		changes, err := confighash.ParseFlapping(text)
		if err == nil && len(changes) == 0 {
			err = errors.New("empty")
		}
		return confighash.AnnotationFlapping, changes, err
	}
	return "", nil, nil
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
