package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/certs"
)

// hashKeyDataKey is the key of the HMAC key in its Secret.
const hashKeyDataKey = "key"

// loadKey reads the HMAC key from file, or else from the Secret in namespace, creating
// it with a random key when absent (see certs.GetOrCreateSecret).
func loadKey(ctx context.Context, client kubernetes.Interface, file, namespace, secret string) (confighash.Key, error) {
	if file != "" {
		return keyFromFile(file)
	}
	s, err := certs.GetOrCreateSecret(ctx, client, namespace, secret, func() (*corev1.Secret, error) {
		b := make([]byte, confighash.MinKeySize)
		_, _ = rand.Read(b)
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: secret, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/part-of": "confighash"}},
			Data:       map[string][]byte{hashKeyDataKey: b},
			// Changing the key changes every hash and rolls every workload once.
			Immutable: ptr.To(true),
		}, nil
	})
	if err != nil {
		return confighash.Key{}, fmt.Errorf("read or create hash key secret %s/%s: %w", namespace, secret, err)
	}
	key, err := confighash.NewKey(s.Data[hashKeyDataKey])
	if err != nil {
		return confighash.Key{}, fmt.Errorf("hash key secret %s/%s: %w", namespace, secret, err)
	}
	return key, nil
}

// keyFromFile reads the HMAC key from a file (--hash-key-file).
func keyFromFile(file string) (confighash.Key, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return confighash.Key{}, fmt.Errorf("read hash key file: %w", err)
	}
	key, err := confighash.NewKey(b)
	if err != nil {
		return confighash.Key{}, fmt.Errorf("hash key file %s: %w", file, err)
	}
	return key, nil
}
