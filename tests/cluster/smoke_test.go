package cluster_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/rollouts"
)

var testCluster *cluster.Cluster

func TestMain(m *testing.M) { cluster.Main(m, &testCluster) }

func TestDeploymentRunsAndRollsOnKwok(t *testing.T) {
	c := cluster.Require(t, testCluster)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	ns, err := c.CreateNamespace(ctx, "smoke", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteNamespace(context.Background(), ns) })

	labels := map[string]string{"app": "smoke"}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1", Env: []corev1.EnvVar{{Name: "VERSION", Value: "1"}}}},
				},
			},
		},
	}
	deployments := c.Client.AppsV1().Deployments(ns)
	if _, err := deployments.Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitRolledOut(ctx, ns, "smoke"); err != nil {
		t.Fatal(err)
	}

	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == cluster.NodeName {
			running++
		}
	}
	if running != 2 {
		t.Fatalf("Running pods on %s = %d, want 2 (of %d pods)", cluster.NodeName, running, len(pods.Items))
	}

	current, err := deployments.Get(ctx, "smoke", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	current.Spec.Template.Spec.Containers[0].Env[0].Value = "2"
	if _, err := deployments.Update(ctx, current, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitRolledOut(ctx, ns, "smoke"); err != nil {
		t.Fatal(err)
	}

	history, err := rollouts.History(ctx, c.Client, ns)
	if err != nil {
		t.Fatal(err)
	}
	sets := history["smoke"]
	if len(sets) != 2 {
		t.Fatalf("ReplicaSets = %d, want 2 after one template change", len(sets))
	}
	for _, rs := range sets {
		if rs.Spec.Template.Spec.Containers[0].Env[0].Value == "2" && rs.Status.AvailableReplicas != 2 {
			t.Fatalf("new ReplicaSet %s has %d available replicas, want 2", rs.Name, rs.Status.AvailableReplicas)
		}
	}
}
