package confighash

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func cmKeyEnv(name, key string, optional *bool) corev1.EnvVar {
	return corev1.EnvVar{Name: "E", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: optional}}}
}

func secretKeyEnv(name, key string, optional *bool) corev1.EnvVar {
	return corev1.EnvVar{Name: "E", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: optional}}}
}

func items(keys ...string) []corev1.KeyToPath {
	out := make([]corev1.KeyToPath, len(keys))
	for i, k := range keys {
		out[i] = corev1.KeyToPath{Key: k, Path: k}
	}
	return out
}

func podTemplate(spec corev1.PodSpec) *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{Spec: spec}
}

func withContainer(c corev1.Container) corev1.PodSpec {
	c.Name, c.Image = "app", "app:1"
	return corev1.PodSpec{Containers: []corev1.Container{c}}
}

func withVolume(v corev1.VolumeSource) corev1.PodSpec {
	return corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: v}}}
}

func TestReferences(t *testing.T) {
	cmA := SourceRef{ConfigMap, "a"}
	secA := SourceRef{Secret, "a"}
	tests := []struct {
		name string
		spec corev1.PodSpec
		want []Reference
	}{
		{
			"a configMapKeyRef env var uses one key of a required ConfigMap",
			withContainer(corev1.Container{Env: []corev1.EnvVar{cmKeyEnv("a", "k", nil)}}),
			[]Reference{{SourceRef: cmA, Keys: []string{"k"}}},
		},
		{
			"a secretKeyRef env var marked optional uses one key of an optional Secret",
			withContainer(corev1.Container{Env: []corev1.EnvVar{secretKeyEnv("a", "k", ptr.To(true))}}),
			[]Reference{{SourceRef: secA, Keys: []string{"k"}, Optional: true}},
		},
		{
			"a whole-object envFrom use selects every key",
			withContainer(corev1.Container{EnvFrom: []corev1.EnvFromSource{
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "a"}}},
				{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "a"}, Optional: ptr.To(false)}},
			}}),
			[]Reference{{SourceRef: cmA, AllKeys: true}, {SourceRef: secA, AllKeys: true}},
		},
		{
			"init containers count like containers",
			corev1.PodSpec{InitContainers: []corev1.Container{{Name: "init", Env: []corev1.EnvVar{cmKeyEnv("a", "k", nil)}}}},
			[]Reference{{SourceRef: cmA, Keys: []string{"k"}}},
		},
		{
			"a ConfigMap volume without items uses the whole object",
			withVolume(corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "a"}}}),
			[]Reference{{SourceRef: cmA, AllKeys: true}},
		},
		{
			"a Secret volume with items uses only the listed keys, sorted",
			withVolume(corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "a", Items: items("z", "b"), Optional: ptr.To(true)}}),
			[]Reference{{SourceRef: secA, Keys: []string{"b", "z"}, Optional: true}},
		},
		{
			"projected volumes count both kinds, with and without items",
			withVolume(corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "a"}, Items: items("k")}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "a"}}},
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
			}}}),
			[]Reference{{SourceRef: cmA, Keys: []string{"k"}}, {SourceRef: secA, AllKeys: true}},
		},
		{
			"uses of one source merge: keys union, and required wins over optional",
			corev1.PodSpec{
				Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{cmKeyEnv("a", "y", ptr.To(true)), cmKeyEnv("a", "x", nil), cmKeyEnv("a", "y", nil)}}},
				Volumes:    []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "a"}, Items: items("z"), Optional: ptr.To(true)}}}},
			},
			[]Reference{{SourceRef: cmA, Keys: []string{"x", "y", "z"}}},
		},
		{
			"a source is optional only when every use is optional",
			withContainer(corev1.Container{Env: []corev1.EnvVar{cmKeyEnv("a", "x", ptr.To(true)), cmKeyEnv("a", "y", ptr.To(true))}}),
			[]Reference{{SourceRef: cmA, Keys: []string{"x", "y"}, Optional: true}},
		},
		{
			"a whole-object use wins over key uses of the same source",
			corev1.PodSpec{Containers: []corev1.Container{{Name: "c",
				Env:     []corev1.EnvVar{cmKeyEnv("a", "x", nil)},
				EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "a"}}}},
			}}},
			[]Reference{{SourceRef: cmA, AllKeys: true}},
		},
		{
			"a ConfigMap and a Secret of the same name are different sources",
			withContainer(corev1.Container{Env: []corev1.EnvVar{secretKeyEnv("a", "k", nil), cmKeyEnv("a", "k", nil)}}),
			[]Reference{{SourceRef: cmA, Keys: []string{"k"}}, {SourceRef: secA, Keys: []string{"k"}}},
		},
		{
			"imagePullSecrets, plain env values and other volumes do not count",
			corev1.PodSpec{
				ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}},
				Containers:       []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{Name: "PLAIN", Value: "v"}, {Name: "F", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
				Volumes:          []corev1.Volume{{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			},
			[]Reference{},
		},
		{
			"a use without a name is skipped",
			withContainer(corev1.Container{Env: []corev1.EnvVar{cmKeyEnv("", "k", nil)}}),
			[]Reference{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := References(podTemplate(tt.spec))
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("References() =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

func TestReferencesOfNilTemplate(t *testing.T) {
	if got := References(nil); got != nil {
		t.Fatalf("References(nil) = %v, want nil", got)
	}
}
