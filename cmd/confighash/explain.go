package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
)

const explainSummary = `confighash explain: why a workload did or did not roll, and what would.

  confighash explain deployment/web -n shop     one workload, live
  confighash explain -n shop                    every opted-in workload of a namespace
  confighash explain --file deploy.yaml --with cm.yaml [--hash-key-file key]
                                                offline, from manifests ("-" for stdin)
  confighash explain --file chart.yaml --with-old old.yaml --with new.yaml --fail-on-rollout
                                                which workloads a change of sources rolls

Exit status: 0; 1 with --fail-on-rollout when a workload would roll; 2 on bad input.`

// exitError carries a process exit status other than 1.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// badInput is an input error: exit status 2.
func badInput(format string, args ...any) error {
	return &exitError{2, fmt.Errorf(format, args...)}
}

// fileList is a repeatable flag of file names.
type fileList []string

func (l *fileList) String() string     { return strings.Join(*l, ",") }
func (l *fileList) Set(v string) error { *l = append(*l, v); return nil }

type explainConfig struct {
	kubeconfig, context, namespace string
	installNamespace, keySecret    string
	hashKeyFile, output            string
	files, with, withOld           fileList
	failOnRollout, reloader        bool
}

func (c *explainConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file; default: $KUBECONFIG or ~/.kube/config")
	fs.StringVar(&c.context, "context", "", "kubeconfig context")
	fs.StringVar(&c.namespace, "n", "", "the workloads' namespace; default: the context's")
	fs.StringVar(&c.namespace, "namespace", "", "the workloads' namespace (as -n)")
	fs.StringVar(&c.installNamespace, "install-namespace", "confighash", "namespace confighash is installed in, holding the hash key Secret")
	fs.StringVar(&c.keySecret, "hash-key-secret", "confighash-hash-key", "the hash key Secret; without read access, digests are not compared")
	fs.StringVar(&c.hashKeyFile, "hash-key-file", "", "file holding the hash key, instead of the Secret")
	fs.StringVar(&c.output, "o", "table", "output: table or json")
	fs.Var(&c.files, "file", "offline: a manifest of workloads (multi-document YAML or JSON; - for stdin); repeatable")
	fs.Var(&c.with, "with", "offline: a manifest of the ConfigMaps and Secrets as they are (or will be); repeatable")
	fs.Var(&c.withOld, "with-old", "offline: the sources as they were: each workload is taken as hashed with them, to tell which the new ones roll; repeatable")
	fs.BoolVar(&c.failOnRollout, "fail-on-rollout", false, "exit 1 when a workload would roll")
	fs.BoolVar(&c.reloader, "reloader-annotations", true, "read Reloader's annotations as aliases, as the components do by default")
}

func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg explainConfig
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	cfg.flags(fs)
	fs.SetOutput(io.Discard)
	// Flags may come before or after the workload, as with kubectl.
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprintln(stdout, explainSummary+"\n\nFlags:")
				fs.SetOutput(stdout)
				fs.PrintDefaults()
				return nil
			}
			return badInput("%v", err)
		}
		if fs.NArg() == 0 {
			break
		}
		positional, args = append(positional, fs.Arg(0)), fs.Args()[1:]
	}
	if len(positional) > 1 {
		return badInput("unexpected arguments: %q; name one workload, or a namespace with -n", positional[1:])
	}
	var target string
	if len(positional) == 1 {
		target = positional[0]
	}
	if cfg.output != "table" && cfg.output != "json" {
		return badInput("-o %q: want table or json", cfg.output)
	}
	vocabulary := confighash.Vocabulary{Reloader: cfg.reloader}
	var explanations []confighash.Explanation
	var err error
	if len(cfg.files) > 0 {
		if target != "" {
			return badInput("name workloads with --file or on the command line, not both")
		}
		explanations, err = cfg.explainFiles(vocabulary)
	} else {
		explanations, err = cfg.explainLive(ctx, vocabulary, target)
	}
	if err != nil {
		return err
	}
	if err := printExplanations(stdout, cfg.output, explanations); err != nil {
		return err
	}
	if cfg.failOnRollout && slices.ContainsFunc(explanations, func(e confighash.Explanation) bool { return e.Verdict == confighash.VerdictRollout }) {
		return &exitError{1, errors.New("a workload would roll")}
	}
	return nil
}

