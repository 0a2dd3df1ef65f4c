package watcher

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/watches"
)

// TestAPodNoRestartReachesRollsItsWorkloadInstead (issue 52): a pod whose admission the
// webhook shed has no restarter and no label, so the restarts never see it; restarting
// the others in place left it on its old data for ever, and told no one. Where its
// workload's status counts more pods than the restarts see, the change rolls the
// workload instead, once, with a Warning Event on it; where the restarts see them all,
// or cannot tell, the pods are restarted in place as before.
func TestAPodNoRestartReachesRollsItsWorkloadInstead(t *testing.T) {
	inPlace := map[string]string{confighash.AnnotationRestart: confighash.RestartInPlace.String()}
	statefulSet := func(replicas int32) *appsv1.StatefulSet {
		s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db", UID: "db", Generation: 1}}
		s.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
		s.Spec.Template.Annotations = inPlace
		s.Status = appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: replicas, UpdatedReplicas: replicas}
		return s
	}
	deployment := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "web", Generation: 1}}
	deployment.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	deployment.Spec.Template.Annotations = inPlace
	deployment.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 3}
	// pod is a Ready pod of the workload app, labelled for restart in place unless shed.
	pod := func(app, name string, shed bool) *corev1.Pod {
		p := restartablePod(name, types.UID(app), "v1:old")
		p.Labels["app"] = app
		if app == "web" {
			p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = "5d8f"
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-5d8f", UID: "web-5d8f", Controller: ptr.To(true)}}
		}
		if shed {
			delete(p.Labels, confighash.LabelRestart)
			delete(p.Annotations, confighash.AnnotationRestartToken)
		}
		return p
	}
	evicted := pod("web", "web-5d8f-c", false)
	evicted.Status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}
	deleting := pod("db", "db-2", false)
	deleting.DeletionTimestamp, deleting.Finalizers = &metav1.Time{Time: time.Now()}, []string{"example.com/hold"}

	for _, tt := range []struct {
		name     string
		objects  []runtime.Object
		group    types.UID
		rolled   workloadKey // the workload rolled instead, zero for none
		restarts int         // pods restarted in place
	}{
		{"a StatefulSet one of whose three pods was shed rolls instead",
			[]runtime.Object{statefulSet(3), pod("db", "db-0", false), pod("db", "db-1", false), pod("db", "db-2", true)}, "db", workloadKey{"StatefulSet", "shop", "db"}, 0},
		{"a Deployment whose evicted pod was replaced by a shed one rolls instead: the evicted pod runs nothing",
			[]runtime.Object{deployment, pod("web", "web-5d8f-a", false), pod("web", "web-5d8f-b", false), evicted, pod("web", "web-5d8f-d", true)}, "web-5d8f", workloadKey{"Deployment", "shop", "web"}, 0},
		{"a StatefulSet whose pods all have their restarter restarts them in place",
			[]runtime.Object{statefulSet(2), pod("db", "db-0", false), pod("db", "db-1", false)}, "db", workloadKey{}, 1},
		{"a StatefulSet with a pod being deleted, which its status may count yet, restarts in place",
			[]runtime.Object{statefulSet(3), pod("db", "db-0", false), pod("db", "db-1", false), deleting}, "db", workloadKey{}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(tt.objects...)
			gate := modes{"shop": confighash.ModeEvery}
			door := watches.Door{Gate: gate}
			w := &Watcher{cfg: Config{Client: client}}
			var err error
			if w.workloads, err = newWorkloads(client, nil, nil, gate, door, confighash.Builtin, confighash.Vocabulary{}, NoopRecorder{}, zerolog.Nop()); err != nil {
				t.Fatal(err)
			}
			rules := podRules{
				restartOf: func(*podView) (confighash.Restart, error) { return confighash.Restart{Token: "v1:new"}, nil },
				covered:   func(string) bool { return true },
				rollout:   w.workloads.rolloutFor,
				patch:     w.workloads.patch,
			}
			events := &record.FakeRecorder{Events: make(chan string, 10), IncludeObject: true}
			r, err := newRestarts(client, door, confighash.Vocabulary{}, rules, 0, time.Minute, 0, newReporter(events, nil, nil, zerolog.Nop()), NoopRecorder{}, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			w.workloads.run(t.Context())
			r.run(t.Context())
			waitUntil(t, func() bool { return w.workloads.synced() && r.synced() })
			g := podGroup{"shop", tt.group}
			for range 2 { // a second look finds the same change: it rolls once, and tells once
				if _, err := r.sync(t.Context(), g); err != nil {
					t.Fatal(err)
				}
				if tt.rolled != (workloadKey{}) {
					waitUntil(t, func() bool { v := w.workloads.lookup(tt.rolled); return v != nil && v.Hash == "v1:new" })
				}
			}

			var rolled []string
			restarted := map[string]bool{} // a look before the cache shows a restart writes it again
			for _, a := range client.Actions() {
				p, ok := a.(k8stesting.PatchAction)
				switch {
				case !ok:
				case p.GetResource().Resource == "pods":
					restarted[p.GetName()] = true
				case strings.Contains(string(p.GetPatch()), `"`+confighash.AnnotationHash+`":"v1:new"`):
					rolled = append(rolled, p.GetResource().Resource+"/"+p.GetName())
				}
			}
			if len(restarted) != tt.restarts {
				t.Errorf("%d pods restarted in place, want %d", len(restarted), tt.restarts)
			}
			var told []string
			for len(events.Events) > 0 {
				if e := <-events.Events; strings.Contains(e, "RollsToCatchUp") {
					told = append(told, e)
				}
			}
			if tt.rolled == (workloadKey{}) {
				if len(rolled) > 0 || len(told) > 0 {
					t.Errorf("rolled %v, telling %q; want its pods restarted in place alone", rolled, told)
				}
				return
			}
			if len(rolled) != 1 {
				t.Errorf("rolled %v, want %s once: its pod template hashed for the change", rolled, tt.rolled)
			}
			if len(told) != 1 || !strings.Contains(told[0], "Warning RollsToCatchUp 1 of its 3 pods run without the restarter") || !strings.Contains(told[0], "kind="+tt.rolled.Kind) {
				t.Errorf("told %q; want one Warning RollsToCatchUp on %s, counting the pod no restart reaches", told, tt.rolled)
			}
		})
	}
}

