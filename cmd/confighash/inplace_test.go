package main

import (
	"testing"

	"github.com/rs/zerolog"
	k8sversion "k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
)

// TestRestartInPlaceNeedsKubernetes136: restart in place is on from 1.36, as
// discovery spells versions, and off below it or when the version is unreadable.
func TestRestartInPlaceNeedsKubernetes136(t *testing.T) {
	for _, tt := range []struct {
		major, minor string
		want         bool
	}{{"1", "36", true}, {"1", "37+", true}, {"2", "0", true}, {"1", "35", false}, {"1", "29+", false}, {"", "", false}} {
		d := fake.NewClientset().Discovery().(*fakediscovery.FakeDiscovery)
		d.FakedServerVersion = &k8sversion.Info{Major: tt.major, Minor: tt.minor, GitVersion: "v" + tt.major + "." + tt.minor}
		if got := inPlaceServed(d, zerolog.Nop()); got != tt.want {
			t.Errorf("%s.%s: %v, want %v", tt.major, tt.minor, got, tt.want)
		}
	}
}