// objects reads every object of manifest files, in order.
func readObjects(names []string, stdin io.Reader) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, name := range names {
		var r io.Reader
		if name == "-" {
			r = stdin
		} else {
			b, err := os.ReadFile(name)
			if err != nil {
				return nil, badInput("read %s: %v", name, errors.Unwrap(err))
			}
			r = bytes.NewReader(b)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
		for i := 1; ; i++ {
			var raw map[string]any
			if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, badInput("%s: document %d is not valid YAML or JSON: %v", name, i, err)
			}
			if raw == nil {
				continue
			}
			u := &unstructured.Unstructured{Object: raw}
			if u.GetKind() == "List" {
				items, _, _ := unstructured.NestedSlice(raw, "items")
				for _, it := range items {
					if m, ok := it.(map[string]any); ok {
						objs = append(objs, &unstructured.Unstructured{Object: m})
					}
				}
				continue
			}
			objs = append(objs, u)
		}
	}
	return objs, nil
}

// sourcesOf returns the digest views of the ConfigMaps and Secrets among objs, by
// namespace ("" for none given).
func sourcesOf(objs []*unstructured.Unstructured) (map[string]map[confighash.SourceRef]confighash.Source, error) {
	out := map[string]map[confighash.SourceRef]confighash.Source{}
	for _, u := range objs {
		var src confighash.Source
		switch u.GroupVersionKind() {
		case corev1.SchemeGroupVersion.WithKind("ConfigMap"):
			cm := &corev1.ConfigMap{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cm); err != nil {
				return nil, badInput("ConfigMap %s: %v", u.GetName(), err)
			}
			src = confighash.SourceOfConfigMap(cm)
		case corev1.SchemeGroupVersion.WithKind("Secret"):
			s := &corev1.Secret{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, s); err != nil {
				return nil, badInput("Secret %s: %v", u.GetName(), err)
			}
			// The API server merges stringData into data; a manifest still has it.
			for k, v := range s.StringData {
				if s.Data == nil {
					s.Data = map[string][]byte{}
				}
				s.Data[k] = []byte(v)
			}
			src = confighash.SourceOfSecret(s)
		default:
			continue
		}
		if out[u.GetNamespace()] == nil {
			out[u.GetNamespace()] = map[confighash.SourceRef]confighash.Source{}
		}
		out[u.GetNamespace()][src.SourceRef] = src
	}
	return out, nil
}

