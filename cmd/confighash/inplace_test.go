package main

import (
	"testing"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
		client := fake.NewClientset()
		client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &k8sversion.Info{Major: tt.major, Minor: tt.minor, GitVersion: "v" + tt.major + "." + tt.minor}
		if got := inPlaceServed(t.Context(), client, zerolog.Nop()); got != tt.want {
			t.Errorf("%s.%s: %v, want %v", tt.major, tt.minor, got, tt.want)
		}
	}
}

// TestRestartInPlaceNeedsEveryNodeToDeclareIt: on 1.36, restart in place is on only
// when every node that takes pods declares RestartAllContainersOnContainerExits: a
// kubelet older than 1.36 (a control plane upgraded first) turns it off, since the
// scheduler would place no restartable pod there.
func TestRestartInPlaceNeedsEveryNodeToDeclareIt(t *testing.T) {
	node := func(name string, unschedulable bool, features ...string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: unschedulable},
			Status: corev1.NodeStatus{DeclaredFeatures: features}}
	}
	for _, tt := range []struct {
		name  string
		nodes []runtime.Object
		want  bool
	}{
		{"no node yet", nil, true},
		{"every node declares it", []runtime.Object{node("a", false, "GuaranteedQoSPodCPUResize", restartAllContainers), node("b", false, restartAllContainers)}, true},
		{"a node of an older kubelet", []runtime.Object{node("a", false, restartAllContainers), node("b", false)}, false},
		{"an older node cordoned", []runtime.Object{node("a", false, restartAllContainers), node("b", true)}, true},
	} {
		client := fake.NewClientset(tt.nodes...)
		client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &k8sversion.Info{Major: "1", Minor: "36"}
		if got := inPlaceServed(t.Context(), client, zerolog.Nop()); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