// TestAWorkloadCountsItsPodsOnlyWhereARolloutWouldReplaceThem: the pods a workload's
// status counts are compared with those its restarts see only when they all run its
// pod template and a change of that template would replace them.
func TestAWorkloadCountsItsPodsOnlyWhereARolloutWouldReplaceThem(t *testing.T) {
	deployment := func(replicas, updated int32) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: replicas, UpdatedReplicas: updated}
		return d
	}
	paused := deployment(3, 3)
	paused.Spec.Paused = true
	unseen := deployment(3, 3)
	unseen.Status.ObservedGeneration = 1
	statefulSet := func(replicas, updated int32) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{Status: appsv1.StatefulSetStatus{Replicas: replicas, UpdatedReplicas: updated}}
	}
	partitioned := statefulSet(3, 3)
	partitioned.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](1)}
	onDelete := statefulSet(3, 3)
	onDelete.Spec.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType
	daemonSet := func(current, updated, misscheduled int32) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{Status: appsv1.DaemonSetStatus{CurrentNumberScheduled: current, UpdatedNumberScheduled: updated, NumberMisscheduled: misscheduled}}
	}
	for _, tt := range []struct {
		name string
		obj  runtime.Object
		want int
	}{
		{"a Deployment whose pods all run its template", deployment(3, 3), 3},
		{"a Deployment with pods of an earlier template", deployment(4, 2), unknownPods},
		{"a Deployment its controller has not seen yet", unseen, unknownPods},
		{"a paused Deployment", paused, unknownPods},
		{"a StatefulSet all updated", statefulSet(3, 3), 3},
		{"a StatefulSet with a pod being deleted, which only its replicas count", statefulSet(3, 2), unknownPods},
		{"a StatefulSet held at a partition", partitioned, unknownPods},
		{"a StatefulSet updated on delete", onDelete, unknownPods},
		{"a DaemonSet updated on every node", daemonSet(4, 4, 0), 4},
		{"a DaemonSet with a pod where it should not run", daemonSet(4, 4, 1), unknownPods},
		{"a ReplicaSet of no workload", &appsv1.ReplicaSet{}, unknownPods},
	} {
		if got := podsOf(tt.obj); got != tt.want {
			t.Errorf("%s: %d pods, want %d", tt.name, got, tt.want)
		}
	}
}
