package watcher

import (
	"fmt"

	"github.com/rs/zerolog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	batchinformers "k8s.io/client-go/informers/batch/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
)

// view is what the watcher keeps of a workload: enough to find it from a source and to
// check it has converged, never its pod template.
type view struct {
	metav1.ObjectMeta
	Kind confighash.Kind
	confighash.State
	// Status is where its controller stands with its latest pod template.
	Status rollout
	// Selector selects its pods; "" for a kind whose pods a wave does not wait for.
	Selector string
}

var _ runtime.Object = (*view)(nil)

func (v *view) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object; views are never modified once built.
func (v *view) DeepCopyObject() runtime.Object {
	c := *v
	return &c
}

// viewTransform returns the workload informers' transform, which reads annotations in
// vocabulary.
func viewTransform(vocabulary confighash.Vocabulary, kinds confighash.Kinds) cache.TransformFunc {
	return func(obj any) (any, error) {
		o, ok := obj.(runtime.Object)
		if !ok {
			return obj, nil
		}
		if _, isView := o.(*view); isView {
			return obj, nil
		}
		w, err := kinds.WorkloadOf(o)
		if err != nil {
			return obj, nil // a tombstone or an object we cannot read: left as is
		}
		meta, err := metaOf(o)
		if err != nil {
			return obj, nil
		}
		return &view{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name, ResourceVersion: meta.GetResourceVersion(),
				UID: meta.GetUID(), DeletionTimestamp: meta.GetDeletionTimestamp()},
			Kind:     w.Kind,
			State:    vocabulary.Read(w),
			Status:   rolloutOf(o),
			Selector: selectorOf(o),
		}, nil
	}
}

func metaOf(o runtime.Object) (metav1.Object, error) {
	m, ok := o.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no metadata", o)
	}
	return m, nil
}

// sourceIndex indexes workloads by the sources that may count for them:
// "namespace/Kind/name". It is the reverse index from a source to its workloads.
const sourceIndex = "source"

func sourceKey(namespace string, ref confighash.SourceRef) string {
	return namespace + "/" + string(ref.Kind) + "/" + ref.Name
}

// patternKey indexes the workloads with name patterns: any source of their namespace
// may count for them.
func patternKey(namespace string) string { return namespace + "/*" }

func indexBySource(obj any) ([]string, error) {
	v, ok := obj.(*view)
	if !ok {
		return nil, nil
	}
	// What may count in a namespace of either kind: every reference and every named
	// source. A workload past the cap is refused: not indexed at all.
	if len(v.References)+len(v.Policy.Include) > confighash.MaxSources {
		return nil, nil
	}
	keys := make([]string, 0, len(v.References)+len(v.Policy.Include)+1)
	for _, r := range v.References {
		keys = append(keys, sourceKey(v.Namespace, r.SourceRef))
	}
	for _, ref := range v.Policy.Include {
		keys = append(keys, sourceKey(v.Namespace, ref))
	}
	if len(v.Policy.Patterns) > 0 {
		keys = append(keys, patternKey(v.Namespace))
	}
	return keys, nil
}

// newWorkloadInformers returns the informers of each kind, for the given namespaces or
// the whole cluster: the built-in kinds with their types, the others as unstructured
// objects, each only if the API server serves it.
func newWorkloadInformers(client kubernetes.Interface, dyn dynamic.Interface, namespaces []string, kinds confighash.Kinds, transform cache.TransformFunc, log zerolog.Logger) (map[string]*sourcecache.Informers, error) {
	indexers := cache.Indexers{sourceIndex: indexBySource, cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	informers := map[string]*sourcecache.Informers{}
	for _, k := range kinds {
		var newInformer func(ns string) cache.SharedIndexInformer
		switch k.Kind {
		case confighash.Deployment.Kind:
			newInformer = func(ns string) cache.SharedIndexInformer {
				return appsinformers.NewDeploymentInformer(client, ns, 0, indexers)
			}
		case confighash.StatefulSet.Kind:
			newInformer = func(ns string) cache.SharedIndexInformer {
				return appsinformers.NewStatefulSetInformer(client, ns, 0, indexers)
			}
		case confighash.DaemonSet.Kind:
			newInformer = func(ns string) cache.SharedIndexInformer {
				return appsinformers.NewDaemonSetInformer(client, ns, 0, indexers)
			}
		case confighash.CronJob.Kind:
			newInformer = func(ns string) cache.SharedIndexInformer {
				return batchinformers.NewCronJobInformer(client, ns, 0, indexers)
			}
		default:
			served, err := Served(client, k.GroupVersion().WithResource(k.Resource))
			if err != nil {
				log.Warn().Err(err).Str("kind", k.Kind).Msg("cannot tell whether the kind is served; watching without it until it is")
			}
			if dyn == nil || !served {
				continue
			}
			gvr := k.GroupVersion().WithResource(k.Resource)
			newInformer = func(ns string) cache.SharedIndexInformer {
				return dynamicinformer.NewFilteredDynamicInformer(dyn, gvr, ns, 0, indexers, nil).Informer()
			}
		}
		in := sourcecache.NewInformers(namespaces, newInformer)
		if err := in.SetTransform(transform); err != nil {
			return nil, err
		}
		informers[k.Kind] = in
	}
	return informers, nil
}

// Served reports whether the API server serves the resource, as a CRD is once
// installed. The group not being served is not an error.
func Served(client kubernetes.Interface, gvr schema.GroupVersionResource) (bool, error) {
	list, err := client.Discovery().ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			return true, nil
		}
	}
	return false, nil
}
