package watcher

import (
	"github.com/confighash/confighash/bounded"
	corev1 "k8s.io/api/core/v1"
)

// Helpers of the reads bounded in bytes (bounded).

// secretsIn is the Secrets of the namespace, to read bounded.
func secretsIn(namespace string) bounded.Resource {
	return bounded.Resource{GroupVersionResource: corev1.SchemeGroupVersion.WithResource("secrets"), Namespace: namespace}
}

// pointers are pointers to the items, as the read objects are.
func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
