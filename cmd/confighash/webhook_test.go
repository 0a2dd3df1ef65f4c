package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestRestarterImageIsTheWebhooksOwnUnlessGiven(t *testing.T) {
	pod := func(name string, containers ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "confighash", Name: name}}
		for _, c := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "registry.example.com/" + c + ":1"})
		}
		return p
	}
	client := fake.NewClientset(
		pod("confighash-webhook-a", "proxy", "webhook"),
		pod("confighash-webhook-b", "renamed"),
		pod("confighash-webhook-c", "proxy", "renamed"),
		pod("other", "other"),
	)
	tests := []struct {
		name, podName, podNamespace, want, warning string
	}{
		{"the webhook's container, among others of its pod", "confighash-webhook-a", "confighash", "registry.example.com/webhook:1", ""},
		{"the only container of its pod, whatever its name", "confighash-webhook-b", "confighash", "registry.example.com/renamed:1", ""},
		{"none of several containers not named webhook", "confighash-webhook-c", "confighash", "", `has no container \"webhook\"`},
		{"a pod that is not there", "confighash-webhook-z", "confighash", "", "not found"},
		{"a pod in another namespace", "other", "elsewhere", "", "not found"},
		{"outside a cluster, no pod name", "", "confighash", "", "$POD_NAME or $POD_NAMESPACE is unset"},
		{"no pod namespace", "confighash-webhook-a", "", "", "$POD_NAME or $POD_NAMESPACE is unset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("POD_NAME", tt.podName)
			t.Setenv("POD_NAMESPACE", tt.podNamespace)
			var logs bytes.Buffer
			got := ownImage(t.Context(), client, zerolog.New(&logs))
			if got != tt.want {
				t.Errorf("image %q, want %q", got, tt.want)
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			switch {
			case len(lines) != 1:
				t.Errorf("%d log lines, want one: %s", len(lines), logs.String())
			case tt.warning == "" && !strings.Contains(lines[0], `"level":"info"`):
				t.Errorf("log %s, want the image at info", lines[0])
			case tt.warning != "" && (!strings.Contains(lines[0], `"level":"warn"`) || !strings.Contains(lines[0], "restart in place is off") || !strings.Contains(lines[0], tt.warning)):
				t.Errorf("log %s, want a warning that restart in place is off, saying %s", lines[0], tt.warning)
			}
		})
	}
}

func TestRestarterImageIsTheOneGivenOrNoneWhenRestartInPlaceIsOff(t *testing.T) {
	t.Setenv("POD_NAME", "confighash-webhook-a")
	t.Setenv("POD_NAMESPACE", "confighash")
	client := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "confighash", Name: "confighash-webhook-a"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "webhook", Image: "registry.example.com/confighash:1"}}}})
	// Reads: the webhook's own pod, when no image is given (whether restart in place is
	// served here is TestRestartInPlaceNeedsEveryNodeToDeclareIt's).
	for _, tt := range []struct {
		name  string
		cfg   webhookConfig
		on    bool
		want  string
		reads int
	}{
		{"the image given", webhookConfig{restarterImage: "mirror.example.com/confighash:1"}, true, "mirror.example.com/confighash:1", 0},
		{"none given: the webhook's own", webhookConfig{}, true, "registry.example.com/confighash:1", 1},
		{"restart in place off, an image given", webhookConfig{restarterImage: "mirror.example.com/confighash:1"}, false, "", 0},
		{"restart in place off, none given", webhookConfig{}, false, "", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client.ClearActions()
			if got := tt.cfg.restarter(t.Context(), client, tt.on, zerolog.Nop()); got != tt.want {
				t.Errorf("image %q, want %q", got, tt.want)
			}
			if got := len(client.Actions()); got != tt.reads {
				t.Errorf("%d reads of the API, want %d", got, tt.reads)
			}
		})
	}
}

func TestRestarterImageWithSpacesIsRefusedAtStart(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"webhook", "--restarter-image= ghcr.io/confighash/confighash:1"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--restarter-image") {
		t.Fatalf("got %v, want a refusal naming --restarter-image", err)
	}
}
