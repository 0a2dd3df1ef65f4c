package confighash

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

// Restart in place: a workload or pod that opts in with AnnotationRestart is not rolled
// for a change of its data; each of its pods has its containers restarted where it
// runs (Kubernetes' RestartAllContainers), which starts them with the current data.
// The pod carries a small sidecar, the restarter, from confighash's own image and
// with no API credentials: it reads the pod's AnnotationRestartToken through a
// downward API volume and exits with RestarterExitCode when the token changes, and
// the pod's restart rule on that code restarts every container of the pod.

// Restarter returns the sidecar that restarts a pod's containers when its token
// changes, and the downward API volume it reads the token from. It runs image's
// confighash with no credentials, as an unprivileged user, and asks for little.
func Restarter(image string) (corev1.Container, corev1.Volume) {
	always := corev1.ContainerRestartPolicyAlways
	c := corev1.Container{
		Name:          RestarterName,
		Image:         image,
		Args:          []string{"restarter", "--token-file=" + RestarterTokenFile},
		RestartPolicy: &always,
		RestartPolicyRules: []corev1.ContainerRestartRule{{
			Action:    corev1.ContainerRestartRuleActionRestartAllContainers,
			ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{RestarterExitCode}},
		}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("8Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		// Its volume at the ServiceAccount's path too: the API server mounts no token
		// where a container has a mount, even when it admits the pod again after a
		// later webhook.
		VolumeMounts: []corev1.VolumeMount{
			{Name: RestarterName, MountPath: RestarterTokenDir, ReadOnly: true},
			{Name: RestarterName, MountPath: serviceAccountPath, ReadOnly: true},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	v := corev1.Volume{Name: RestarterName, VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
		Items: []corev1.DownwardAPIVolumeFile{{Path: "token", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + AnnotationRestartToken + "']"}}},
	}}}
	return c, v
}

// LabelRestart marks the pods the webhook gave a restarter, with the value "in-place":
// the watcher watches those alone.
const LabelRestart = AnnotationRestart

// PodWorkload reads a pod as the unit of restart in place: a workload of its own
// whose pod template is the pod, so that its annotations, which its own template gave
// it, are its policy. The volume the API server adds for the pod's ServiceAccount is
// not its template's: its ConfigMap (kube-root-ca.crt) does not count.
func PodWorkload(pod *corev1.Pod) *Workload {
	spec := pod.Spec
	spec.Volumes = slices.DeleteFunc(slices.Clone(spec.Volumes), func(v corev1.Volume) bool {
		return strings.HasPrefix(v.Name, serviceAccountVolumePrefix) && v.Projected != nil &&
			slices.ContainsFunc(v.Projected.Sources, func(s corev1.VolumeProjection) bool { return s.ServiceAccountToken != nil })
	})
	return &Workload{Kind: PodKind, Namespace: pod.Namespace, Name: pod.Name,
		Template: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: pod.Annotations}, Spec: spec}}
}

// serviceAccountPath is where the API server mounts a pod's ServiceAccount token.
const serviceAccountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// serviceAccountVolumePrefix names the volume the ServiceAccount admission plugin
// adds to a pod.
const serviceAccountVolumePrefix = "kube-api-access-"

// PodKind is a pod's kind, as a workload of its own.
var PodKind = Kind{schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, "pods", []string{"spec"}}

// ErrNotInPlace is returned by RestartOf for a pod not restarted in place.
var ErrNotInPlace = errors.New("not restarted in place")

// Restart is what a pod restarted in place is to carry, and when it may be restarted.
type Restart struct {
	// Token is the hash of the current data of the sources that count for it, as its
	// pod template would carry it if it rolled.
	Token string
	// Windows are when it may be restarted, nil for any time; PausePeriod holds its
	// restarts for a new change for this long after one (AnnotationPausePeriod).
	Windows     Windows
	PausePeriod time.Duration
	// WaveSize, above zero, caps the pods' controllers of its namespace restarted at
	// once: its pacing's, or the smallest of the sources that count for it.
	WaveSize int
	// Counted are the sources that count for it, sorted.
	Counted []SourceRef
}

// RestartOf returns what a pod restarted in place is to carry. in.State is the pod's
// (PodWorkload); a pinned pod, which names the snapshots it runs, is not restarted in
// place.
func RestartOf(in Input, sources Sources) (Restart, error) {
	if !in.State.Policy.Restart.PodByPod() || len(in.State.Pins) > 0 {
		return Restart{}, ErrNotInPlace
	}
	in.State.Policy.Restart = RestartRollout
	in.Pods, in.Previous, in.Unpinned = Pods{Fresh: true}, nil, true
	d, err := Decide(in, sources)
	if err != nil {
		return Restart{}, err
	}
	if !d.Acts {
		return Restart{}, ErrNotInPlace // it opts out
	}
	r := Restart{Token: d.Hash, Windows: d.Pacing.Windows, PausePeriod: d.Policy.PausePeriod, WaveSize: d.Pacing.WaveSize}
	for _, o := range d.Observations {
		if o.Counts {
			r.Counted = append(r.Counted, o.SourceRef)
		}
	}
	counted, err := sources.Read(r.Counted)
	if err != nil {
		return Restart{}, fmt.Errorf("read the sources: %w", err)
	}
	for _, src := range counted {
		if src.WaveSize > 0 && (r.WaveSize == 0 || src.WaveSize < r.WaveSize) {
			r.WaveSize = src.WaveSize
		}
	}
	return r, nil
}
