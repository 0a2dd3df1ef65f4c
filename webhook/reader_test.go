package webhook

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/sourcecache"
)

func TestAtLeast(t *testing.T) {
	tests := []struct {
		have, want string
		ok         bool
	}{
		{"10", "9", true}, {"10", "10", true}, {"9", "10", false},
		{"", "1", false}, {"abc", "1", false}, {"5", "", false},
	}
	for _, tt := range tests {
		if got := atLeast(tt.have, tt.want); got != tt.ok {
			t.Errorf("atLeast(%q, %q) = %v, want %v", tt.have, tt.want, got, tt.ok)
		}
	}
}

func TestCachedReaderReadsLiveWhereTheCacheDoesNotWatch(t *testing.T) {
	client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "cfg", ResourceVersion: "3"}, Data: map[string]string{"k": "v"}})
	sources := sourcecache.New(client, []string{"watched"})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = sources.Run(ctx) }()
	if !sources.WaitSynced(ctx) {
		t.Fatal("cache not synced")
	}
	ref := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}
	reader := NewCachedReader(sources, NewLiveReader(client, nil), nil)
	got, err := reader.Read(ctx, "other", []confighash.SourceRef{ref}, []confighash.Trigger{{SourceRef: confighash.SourceRef{Kind: confighash.Secret, Name: "x"}, ResourceVersion: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if !got[ref].Present {
		t.Fatal("a ConfigMap in a namespace the cache does not watch was taken as absent; want it read live")
	}
}
