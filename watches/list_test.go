package watches

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// A list through the door holds a page at a time, and leaves out, and tells of, an
// object over its kind's bound, as the informers keep it as a key.
func TestAListReadsPagesAndLeavesOutWhatIsOverTheBound(t *testing.T) {
	const objects = 40
	var asked []metav1.ListOptions
	list := func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
		asked = append(asked, o)
		from := 0
		if o.Continue != "" {
			fmt.Sscan(o.Continue, &from)
		}
		page := &corev1.PodList{}
		for i := from; i < min(from+int(o.Limit), objects); i++ {
			pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%02d", i), Namespace: "tenant"}}
			if i == 7 {
				pod.Annotations = map[string]string{"large": strings.Repeat("x", MaxWorkloadBytes)}
			}
			page.Items = append(page.Items, pod)
		}
		if next := from + int(o.Limit); next < objects {
			page.Continue = fmt.Sprint(next)
		}
		return page, nil
	}
	var told []string
	door := Door{Over: func(kind Kind, namespace, name string, bytes int) { told = append(told, namespace+"/"+name) }}
	var read []string
	err := door.List(t.Context(), RestartedPods, "tenant", metav1.ListOptions{LabelSelector: "app=web"}, list, func(obj runtime.Object) error {
		read = append(read, obj.(*corev1.Pod).Name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(read) != objects-1 || len(told) != 1 || told[0] != "tenant/pod-07" {
		t.Errorf("read %d objects and told of %v; want %d read, and pod-07 told", len(read), told, objects-1)
	}
	if len(asked) != 3 {
		t.Errorf("%d pages asked for %d objects, want 3 of %d", len(asked), objects, ListPage)
	}
	for _, o := range asked {
		if o.Limit != ListPage || o.LabelSelector != "app=web" {
			t.Errorf("a page asked with limit %d and selector %q, want %d and the caller's", o.Limit, o.LabelSelector, ListPage)
		}
	}
}

func TestAListOfAKindNotRegisteredIsRefused(t *testing.T) {
	err := Door{}.List(t.Context(), Kind{Name: "a kind no one registered"}, "tenant", metav1.ListOptions{},
		func(context.Context, metav1.ListOptions) (runtime.Object, error) { return &corev1.PodList{}, nil },
		func(runtime.Object) error { return nil })
	if err == nil {
		t.Error("a list of an unregistered kind went through")
	}
}
