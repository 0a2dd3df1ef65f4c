package certs

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// PatchCABundle sets caBundle on every webhook of a MutatingWebhookConfiguration, for
// installs without cert-manager's CA injector.
func PatchCABundle(ctx context.Context, client kubernetes.Interface, configuration string, caPEM []byte) error {
	api := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	cfg, err := api.Get(ctx, configuration, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read webhook configuration %s: %w", configuration, err)
	}
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value []byte `json:"value"`
	}
	ops := make([]op, len(cfg.Webhooks))
	for i := range cfg.Webhooks {
		ops[i] = op{"add", fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), caPEM}
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return fmt.Errorf("encode caBundle patch: %w", err)
	}
	if _, err := api.Patch(ctx, configuration, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch caBundle of %s: %w", configuration, err)
	}
	return nil
}
