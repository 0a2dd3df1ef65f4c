package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/confighash/confighash"
)

// podHandler admits pods with one ConfigMap, cfg, holding value.
func podHandler(t *testing.T, image, value string) func(pod string) *httptest.ResponseRecorder {
	t.Helper()
	cfg := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}
	src := confighash.Source{SourceRef: cfg, Present: true, Data: confighash.Sums{{Key: "k", Sum: confighash.Sum{value[0]}}}}
	key, _ := confighash.NewKey(bytes.Repeat([]byte{1}, 32))
	h, err := NewHandler(newMutator(t, Config{Key: key, Reader: stubReader{sources: map[confighash.SourceRef]confighash.Source{cfg: src}}, RestarterImage: image}), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return func(pod string) *httptest.ResponseRecorder {
		request := &admissionv1.AdmissionRequest{
			UID: "1", Operation: admissionv1.Create, Namespace: "ns", Name: "web-1",
			Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Object: runtime.RawExtension{Raw: []byte(pod)},
		}
		body, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: request})
		return post(h, "application/json", body)
	}
}

const podJSON = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","namespace":"ns"%s},
"spec":{%s"containers":[{"name":"app","image":"app:1","envFrom":[{"configMapRef":{"name":"cfg"}}]}]}}`

// admitted applies the admission's patch to the pod as the API server does.
func admitted(t *testing.T, pod string, resp *admissionv1.AdmissionResponse) *corev1.Pod {
	t.Helper()
	out := []byte(pod)
	if len(resp.Patch) > 0 {
		patch, err := jsonpatch.DecodePatch(resp.Patch)
		if err != nil {
			t.Fatal(err)
		}
		if out, err = patch.Apply(out); err != nil {
			t.Fatalf("the API server would refuse %s: %v", resp.Patch, err)
		}
	}
	p := &corev1.Pod{}
	if err := json.Unmarshal(out, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAPodThatAsksIsMadeRestartableInPlace: a pod whose annotations ask for restart in
// place gets the restarter, its volume, the label the watcher watches and the token of
// its data, whatever it has of its own; one admitted again gains nothing twice; one
// that does not ask, or an install without a restarter image, is left as it is.
func TestAPodThatAsksIsMadeRestartableInPlace(t *testing.T) {
	asks := `,"annotations":{"confighash.dev/restart":"in-place"}`
	admit := podHandler(t, "confighash:1", "1")
	admitOther := podHandler(t, "confighash:1", "2")
	for _, tt := range []struct{ name, pod string }{
		{"bare", fmt.Sprintf(podJSON, asks, "")},
		{"with labels, init containers and volumes", fmt.Sprintf(podJSON, asks+`,"labels":{"app":"web"}`,
			`"initContainers":[{"name":"setup","image":"busybox"}],"volumes":[{"name":"data","emptyDir":{}}],`)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := admitted(t, tt.pod, decodeResponse(t, admit(tt.pod)))
			token := pod.Annotations[confighash.AnnotationRestartToken]
			if !strings.HasPrefix(token, "v1:") || pod.Labels[confighash.LabelRestart] != "in-place" {
				t.Fatalf("token %q, labels %v", token, pod.Labels)
			}
			last := pod.Spec.InitContainers[len(pod.Spec.InitContainers)-1]
			if last.Name != confighash.RestarterName || last.Image != "confighash:1" || len(last.RestartPolicyRules) != 1 {
				t.Errorf("restarter: %+v", last)
			}
			if pod.Spec.Volumes[len(pod.Spec.Volumes)-1].Name != confighash.RestarterName || pod.Spec.Containers[0].Name != "app" {
				t.Errorf("volumes %+v, containers %+v", pod.Spec.Volumes, pod.Spec.Containers)
			}
			// Reinvoked: the same token, nothing added twice.
			again, _ := json.Marshal(pod)
			if resp := decodeResponse(t, admit(string(again))); string(resp.Patch) != "[]" {
				t.Errorf("admitted again: %s, want no change", resp.Patch)
			}
			other := admitted(t, tt.pod, decodeResponse(t, admitOther(tt.pod)))
			if other.Annotations[confighash.AnnotationRestartToken] == token {
				t.Errorf("other data, the same token %q", token)
			}
		})
	}

	noImage := podHandler(t, "", "1")
	for name, tt := range map[string]struct {
		pod     string
		admit   func(string) *httptest.ResponseRecorder
		warning string
	}{
		"does not ask":        {fmt.Sprintf(podJSON, "", ""), admit, ""},
		"asks for a rollout":  {fmt.Sprintf(podJSON, `,"annotations":{"confighash.dev/restart":"rollout"}`, ""), admit, ""},
		"opts out":            {fmt.Sprintf(podJSON, `,"annotations":{"confighash.dev/restart":"in-place","confighash.dev/inject":"false"}`, ""), admit, ""},
		"off, a bare pod":     {fmt.Sprintf(podJSON, asks, ""), noImage, "restart in place is off in this install (the components say why at start); a bare pod, nothing restarts it"},
		"off, a ReplicaSet's": {fmt.Sprintf(podJSON, asks+`,"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","uid":"1","controller":true}]`, ""), noImage, "its workload rolls instead"},
		"off, an operator's": {fmt.Sprintf(podJSON, asks+`,"ownerReferences":[{"apiVersion":"kafka.strimzi.io/v1","kind":"Kafka","name":"events","uid":"2","controller":true}]`, ""), noImage,
			"its owner Kafka/events has no pod template confighash rolls, so nothing restarts it"},
		"a typo": {fmt.Sprintf(podJSON, `,"annotations":{"confighash.dev/restart":"inplace"}`, ""), admit, "want in-place, rollout, signal:SIGHUP or http:8080/-/reload"},
	} {
		resp := decodeResponse(t, tt.admit(tt.pod))
		if len(resp.Patch) > 0 && string(resp.Patch) != "[]" {
			t.Errorf("%s: patched %s, want the pod as it is", name, resp.Patch)
		}
		if got := strings.Join(resp.Warnings, "\n"); !strings.Contains(got, tt.warning) || (tt.warning == "") != (got == "") {
			t.Errorf("%s: warnings %q, want one with %q", name, got, tt.warning)
		}
	}
}

// TestAPodThatReloadsGetsWhatItsRestarterNeeds: a pod that asks to reload on a signal,
// whose data all reaches it as a volume, is labelled reload; its restarter watches that
// volume, signals with its process namespace shared, as root with CAP_KILL alone, and
// is Ready only once it reloaded. One whose data reaches it through env is restarted in
// place instead, and told why.
func TestAPodThatReloadsGetsWhatItsRestarterNeeds(t *testing.T) {
	admit := podHandler(t, "confighash:1", "1")
	const files = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","namespace":"ns","annotations":{"confighash.dev/restart":"signal:SIGHUP"}},
"spec":{"containers":[{"name":"nginx","image":"nginx","volumeMounts":[{"name":"conf","mountPath":"/etc/nginx"}]}],"volumes":[{"name":"conf","configMap":{"name":"cfg"}}]}}`
	resp := decodeResponse(t, admit(files))
	pod := admitted(t, files, resp)
	ctr := pod.Spec.InitContainers[0]
	switch {
	case pod.Labels[confighash.LabelRestart] != "reload" || len(resp.Warnings) != 0:
		t.Errorf("label %q, warnings %q; want reload", pod.Labels[confighash.LabelRestart], resp.Warnings)
	case pod.Spec.ShareProcessNamespace == nil || !*pod.Spec.ShareProcessNamespace:
		t.Errorf("the process namespace is not shared")
	case !slices.Contains(ctr.Args, "--reload=signal:SIGHUP") || ctr.ReadinessProbe == nil || ctr.ReadinessProbe.Exec == nil:
		t.Errorf("restarter args %q, probe %+v", ctr.Args, ctr.ReadinessProbe)
	case *ctr.SecurityContext.RunAsUser != 0 || !slices.Equal(ctr.SecurityContext.Capabilities.Add, []corev1.Capability{"KILL"}):
		t.Errorf("security context %+v", ctr.SecurityContext)
	case !slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "conf" && m.ReadOnly }):
		t.Errorf("the restarter does not see the volume conf: %+v", ctr.VolumeMounts)
	case len(pod.Spec.Volumes) != 3:
		t.Errorf("volumes %+v, want conf, the token's and the state's", pod.Spec.Volumes)
	}

	env := strings.Replace(files, `"volumeMounts"`, `"envFrom":[{"configMapRef":{"name":"cfg"}}],"volumeMounts"`, 1)
	resp = decodeResponse(t, admit(env))
	pod = admitted(t, env, resp)
	if pod.Labels[confighash.LabelRestart] != "in-place" || pod.Spec.ShareProcessNamespace != nil || len(resp.Warnings) != 1 ||
		!strings.Contains(resp.Warnings[0], "restarted in place, not reloaded: ConfigMap/cfg reaches container nginx through envFrom") {
		t.Errorf("with env: label %q, warnings %q", pod.Labels[confighash.LabelRestart], resp.Warnings)
	}
}