func (c *explainConfig) explainFiles(vocabulary confighash.Vocabulary) ([]confighash.Explanation, error) {
	read := func(names []string) ([]*unstructured.Unstructured, error) { return readObjects(names, os.Stdin) }
	workloadObjs, err := read(c.files)
	if err != nil {
		return nil, err
	}
	withObjs, err := read(c.with)
	if err != nil {
		return nil, err
	}
	sources, err := sourcesOf(append(slices.Clone(workloadObjs), withObjs...))
	if err != nil {
		return nil, err
	}
	var old map[string]map[confighash.SourceRef]confighash.Source
	if len(c.withOld) > 0 {
		oldObjs, err := read(c.withOld)
		if err != nil {
			return nil, err
		}
		if old, err = sourcesOf(oldObjs); err != nil {
			return nil, err
		}
	}
	key, haveKey, err := c.fileKey()
	if err != nil {
		return nil, err
	}
	if !haveKey && old != nil {
		// Which workloads roll needs only a consistent key: any will do.
		b := make([]byte, confighash.MinKeySize)
		_, _ = rand.Read(b)
		key, _ = confighash.NewKey(b)
		haveKey = true
	}
	var out []confighash.Explanation
	for _, u := range workloadObjs {
		w, err := confighash.WorkloadOf(u)
		if errors.Is(err, confighash.ErrUnsupportedKind) {
			continue // the sources, and anything else a chart renders
		}
		if err != nil {
			return nil, badInput("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
		in := confighash.ExplainInput{Vocabulary: vocabulary, Workload: w, New: true, Key: key, HaveKey: haveKey}
		if old != nil {
			// As hashed with the old sources: the record and hash the webhook wrote then.
			if in.Workload, err = asHashed(u, w, key, vocabulary, old[w.Namespace]); err != nil {
				return nil, err
			}
		}
		in.Sources, in.Names = sources[w.Namespace], names(sources[w.Namespace])
		e := confighash.Explain(in)
		if c.hashKeyFile == "" && old != nil {
			e.Hash, e.TemplateHash = "", "" // made with a throwaway key: meaningless
			for i := range e.Sources {
				e.Sources[i].Recorded, e.Sources[i].Now = "", ""
			}
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, badInput("no workload (Deployment, StatefulSet, DaemonSet, CronJob or Argo Rollout) in %s", c.files.String())
	}
	return out, nil
}

func names(sources map[confighash.SourceRef]confighash.Source) []confighash.SourceRef {
	refs := make([]confighash.SourceRef, 0, len(sources))
	for ref := range sources {
		refs = append(refs, ref)
	}
	return refs
}

// asHashed returns the workload as the webhook would have left it with the given
// sources: the record and the hash written on it.
func asHashed(u *unstructured.Unstructured, w *confighash.Workload, key confighash.Key, vocabulary confighash.Vocabulary, sources map[confighash.SourceRef]confighash.Source) (*confighash.Workload, error) {
	policy, _ := vocabulary.ParsePolicy(w.Annotations, w.Template.Annotations)
	candidates := policy.Candidates(confighash.References(w.Template), names(sources))
	record := confighash.Update(nil, confighash.Observe(key, policy, candidates, sources))
	c := u.DeepCopy()
	annotations := c.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[confighash.AnnotationSources] = record.String()
	c.SetAnnotations(annotations)
	path := append(slices.Clone(w.Kind.TemplatePath), "metadata", "annotations", confighash.AnnotationHash)
	if err := unstructured.SetNestedField(c.Object, record.Hash(key), path...); err != nil {
		return nil, badInput("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return confighash.WorkloadOf(c)
}

func (c *explainConfig) explainLive(ctx context.Context, vocabulary confighash.Vocabulary, target string) ([]confighash.Explanation, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.context})
	config, err := loader.ClientConfig()
	if err != nil {
		return nil, badInput("kubeconfig: %v", err)
	}
	ns := c.namespace
	if ns == "" {
		if ns, _, err = loader.Namespace(); err != nil {
			return nil, badInput("kubeconfig: %v", err)
		}
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
		kinds, kindErr := confighash.ParseKinds(kindName)
		if !ok || name == "" || kindErr != nil {
			kinds, kindErr = confighash.ParseKinds(kindName + "s")
		}
		if !ok || name == "" || kindErr != nil || len(kinds) != 1 {
			return nil, badInput("%q: want kind/name, the kind one of deployment, statefulset, daemonset, cronjob, rollout", target)
		}
		k := kinds[0]
		u, err := dyn.Resource(k.GroupVersion().WithResource(k.Resource)).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, badInput("%s %s/%s does not exist", k.Kind, ns, name)
		}
		if err != nil {
			return nil, fmt.Errorf("read %s %s/%s: %w", k.Kind, ns, name, err)
		}
		objs = append(objs, u)
	} else {
		for _, k := range confighash.Kinds {
			list, err := dyn.Resource(k.GroupVersion().WithResource(k.Resource)).Namespace(ns).List(ctx, metav1.ListOptions{})
			if apierrors.IsNotFound(err) && k.Kind == confighash.Rollout.Kind {
				continue // Argo Rollouts not installed
			}
			if err != nil {
				return nil, fmt.Errorf("list %s in %s: %w", k.Resource, ns, err)
			}
			for i := range list.Items {
				objs = append(objs, &list.Items[i])
			}
		}
	}

	namespace, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read namespace %s: %w", ns, err)
	}
	mode := namespace.Labels[confighash.InjectionLabel]
	sources, err := liveSources(ctx, client, ns)
	if err != nil {
		return nil, err
	}
	key, haveKey, keyErr := c.fileKey()
	if keyErr != nil {
		return nil, keyErr
	}
	if !haveKey {
		key, keyErr = keyFromSecret(ctx, client, c.installNamespace, c.keySecret)
	}
	var out []confighash.Explanation
	for _, u := range objs {
		w, err := confighash.WorkloadOf(u)
		if err != nil {
			if target != "" {
				return nil, badInput("%s %s: %v", u.GetKind(), u.GetName(), err)
			}
			continue
		}
		e := confighash.Explain(confighash.ExplainInput{
			Vocabulary: vocabulary, Workload: w, Every: mode == confighash.InjectionEvery,
			Sources: sources, Names: names(sources), Key: key, HaveKey: keyErr == nil,
		})
		switch {
		case mode != confighash.InjectionEnabled && mode != confighash.InjectionEvery:
			e.Verdict, e.Why = confighash.VerdictNoRollout, fmt.Sprintf("namespace %s is not enabled: label it %s=%s", ns, confighash.InjectionLabel, confighash.InjectionEnabled)
		case !e.OptedIn && target == "":
			continue // -n lists the opted-in workloads
		case keyErr != nil && e.OptedIn:
			e.Why = "the hash key could not be read (" + keyErr.Error() + "), so digests are not compared; the sources and the keys that count are listed"
		}
		out = append(out, e)
	}
	return out, nil
}

// liveSources reads the namespace's ConfigMaps and Secrets as digest views.
func liveSources(ctx context.Context, client kubernetes.Interface, ns string) (map[confighash.SourceRef]confighash.Source, error) {
	out := map[confighash.SourceRef]confighash.Source{}
	cms, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the ConfigMaps of %s: %w", ns, err)
	}
	for i := range cms.Items {
		s := confighash.SourceOfConfigMap(&cms.Items[i])
		out[s.SourceRef] = s
	}
	secrets, err := client.CoreV1().Secrets(ns).List(ctx, sourcecache.Filter{}.ListOptions(confighash.Secret))
	if err != nil {
		return nil, fmt.Errorf("list the Secrets of %s: %w", ns, err)
	}
	for i := range secrets.Items {
		s := confighash.SourceOfSecret(&secrets.Items[i])
		out[s.SourceRef] = s
	}
	return out, nil
}

