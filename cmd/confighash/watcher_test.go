package main

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
)

func TestAwaitRolloutsEndsOnlyOnceTheyAreServed(t *testing.T) {
	without := fake.NewClientset()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := awaitRollouts(ctx, without, 10*time.Millisecond); err != nil {
		t.Fatalf("without Rollouts: %v, want nil at the end of the context", err)
	}

	with := fake.NewClientset()
	with.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
		GroupVersion: "argoproj.io/v1alpha1", APIResources: []metav1.APIResource{{Name: "rollouts", Kind: "Rollout", Namespaced: true}},
	}}
	ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := awaitRollouts(ctx, with, 10*time.Millisecond); !errors.Is(err, errRolloutsServed) {
		t.Fatalf("with Rollouts served: %v, want errRolloutsServed", err)
	}
}