// namespacesRead is a reader that records the namespaces it is asked to read.
type namespacesRead struct {
	stubReader
	read *[]string
}

func (r namespacesRead) Read(ctx context.Context, namespace string, refs []confighash.SourceRef, triggers []confighash.Trigger) (map[confighash.SourceRef]confighash.Source, error) {
	*r.read = append(*r.read, namespace)
	return r.stubReader.Read(ctx, namespace, refs, triggers)
}

// TestAReviewIsReadInTheNamespaceTheGuardChecked (issue 52): the guard checks the
// request's namespace; a review whose object names another (which the API server
// never sends) reads nothing there, for a pod as for a workload.
func TestAReviewIsReadInTheNamespaceTheGuardChecked(t *testing.T) {
	var read []string
	key, _ := confighash.NewKey(bytes.Repeat([]byte{1}, 32))
	h, err := NewHandler(newMutator(t, Config{Key: key, Reader: namespacesRead{read: &read}, RestarterImage: "confighash:1"}), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	review := func(kind metav1.GroupVersionKind, resource string, object string) *admissionv1.AdmissionResponse {
		request := &admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create, Namespace: "ns", Name: "web-1",
			Kind: kind, Resource: metav1.GroupVersionResource{Group: kind.Group, Version: kind.Version, Resource: resource}, Object: runtime.RawExtension{Raw: []byte(object)}}
		body, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: request})
		return decodeResponse(t, post(h, "application/json", body))
	}
	asks := `,"annotations":{"confighash.dev/restart":"in-place"}`
	pod := strings.Replace(fmt.Sprintf(podJSON, asks, ""), `"namespace":"ns"`, `"namespace":"other"`, 1)
	if resp := review(metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, "pods", pod); len(resp.Patch) > 2 {
		t.Errorf("a pod of another namespace than the request's was patched: %s", resp.Patch)
	}
	deployment := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"other","annotations":{"confighash.dev/inject":"true"}},
"spec":{"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"app","image":"app:1","envFrom":[{"configMapRef":{"name":"cfg"}}]}]}}}}`
	if resp := review(metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "deployments", deployment); len(resp.Patch) > 2 {
		t.Errorf("a Deployment of another namespace than the request's was patched: %s", resp.Patch)
	}
	if len(read) > 0 {
		t.Errorf("read the sources of %v, want none", read)
	}
	// The same pod in the request's namespace is read there.
	if resp := review(metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, "pods", fmt.Sprintf(podJSON, asks, "")); len(resp.Patch) <= 2 || len(read) == 0 || slices.ContainsFunc(read, func(ns string) bool { return ns != "ns" }) {
		t.Errorf("the pod of the request's namespace: patch %s, read %v", resp.Patch, read)
	}
}
