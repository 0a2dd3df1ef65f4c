package watcher

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	batchinformers "k8s.io/client-go/informers/batch/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash"
)

// The workload kinds that have Go types are reached through the typed client, which
// speaks protobuf: their informers and their merge patches, by group, version and kind
// (a kind an install adds under the same name in another group is not one of them).
// Every other kind, an Argo Rollout or an added kind, goes through the dynamic client.

// typedInformers make an informer of a kind in a namespace: only workloadInformers
// reads them, and opens what they make through the door.
var typedInformers = map[schema.GroupVersionKind]func(client kubernetes.Interface, namespace string, indexers cache.Indexers) cache.SharedIndexInformer{
	confighash.Deployment.GroupVersionKind: func(c kubernetes.Interface, ns string, ix cache.Indexers) cache.SharedIndexInformer {
		return appsinformers.NewDeploymentInformer(c, ns, 0, ix)
	},
	confighash.StatefulSet.GroupVersionKind: func(c kubernetes.Interface, ns string, ix cache.Indexers) cache.SharedIndexInformer {
		return appsinformers.NewStatefulSetInformer(c, ns, 0, ix)
	},
	confighash.DaemonSet.GroupVersionKind: func(c kubernetes.Interface, ns string, ix cache.Indexers) cache.SharedIndexInformer {
		return appsinformers.NewDaemonSetInformer(c, ns, 0, ix)
	},
	confighash.CronJob.GroupVersionKind: func(c kubernetes.Interface, ns string, ix cache.Indexers) cache.SharedIndexInformer {
		return batchinformers.NewCronJobInformer(c, ns, 0, ix)
	},
	confighash.Job.GroupVersionKind: func(c kubernetes.Interface, ns string, ix cache.Indexers) cache.SharedIndexInformer {
		return batchinformers.NewJobInformer(c, ns, 0, ix)
	},
}

// typedPatches write a merge patch of a workload of a kind.
var typedPatches = map[schema.GroupVersionKind]func(ctx context.Context, client kubernetes.Interface, namespace, name string, body []byte, opts metav1.PatchOptions) (runtime.Object, error){
	confighash.Deployment.GroupVersionKind: func(ctx context.Context, c kubernetes.Interface, ns, name string, body []byte, opts metav1.PatchOptions) (runtime.Object, error) {
		return c.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, body, opts)
	},
	confighash.StatefulSet.GroupVersionKind: func(ctx context.Context, c kubernetes.Interface, ns, name string, body []byte, opts metav1.PatchOptions) (runtime.Object, error) {
		return c.AppsV1().StatefulSets(ns).Patch(ctx, name, types.MergePatchType, body, opts)
	},
	confighash.DaemonSet.GroupVersionKind: func(ctx context.Context, c kubernetes.Interface, ns, name string, body []byte, opts metav1.PatchOptions) (runtime.Object, error) {
		return c.AppsV1().DaemonSets(ns).Patch(ctx, name, types.MergePatchType, body, opts)
	},
	confighash.CronJob.GroupVersionKind: func(ctx context.Context, c kubernetes.Interface, ns, name string, body []byte, opts metav1.PatchOptions) (runtime.Object, error) {
		return c.BatchV1().CronJobs(ns).Patch(ctx, name, types.MergePatchType, body, opts)
	},
	confighash.Job.GroupVersionKind: func(ctx context.Context, c kubernetes.Interface, ns, name string, body []byte, opts metav1.PatchOptions) (runtime.Object, error) {
		return c.BatchV1().Jobs(ns).Patch(ctx, name, types.MergePatchType, body, opts)
	},
}
