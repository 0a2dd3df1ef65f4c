package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
)

// Restart in place: a pod whose pod template asks for it (confighash.AnnotationRestart)
// is admitted at its creation too. It gets the restarter, the label the watcher
// watches such pods by, and the token of the data it starts with: the watcher restarts
// it when the data that counts for it moves on from that token.

// admitPod returns the patch that makes a pod restartable in place: the restarter and
// its volume, LabelRestart (the mode: in-place, or reload where a reload reaches all
// its data) and the restart token. A pod that does not ask, or cannot be restarted in
// place (pinned, opted out, no restarter image), is left as it is.
// Its sources are read in the request's namespace, the one the guard checked.
func (m *Mutator) admitPod(ctx context.Context, namespace string, raw []byte) (ops []patchOp, warnings []string, err error) {
	pod := &corev1.Pod{}
	if err := json.Unmarshal(raw, pod); err != nil {
		return nil, nil, fmt.Errorf("the pod could not be read: %w", err)
	}
	if pod.Namespace != namespace {
		return nil, nil, nil // a forged review: the API server never names another
	}
	state := m.cfg.Vocabulary.Read(confighash.PodWorkload(pod))
	for _, p := range state.Problems {
		warnings = append(warnings, warningPrefix+p.Error())
	}
	if !state.Policy.Restart.PodByPod() {
		return nil, warnings, nil
	}
	if m.cfg.RestarterImage == "" {
		return nil, append(warnings, warningPrefix+"not restartable in place: restart in place is off in this install (the components say why at start); "+rollsInstead(pod)), nil
	}
	sources := &admissionSources{ctx: ctx, reader: m.cfg.Reader, namespace: pod.Namespace}
	restart, err := confighash.RestartOf(confighash.Input{Key: m.cfg.Key, Namespace: pod.Namespace, State: state, Mode: m.mode}, sources)
	switch {
	case errors.Is(err, confighash.ErrNotInPlace):
		return nil, warnings, nil
	case err != nil:
		return nil, warnings, fmt.Errorf("could not %w; the pod is not restartable in place", err)
	}
	// Reinvoked after another webhook: what it has of ours stays as it is.
	if slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == confighash.RestarterName }) {
		return mapEntryOps("/metadata/annotations", pod.Annotations, confighash.AnnotationRestartToken, restart.Token), warnings, nil
	}
	ctr, vol := confighash.Restarter(m.cfg.RestarterImage)
	volumes, mode := []corev1.Volume{vol}, confighash.RestartInPlace
	if state.Policy.Restart == confighash.RestartReload {
		counted := func(ref confighash.SourceRef) bool { return slices.Contains(restart.Counted, ref) }
		if reloaded, why := confighash.ReloadVolumes(&pod.Spec, counted); why != "" {
			warnings = append(warnings, warningPrefix+"restarted in place, not reloaded: "+why)
		} else {
			mode = confighash.RestartReload
			volumes = append(volumes, confighash.Reloading(&ctr, state.Policy.Reload, reloaded))
			if state.Policy.Reload.Signal != "" && (pod.Spec.ShareProcessNamespace == nil || !*pod.Spec.ShareProcessNamespace) {
				ops = append(ops, patchOp{"add", "/spec/shareProcessNamespace", true}) // to signal the app
			}
		}
	}
	ops = append(ops, mapEntryOps("/metadata/labels", pod.Labels, confighash.LabelRestart, mode.String())...)
	ops = append(ops, mapEntryOps("/metadata/annotations", pod.Annotations, confighash.AnnotationRestartToken, restart.Token)...)
	ops = append(ops, appendOp("/spec/initContainers", len(pod.Spec.InitContainers), ctr))
	for i, v := range volumes {
		ops = append(ops, appendOp("/spec/volumes", len(pod.Spec.Volumes)+i, v))
	}
	return ops, warnings, nil
}

// rollsInstead says what a change of the data of a pod not restartable in place does:
// the pods of the built-in kinds' controllers roll with their workload's pod
// template; those of another owner, or of none, are left as they are. They are not
// evicted: an eviction's admission shows the Eviction, not the pod, so no policy could
// hold the watcher's evictions to the pods labelled for it (rule 11).
func rollsInstead(pod *corev1.Pod) string {
	owner := metav1.GetControllerOf(pod)
	switch {
	case owner == nil:
		return "a bare pod, nothing restarts it for a change of its data"
	case templated[owner.Kind]:
		return "its workload rolls instead"
	}
	return fmt.Sprintf("its owner %s/%s has no pod template confighash rolls, so nothing restarts it for a change of its data", owner.Kind, owner.Name)
}

// templated are the kinds of the controllers whose pods a workload's pod template
// rolls: a ReplicaSet's Deployment or Rollout, a StatefulSet, a DaemonSet, a Job.
var templated = map[string]bool{"ReplicaSet": true, "StatefulSet": true, "DaemonSet": true, "Job": true}

// mapEntryOps sets key to value in the map of strings at path, adding the map whole
// when it is absent: a JSON patch cannot add a member to a map that is not there.
func mapEntryOps(path string, m map[string]string, key, value string) []patchOp {
	switch {
	case m == nil:
		return []patchOp{{"add", path, map[string]string{key: value}}}
	case m[key] == value:
		return nil
	}
	return []patchOp{{"add", path + "/" + pointerEscaper.Replace(key), value}}
}

// appendOp appends value to the array at path, of length n, or adds the array.
func appendOp(path string, n int, value any) patchOp {
	if n == 0 {
		return patchOp{"add", path, []any{value}}
	}
	return patchOp{"add", path + "/-", value}
}
