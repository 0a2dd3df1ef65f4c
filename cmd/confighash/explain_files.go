package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/namespaces"
)

// explain's offline half: workloads and sources read from manifests.

// readObjects reads every object of manifest files, in order.
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

func (c *explainConfig) explainFiles(in confighash.ExplainInput, selectors namespaces.Selectors) ([]confighash.Explanation, error) {
	kinds, err := workloadKinds(c.extraKinds)
	if err != nil {
		return nil, err
	}
	read := func(names []string) ([]*unstructured.Unstructured, error) { return readObjects(names, os.Stdin) }
	workloadObjs, err := read(c.files)
	if err != nil {
		return nil, err
	}
	withObjs, err := read(c.with)
	if err != nil {
		return nil, err
	}
	objs := append(slices.Clone(workloadObjs), withObjs...)
	sources, err := sourcesOf(objs)
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
	if in.Key, in.HaveKey, err = c.fileKey(); err != nil {
		return nil, err
	}
	modes := namespaceModes(objs, selectors)
	var out []confighash.Explanation
	for _, u := range workloadObjs {
		w, err := kinds.WorkloadOf(u)
		if errors.Is(err, confighash.ErrUnsupportedKind) {
			continue // the sources, and anything else a chart renders
		}
		if err != nil {
			return nil, badInput("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
		in.Workload, in.New, in.Sources, in.Mode, in.Now = w, true, sources[w.Namespace], confighash.ModeOptedIn, time.Now()
		if mode, ok := modes[w.Namespace]; ok {
			in.Mode = mode
		}
		if old != nil {
			if in.Old = old[w.Namespace]; in.Old == nil {
				in.Old = map[confighash.SourceRef]confighash.Source{}
			}
		}
		out = append(out, confighash.Explain(in))
	}
	if len(out) == 0 {
		return nil, badInput("no workload (Deployment, StatefulSet, DaemonSet, CronJob, Job or Argo Rollout) in %s", c.files.String())
	}
	return out, nil
}

// namespaceModes returns how confighash acts in the namespaces the manifests include;
// a workload of another namespace is taken as in one enabled for the workloads that
// opt in.
func namespaceModes(objs []*unstructured.Unstructured, selectors namespaces.Selectors) map[string]confighash.Mode {
	modes := map[string]confighash.Mode{}
	for _, u := range objs {
		if u.GroupVersionKind() == corev1.SchemeGroupVersion.WithKind("Namespace") {
			modes[u.GetName()] = selectors.ModeOf(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), Labels: u.GetLabels()}})
		}
	}
	return modes
}
