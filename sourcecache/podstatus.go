package sourcecache

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/watches"
)

// The Secrets Store CSI driver writes one SecretProviderClassPodStatus per pod and
// mounted SecretProviderClass: the versions of the objects it mounted, updated as it
// rotates them. What a SecretProviderClass holds is read from them, never from the
// provider.

// PodStatuses is the resource of the driver's SecretProviderClassPodStatuses.
var PodStatuses = schema.GroupVersionResource{Group: "secrets-store.csi.x-k8s.io", Version: "v1", Resource: "secretproviderclasspodstatuses"}

// providerClassIndex indexes pod statuses by "namespace/SecretProviderClass name".
const providerClassIndex = "secretProviderClass"

func indexByProviderClass(obj any) ([]string, error) {
	if d, ok := obj.(*Digested); ok && d.Source.Kind == confighash.SecretProviderClass {
		return []string{d.Namespace() + "/" + d.Source.Name}, nil
	}
	return nil, nil
}

// PodStatus is one pod's report as a Digested of its SecretProviderClass: each
// object's version, by object id, digested as a value is.
func PodStatus(u *unstructured.Unstructured) *Digested {
	class, _, _ := unstructured.NestedString(u.Object, "status", "secretProviderClassName")
	objects, _, _ := unstructured.NestedSlice(u.Object, "status", "objects")
	versions := make(map[string]string, len(objects))
	for _, o := range objects {
		m, _ := o.(map[string]any)
		id, _ := m["id"].(string)
		version, _ := m["version"].(string)
		if id != "" {
			versions[id] = version
		}
	}
	return NewDigested(u, confighash.Source{SourceRef: confighash.SourceRef{Kind: confighash.SecretProviderClass, Name: class},
		Present: true, Data: confighash.SumsOf(versions, func(v string) confighash.Sum { return sha256.Sum256([]byte(v)) })})
}

// ProviderClass returns what a SecretProviderClass holds from the pods' reports of
// it: each object at the version its latest report gives, so that a rotation seen on
// one pod counts at once and the same rotation seen on the others changes nothing.
// Its resourceVersion and times are the latest report's. Uniform says every report
// agrees: then every pod that mounts it holds its current data. nil when no pod
// reports it.
func ProviderClass(reports []*Digested) *Digested {
	if len(reports) == 0 {
		return nil
	}
	rv := func(d *Digested) uint64 { n, _ := strconv.ParseUint(d.ResourceVersion, 10, 64); return n }
	latest := reports[0]
	for _, d := range reports[1:] {
		if rv(d) > rv(latest) {
			latest = d
		}
	}
	out := *latest
	out.key, out.Uniform = latest.Namespace()+"/"+latest.Source.Name, true
	sums := map[string]confighash.Sum{}
	newest := map[string]uint64{}
	for _, d := range reports {
		for _, e := range d.Source.Data {
			if n := rv(d); newest[e.Key] <= n {
				sums[e.Key], newest[e.Key] = e.Sum, n
			}
		}
	}
	out.Source.Data = confighash.SumsOf(sums, func(s confighash.Sum) confighash.Sum { return s })
	for _, d := range reports {
		out.Uniform = out.Uniform && slices.Equal(d.Source.Data, out.Source.Data)
	}
	return &out
}

// ListProviderClasses reads the namespace's SecretProviderClasses live, as
// ProviderClass reads them from the pods' reports, by name, through the door: a page at
// a time, each report within its kind's bound. None without csi, or while the driver
// is not installed.
func ListProviderClasses(ctx context.Context, door watches.Door, csi dynamic.Interface, namespace string) (map[string]*Digested, error) {
	if csi == nil {
		return nil, nil
	}
	reports := map[string][]*Digested{}
	err := door.List(ctx, watches.ProviderClassPodStatuses, namespace, metav1.ListOptions{}, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return csi.Resource(PodStatuses).Namespace(namespace).List(ctx, o)
	}, func(obj runtime.Object) error {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			d := PodStatus(u)
			reports[d.Source.Name] = append(reports[d.Source.Name], d)
		}
		return nil
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the SecretProviderClassPodStatuses of %s: %w", namespace, err)
	}
	classes := make(map[string]*Digested, len(reports))
	for name, r := range reports {
		classes[name] = ProviderClass(r)
	}
	return classes, nil
}
