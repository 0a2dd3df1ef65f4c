package watcher

import (
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/confighash/confighash"
)

// podView is what the watcher keeps of a pod restarted in place: what decides its
// token, and where its last restart stands. The rest of the pod is dropped as it is
// read.
type podView struct {
	Namespace, Name, ResourceVersion string
	UID                              types.UID
	// Group is what its restarts are paced within: its controller's UID, or its own.
	Group types.UID
	// Owner names its controller, as Kind/name, for Events; "" for none.
	Owner string
	// Labels are its labels, which PodDisruptionBudgets select it by; nil, and
	// LabelsOver set, past maxLabelBytes.
	Labels     map[string]string
	LabelsOver bool
	// State is the pod read as a workload of its own (confighash.PodWorkload).
	State confighash.State
	// Token is the hash of its restart token; TokenWritten, when the watcher last
	// wrote it (its managedFields entry), zero when it never did.
	Token        string
	TokenWritten time.Time
	// Nudged is set once the watcher nudged the kubelet for its token: its
	// confighash.dev/restart-nudge is the token.
	Nudged bool
	// Restarts counts its containers' restarts, and RestartsAt what they were when the
	// watcher wrote its token (-1: it never did): more since means its containers
	// restarted for that token, whatever the clocks of the node and the API server.
	Restarts, RestartsAt int
	// Reloads is set for a pod whose app reloads its files (labelled reload), which
	// its restarter's readiness tells done: RestarterReady.
	Reloads, RestarterReady bool
	// Ready is its Ready condition, and ReadyChanged when it last changed (the node's
	// clock); Failing, why a container of it cannot start or run, "" when none.
	Ready        bool
	ReadyChanged time.Time
	Failing      string
	// Deleting is set once it is being deleted; Done once it ran to its end
	// (Succeeded, or Failed as an evicted pod), which its controller no longer counts.
	Deleting, Done bool
}

var (
	_ runtime.Object            = (*podView)(nil)
	_ metav1.ObjectMetaAccessor = (*podView)(nil)
)

func (p *podView) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (p *podView) DeepCopyObject() runtime.Object { c := *p; return &c }

// GetObjectMeta gives the informer's store the pod's key and version.
func (p *podView) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion}
}

// ref is the pod, for Events.
func (p *podView) ref() *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: p.UID}
}

// restarting reports whether a restart the watcher asked for has not happened yet.
func (p *podView) restarting() bool { return p.RestartsAt >= 0 && p.Restarts <= p.RestartsAt }

// tokenOf is the restart token the watcher writes: the hash, and the pod's restarts
// so far, which its restart will move past.
func tokenOf(hash string, restarts int) string { return hash + " " + strconv.Itoa(restarts) }

// parseToken reads a restart token: its hash, and the restarts it was written at, -1
// for a token the webhook wrote at the pod's creation (a hash alone) or one not read.
func parseToken(token string) (hash string, restartsAt int) {
	hash, at, ok := strings.Cut(token, " ")
	n, err := strconv.Atoi(at)
	if !ok || err != nil || n < 0 {
		return hash, -1
	}
	return hash, n
}

// maxLabelBytes bounds the labels kept of a pod: a tenant's pods may carry many.
const maxLabelBytes = 16 << 10

func labelBytes(labels map[string]string) int {
	n := 0
	for k, v := range labels {
		n += len(k) + len(v)
	}
	return n
}

// maxFailingBytes bounds what is kept of why a pod fails, which its Event quotes.
const maxFailingBytes = 256

// failingReasons are the waiting reasons of a container that does not come back on
// its own soon.
var failingReasons = map[string]bool{
	"CrashLoopBackOff": true, "CreateContainerConfigError": true, "CreateContainerError": true,
	"RunContainerError": true, "ImagePullBackOff": true, "ErrImagePull": true, "InvalidImageName": true,
}

// podViewTransform keeps of a pod what its restarts need.
func podViewTransform(vocabulary confighash.Vocabulary) func(obj any) (any, error) {
	return func(obj any) (any, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil // a tombstone
		}
		p := &podView{Namespace: pod.Namespace, Name: pod.Name, ResourceVersion: pod.ResourceVersion, UID: pod.UID, Group: pod.UID,
			State: vocabulary.Read(confighash.PodWorkload(pod)), Deleting: pod.DeletionTimestamp != nil,
			Done: pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed}
		if p.LabelsOver = labelBytes(pod.Labels) > maxLabelBytes; !p.LabelsOver {
			p.Labels = pod.Labels
		}
		token := pod.Annotations[confighash.AnnotationRestartToken]
		p.Token, p.RestartsAt = parseToken(token)
		p.Nudged = token != "" && pod.Annotations[confighash.AnnotationRestartNudge] == token
		p.Reloads = pod.Labels[confighash.LabelRestart] == confighash.RestartReload.String()
		if owner := metav1.GetControllerOf(pod); owner != nil {
			p.Group, p.Owner = owner.UID, owner.Kind+"/"+owner.Name
		}
		for _, f := range pod.ManagedFields {
			if f.Manager == FieldManager && f.Time != nil {
				p.TokenWritten = f.Time.Time
			}
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady {
				p.Ready, p.ReadyChanged = c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
			}
		}
		for _, s := range pod.Status.ContainerStatuses {
			p.Restarts += int(s.RestartCount)
		}
		for _, s := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
			if s.Name == confighash.RestarterName {
				p.RestarterReady = s.Ready
			}
			if w := s.State.Waiting; w != nil && failingReasons[w.Reason] && p.Failing == "" {
				p.Failing = "container " + s.Name + ": " + w.Reason
				if w.Message != "" {
					p.Failing += ": " + w.Message
				}
				if len(p.Failing) > maxFailingBytes {
					p.Failing = strings.ToValidUTF8(p.Failing[:maxFailingBytes], "") + "..."
				}
			}
		}
		return p, nil
	}
}

// byGroup indexes pods by what their restarts are paced within.
func byGroup(obj any) ([]string, error) {
	if p, ok := obj.(*podView); ok {
		return []string{string(p.Group)}, nil
	}
	return nil, nil
}
