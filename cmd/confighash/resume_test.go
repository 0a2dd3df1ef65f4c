package main

import (
	"bytes"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
)

func TestResumeNamesAWorkloadWhoseHeldMarkerIsMalformed(t *testing.T) {
	c := cluster.Require(t, testCluster)
	ns, err := c.CreateNamespace(t.Context(), "resume", nil)
	if err != nil {
		t.Fatal(err)
	}
	const good = "ConfigMap/app@12 v1:abc"
	for _, tc := range []struct {
		name, marker string
	}{
		{"a blank marker", " "},
		{"an empty marker", ""},
		{"a marker without its hash", "ConfigMap/app@12"},
		{"a marker without the version of the source", "ConfigMap/app v1:abc"},
		{"a marker of another kind of source", "Pod/app@12 v1:abc"},
		{"a marker of three parts", "ConfigMap/app@12 v1:abc more"},
		{"a huge marker", "ConfigMap/app@12 v1:" + strings.Repeat("a", 200_000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ReplaceAll(tc.name, " ", "-")
			heldDeployment(t, c, ns, name, tc.marker)
			heldDeployment(t, c, ns, name+"-good", good)
			var out bytes.Buffer
			err := run(t.Context(), []string{"resume", "deployment/" + name, "-n", ns, "--kubeconfig", c.Kubeconfig}, &out, &out)
			if err == nil || !strings.Contains(err.Error(), "Deployment "+ns+"/"+name+": ") || len(err.Error()) > 1000 {
				t.Fatalf("resume of the workload: error %v; want one naming Deployment %s/%s, short", err, ns, name)
			}
			// By source: the good one resumes, the malformed one is named.
			err = run(t.Context(), []string{"resume", "configmap/app", "-n", ns, "--kubeconfig", c.Kubeconfig}, &out, &out)
			if err == nil || !strings.Contains(err.Error(), "Deployment "+ns+"/"+name+": ") {
				t.Fatalf("resume of the source: error %v; want one naming Deployment %s/%s", err, ns, name)
			}
			d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), name+"-good", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, held := d.Annotations[confighash.AnnotationHeld]; held {
				t.Fatal("the well-marked workload held for the source is not resumed")
			}
			_ = c.Client.AppsV1().Deployments(ns).Delete(t.Context(), name, metav1.DeleteOptions{})
		})
	}
}

func heldDeployment(t *testing.T, c *cluster.Cluster, ns, name, marker string) {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{confighash.AnnotationHeld: marker}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}}}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
