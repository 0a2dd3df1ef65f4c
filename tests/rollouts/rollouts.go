// Package rollouts says how many times the workloads of a namespace have rolled, as
// their controllers record it: a Deployment makes a ReplicaSet, a StatefulSet or a
// DaemonSet a ControllerRevision, for its first template and for each new one after.
// So a workload with n of them has rolled n-1 times. Counting them, never the
// generation, is what a user sees: the generation also rises on changes of
// annotations alone.
//
// Workloads are told apart by their pods' app label, which each test fixture sets to
// the workload's name.
package rollouts

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ReplicaSets returns how many ReplicaSets Deployment app of namespace ns has.
func ReplicaSets(ctx context.Context, c kubernetes.Interface, ns, app string) (int, error) {
	list, err := c.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return 0, fmt.Errorf("list replicasets of %s/%s: %w", ns, app, err)
	}
	return len(list.Items), nil
}

// AllReplicaSets returns how many ReplicaSets namespace ns has, of every Deployment.
func AllReplicaSets(ctx context.Context, c kubernetes.Interface, ns string) (int, error) {
	list, err := c.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("list replicasets of %s: %w", ns, err)
	}
	return len(list.Items), nil
}

// ReplicaSetsPerApp returns how many ReplicaSets each Deployment of namespace ns has,
// by app label, with one list.
func ReplicaSetsPerApp(ctx context.Context, c kubernetes.Interface, ns string) (map[string]int, error) {
	history, err := History(ctx, c, ns)
	if err != nil {
		return nil, err
	}
	counts := make(map[string]int, len(history))
	for app, sets := range history {
		counts[app] = len(sets)
	}
	return counts, nil
}

// History returns the ReplicaSets of each Deployment of namespace ns, by app label, in
// no particular order: for a test that reads what each rollout carried.
func History(ctx context.Context, c kubernetes.Interface, ns string) (map[string][]appsv1.ReplicaSet, error) {
	list, err := c.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list replicasets of %s: %w", ns, err)
	}
	history := map[string][]appsv1.ReplicaSet{}
	for _, rs := range list.Items {
		app := rs.Labels["app"]
		history[app] = append(history[app], rs)
	}
	return history, nil
}

// Rolling returns how many Deployments of namespace ns are rolling now: with pods in
// more than one ReplicaSet, or a ReplicaSet that wants a pod it does not have.
func Rolling(ctx context.Context, c kubernetes.Interface, ns string) (int, error) {
	history, err := History(ctx, c, ns)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, sets := range history {
		live := 0
		for _, rs := range sets {
			if rs.Status.Replicas > 0 || *rs.Spec.Replicas > 0 {
				live++
			}
		}
		if live > 1 {
			n++
		}
	}
	return n, nil
}

// ControllerRevisions returns how many ControllerRevisions StatefulSet or DaemonSet
// app of namespace ns has.
func ControllerRevisions(ctx context.Context, c kubernetes.Interface, ns, app string) (int, error) {
	list, err := c.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return 0, fmt.Errorf("list controllerrevisions of %s/%s: %w", ns, app, err)
	}
	return len(list.Items), nil
}