// fileKey reads --hash-key-file, when given.
func (c *explainConfig) fileKey() (key confighash.Key, ok bool, err error) {
	if c.hashKeyFile == "" {
		return confighash.Key{}, false, nil
	}
	if key, err = keyFromFile(c.hashKeyFile); err != nil {
		return confighash.Key{}, false, badInput("%v", err)
	}
	return key, true, nil
}

// keyFromSecret reads the hash key from its Secret, never creating it.
func keyFromSecret(ctx context.Context, client kubernetes.Interface, namespace, secret string) (confighash.Key, error) {
	s, err := client.CoreV1().Secrets(namespace).Get(ctx, secret, metav1.GetOptions{})
	if err != nil {
		return confighash.Key{}, fmt.Errorf("read Secret %s/%s: %s", namespace, secret, apierrors.ReasonForError(err))
	}
	return confighash.NewKey(s.Data[hashKeyDataKey])
}

func printExplanations(out io.Writer, format string, explanations []confighash.Explanation) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(explanations)
	}
	for i, e := range explanations {
		if i > 0 {
			fmt.Fprintln(out)
		}
		fmt.Fprintf(out, "%s %s/%s: %s\n  %s\n", e.Kind, e.Namespace, e.Name, strings.ToUpper(e.Verdict), e.Why)
		fmt.Fprintf(out, "  opted in: %v (%s)\n", e.OptedIn, e.OptIn)
		for _, p := range e.Problems {
			fmt.Fprintf(out, "  problem: %s\n", p)
		}
		if e.Hash != "" || e.TemplateHash != "" {
			fmt.Fprintf(out, "  hash on the pod template: %s\n  hash now:                 %s\n", orNone(e.TemplateHash), orNone(e.Hash))
		}
		if e.Adopted != "" {
			fmt.Fprintf(out, "  adopted at:               %s\n", e.Adopted)
		}
		if len(e.Sources) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  SOURCE\tCOUNTS\tKEYS\tRECORDED\tNOW\tUSED BY")
		for _, s := range e.Sources {
			counts := "yes"
			if !s.Counts {
				counts = "no: " + s.Why
			}
			keys := "all"
			if len(s.Keys) > 0 {
				keys = strings.Join(s.Keys, ",")
			}
			fmt.Fprintf(tw, "  %s/%s\t%s\t%s\t%s\t%s\t%s\n", s.Kind, s.Name, counts, keys, orNone(s.Recorded), orNone(s.Now), strings.Join(s.Uses, "; "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
