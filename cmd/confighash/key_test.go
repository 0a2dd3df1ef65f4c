package main

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/certs"
	"github.com/confighash/confighash/tests/cluster"
)

var testCluster *cluster.Cluster

func TestMain(m *testing.M) { cluster.Main(m, &testCluster) }

func hashOf(k confighash.Key) string {
	return confighash.Record{{SourceRef: confighash.SourceRef{Kind: confighash.ConfigMap, Name: "a"}, Seen: true}}.Hash(k)
}

func TestReplicasStartingTogetherShareOneKey(t *testing.T) {
	c := cluster.Require(t, testCluster)
	ns, err := c.CreateNamespace(t.Context(), "key", nil)
	if err != nil {
		t.Fatal(err)
	}
	const replicas = 6
	hashes := make([]string, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			k, err := loadKey(t.Context(), c.Client, "", ns, "confighash-hash-key")
			hashes[i], errs[i] = hashOf(k), err
		})
	}
	wg.Wait()
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if hashes[i] != hashes[0] {
			t.Fatalf("replica %d hashes with another key than replica 0", i)
		}
	}
	s, err := c.Client.CoreV1().Secrets(ns).Get(t.Context(), "confighash-hash-key", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Immutable == nil || !*s.Immutable || len(s.Data[hashKeyDataKey]) != confighash.MinKeySize {
		t.Fatalf("key Secret = immutable %v, %d key bytes; want immutable and %d bytes", s.Immutable, len(s.Data[hashKeyDataKey]), confighash.MinKeySize)
	}
	again, err := loadKey(t.Context(), c.Client, "", ns, "confighash-hash-key")
	if err != nil || hashOf(again) != hashes[0] {
		t.Fatalf("a restart reads another key (err %v)", err)
	}
}

func TestHashKeyFile(t *testing.T) {
	dir := t.TempDir()
	good, short := filepath.Join(dir, "good"), filepath.Join(dir, "short")
	_ = os.WriteFile(good, bytes.Repeat([]byte{5}, 40), 0o600)
	_ = os.WriteFile(short, []byte("too short"), 0o600)
	k, err := loadKey(t.Context(), nil, good, "", "")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := confighash.NewKey(bytes.Repeat([]byte{5}, 40))
	if hashOf(k) != hashOf(want) {
		t.Fatal("the key from the file is not the file's bytes")
	}
	if _, err := loadKey(t.Context(), nil, short, "", ""); err == nil {
		t.Fatal("a 9-byte key file is accepted")
	}
	if _, err := loadKey(t.Context(), nil, filepath.Join(dir, "missing"), "", ""); err == nil {
		t.Fatal("a missing key file is accepted")
	}
}

func TestReplicasShareOneSelfSignedCertificate(t *testing.T) {
	c := cluster.Require(t, testCluster)
	ns, err := c.CreateNamespace(t.Context(), "tls", nil)
	if err != nil {
		t.Fatal(err)
	}
	const replicas = 6
	cas := make([][]byte, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			_, cas[i], errs[i] = certs.Bootstrap(t.Context(), c.Client, ns, "webhook-tls", []string{"confighash-webhook." + ns + ".svc"})
		})
	}
	wg.Wait()
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if !bytes.Equal(cas[i], cas[0]) || len(cas[0]) == 0 {
			t.Fatalf("replica %d serves under another CA than replica 0", i)
		}
	}
}
