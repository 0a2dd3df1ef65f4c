package confighash

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A Job's explanation says what the watcher does to a Job: it recreates it, never
// touches it, and leaves one it never hashed alone.
func TestExplainSaysAJobIsRecreated(t *testing.T) {
	key, _ := NewKey([]byte(strings.Repeat("k", 32)))
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app",
		EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}}}
	job := &Workload{Kind: Job, Namespace: "shop", Name: "migrate", Annotations: map[string]string{AnnotationInject: "true"}, Template: tmpl}
	source := func(v string) map[SourceRef]Source {
		cm := SourceOfConfigMap(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "shop"}, Data: map[string]string{"k": v}})
		return map[SourceRef]Source{cm.SourceRef: cm}
	}
	in := ExplainInput{Vocabulary: Vocabulary{}, Workload: job, Mode: ModeOptedIn, Old: source("1"), Sources: source("2"), Key: key, HaveKey: true}
	if e := Explain(in); e.Verdict != VerdictRollout || !strings.Contains(e.Why, "recreates the Job") {
		t.Errorf("a changed Job: %s, %q; want a rollout that recreates it", e.Verdict, e.Why)
	}
	in.Old = nil
	if e := Explain(in); e.Verdict != VerdictNoRollout || !strings.Contains(e.Why, "never recreated") {
		t.Errorf("a Job never hashed: %s, %q; want nothing to roll", e.Verdict, e.Why)
	}
}
