package webhook

import (
	"encoding/json"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/confighash/confighash"
)

// TestAnnotationPatchAppliesAsTheAPIServerApplies applies the patch with the JSON patch
// library the API server uses, and checks the object gained the two annotations and
// nothing else.
func TestAnnotationPatchAppliesAsTheAPIServerApplies(t *testing.T) {
	tests := []struct {
		name   string
		kind   confighash.Kind
		object string
		ops    int
	}{
		{"no annotations anywhere", confighash.Deployment,
			`{"metadata":{"name":"web"},"spec":{"template":{"metadata":{"labels":{"app":"web"}},"spec":{}}}}`, 2},
		{"no template metadata", confighash.StatefulSet,
			`{"metadata":{"name":"db","annotations":{"a/b":"c"}},"spec":{"template":{"spec":{}}}}`, 2},
		{"outdated values", confighash.Deployment,
			`{"metadata":{"annotations":{"confighash.dev/sources":"old"}},"spec":{"template":{"metadata":{"annotations":{"confighash.dev/hash":"old","x":"y"}}}}}`, 2},
		{"the record only", confighash.DaemonSet,
			`{"metadata":{"annotations":{"confighash.dev/sources":"old"}},"spec":{"template":{"metadata":{"annotations":{"confighash.dev/hash":"v1:new"}}}}}`, 1},
		{"up to date", confighash.Deployment,
			`{"metadata":{"annotations":{"confighash.dev/sources":"v1 new"}},"spec":{"template":{"metadata":{"annotations":{"confighash.dev/hash":"v1:new"}}}}}`, 0},
		{"null annotations and template metadata", confighash.Deployment,
			`{"metadata":{"annotations":null},"spec":{"template":{"metadata":null}}}`, 2},
		{"a CronJob", confighash.CronJob,
			`{"metadata":{},"spec":{"jobTemplate":{"spec":{"template":{"spec":{}}}}}}`, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			object := `{"apiVersion":"v1","kind":"` + tt.kind.Kind + `",` + tt.object[1:]
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON([]byte(object)); err != nil {
				t.Fatal(err)
			}
			ops, err := annotationPatch(u, tt.kind, written{record: "v1 new", hash: "v1:new"})
			if err != nil {
				t.Fatal(err)
			}
			if len(ops) != tt.ops {
				t.Fatalf("%d operations, want %d: %+v", len(ops), tt.ops, ops)
			}
			raw, _ := json.Marshal(ops)
			patch, err := jsonpatch.DecodePatch(raw)
			if err != nil {
				t.Fatal(err)
			}
			patched, err := patch.Apply([]byte(object))
			if err != nil {
				t.Fatalf("the API server would refuse %s: %v", raw, err)
			}

			// What the patch should have done, done by hand on the decoded object.
			want := u.DeepCopy()
			meta := want.GetAnnotations()
			if meta == nil {
				meta = map[string]string{}
			}
			meta[confighash.AnnotationSources] = "v1 new"
			want.SetAnnotations(meta)
			path := append(append([]string{}, tt.kind.TemplatePath...), "metadata", "annotations")
			if v, _, _ := unstructured.NestedFieldNoCopy(want.Object, path[:len(path)-1]...); v == nil {
				unstructured.RemoveNestedField(want.Object, path[:len(path)-1]...) // null
			}
			tmpl, _, _ := unstructured.NestedStringMap(want.Object, path...)
			if tmpl == nil {
				tmpl = map[string]string{}
			}
			tmpl[confighash.AnnotationHash] = "v1:new"
			if err := unstructured.SetNestedStringMap(want.Object, tmpl, path...); err != nil {
				t.Fatal(err)
			}
			got := &unstructured.Unstructured{}
			if err := got.UnmarshalJSON(patched); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got.Object, want.Object) {
				t.Fatalf("patched:\n%s\nwant:\n%v", patched, want.Object)
			}
		})
	}
}

func TestHasRequest(t *testing.T) {
	tests := map[string]bool{
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","object":{}}}`: true,
		`{"request":{"kind":{"group":"apps"},"uid":"1"}}`:                                                 true,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`:                                   false,
		`{"request":null}`:                 false,
		`{"request":{"uid":""}}`:           false,
		`{"request":{"object":{}}}`:        false,
		`{nope`:                            false,
		`[]`:                               false,
		`{"request":{"uid":1}}`:            false,
		`{"kind":{"request":{"uid":"1"}}}`: false,
		`{"request":{"uid":"1","object":{}},"request":null}`:    false, // the last would win, and panic kubewebhook
		`{"request":null,"request":{"uid":"1"}}`:                false,
		`{"request":{"uid":"1","uid":""}}`:                      false,
		`{"Request":{"uid":"1"}}`:                               false, // names match exactly
		`{"request":{"uid":"1"}} {"request":null}`:              false, // one object only
		`{"apiVersion":"v1","request":{"uid":"1"},"extra":[1]}`: true,
		`{"request":{"UID":"1"}}`:                               false,
		`{"request":{"uid":null}}`:                              false,
		`{"request":[]}`:                                        false,
		`null`:                                                  false,
		// The object is the API server's: hasRequest does not look inside it.
		`{"request":{"uid":"1","object":{"a":1,"a":2}}}`: true,
	}
	for body, want := range tests {
		if got := hasRequest([]byte(body)); got != want {
			t.Errorf("hasRequest(%s) = %v, want %v", body, got, want)
		}
	}
}
