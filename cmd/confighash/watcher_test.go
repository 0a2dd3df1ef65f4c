package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
)

func TestAwaitServedEndsOnlyOnceOneIsServed(t *testing.T) {
	resources := []schema.GroupVersionResource{
		{Group: "argoproj.io", Version: "v1alpha1", Resource: "rollouts"},
		{Group: "apps.kruise.io", Version: "v1alpha1", Resource: "clonesets"},
	}
	without := fake.NewClientset()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := awaitServed(ctx, without, resources, 10*time.Millisecond); err != nil {
		t.Fatalf("without Rollouts: %v, want nil at the end of the context", err)
	}

	for _, served := range []metav1.APIResourceList{
		{GroupVersion: "argoproj.io/v1alpha1", APIResources: []metav1.APIResource{{Name: "rollouts", Kind: "Rollout", Namespaced: true}}},
		{GroupVersion: "apps.kruise.io/v1alpha1", APIResources: []metav1.APIResource{{Name: "clonesets", Kind: "CloneSet", Namespaced: true}}},
	} {
		with := fake.NewClientset()
		with.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{&served}
		ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
		err := awaitServed(ctx, with, resources, 10*time.Millisecond)
		cancel()
		if !errors.Is(err, errServed) || !strings.Contains(err.Error(), served.APIResources[0].Name) {
			t.Fatalf("with %s served: %v, want errServed naming it", served.GroupVersion, err)
		}
	}
}
