package watches

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ListPage is how many objects a list through the door holds at once: each may be as
// large as the API server takes, about 1.5 MiB, and a namespace may hold thousands.
const ListPage = 16

// List reads the objects of a registered kind in one namespace a page at a time, and
// gives each to each. An object over the kind's bound is left out, as the informers
// keep it as its key alone, and told. opts says which objects (its selectors); the
// door sets the pages. list is the kind's List in the namespace.
func (d Door) List(ctx context.Context, kind Kind, namespace string, opts metav1.ListOptions,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error), each func(runtime.Object) error) error {
	if !kind.registered() {
		return fmt.Errorf("list %s: not a kind registered in watches.Kinds", kind.Name)
	}
	opts.Limit, opts.Continue = ListPage, ""
	for {
		page, err := list(ctx, opts)
		if err != nil {
			return err
		}
		err = meta.EachListItem(page, func(obj runtime.Object) error {
			if n := sizeOf(obj); kind.MaxBytes > 0 && n > kind.MaxBytes {
				if o, err := meta.Accessor(obj); err == nil && d.Over != nil {
					d.Over(kind, namespace, o.GetName(), n)
				}
				return nil
			}
			return each(obj)
		})
		if err != nil {
			return err
		}
		l, err := meta.ListAccessor(page)
		if err != nil {
			return fmt.Errorf("list %s: %w", kind.Name, err)
		}
		if opts.Continue = l.GetContinue(); opts.Continue == "" {
			return nil
		}
	}
}

// Names lists the names of the objects of a registered kind in one namespace, through
// List.
func (d Door) Names(ctx context.Context, kind Kind, namespace string, opts metav1.ListOptions,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error)) ([]string, error) {
	var names []string
	err := d.List(ctx, kind, namespace, opts, list, func(obj runtime.Object) error {
		if o, err := meta.Accessor(obj); err == nil {
			names = append(names, o.GetName())
		}
		return nil
	})
	return names, err
}
