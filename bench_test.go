package confighash

import (
	"bytes"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// benchWorld builds n ConfigMaps and n Secrets of keys keys of size bytes each, and a pod
// template that uses every one: ConfigMaps by envFrom, Secrets by volume.
func benchWorld(n, keys, size int) ([]*corev1.ConfigMap, []*corev1.Secret, *corev1.PodTemplateSpec) {
	var cms []*corev1.ConfigMap
	var secs []*corev1.Secret
	ctr := corev1.Container{Name: "app"}
	var vols []corev1.Volume
	for i := range n {
		name := fmt.Sprintf("src-%d", i)
		data := map[string]string{}
		sdata := map[string][]byte{}
		for k := range keys {
			v := bytes.Repeat([]byte{byte('a' + k)}, size)
			data[fmt.Sprintf("key-%d", k)] = string(v)
			sdata[fmt.Sprintf("key-%d", k)] = v
		}
		cms = append(cms, configMap(name, data, nil))
		secs = append(secs, secret(name, sdata))
		ctr.EnvFrom = append(ctr.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}})
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}})
	}
	return cms, secs, &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{ctr}, Volumes: vols}}
}

// admit is the webhook's path from objects with values to the hash.
func admit(cms []*corev1.ConfigMap, secs []*corev1.Secret, tmpl *corev1.PodTemplateSpec) string {
	sources := make(map[SourceRef]Source, len(cms)+len(secs))
	for _, cm := range cms {
		sources[SourceRef{ConfigMap, cm.Name}] = SourceOfConfigMap(cm)
	}
	for _, s := range secs {
		sources[SourceRef{Secret, s.Name}] = SourceOfSecret(s)
	}
	return created(tmpl, sources).Hash
}

// BenchmarkAdmit10Sources: 10 sources (5 ConfigMaps, 5 Secrets) of 10 keys x 1 KiB,
// hashed from their values, as on a live read.
func BenchmarkAdmit10Sources(b *testing.B) {
	cms, secs, tmpl := benchWorld(5, 10, 1024)
	b.ReportAllocs()
	for b.Loop() {
		admit(cms, secs, tmpl)
	}
}

// BenchmarkAdmit10SourcesFromDigests: the same, from cached per-key digests (the
// webhook's cache and the watcher), so no value is hashed.
func BenchmarkAdmit10SourcesFromDigests(b *testing.B) {
	cms, secs, tmpl := benchWorld(5, 10, 1024)
	sources := map[SourceRef]Source{}
	for _, cm := range cms {
		sources[SourceRef{ConfigMap, cm.Name}] = SourceOfConfigMap(cm)
	}
	for _, s := range secs {
		sources[SourceRef{Secret, s.Name}] = SourceOfSecret(s)
	}
	b.ReportAllocs()
	for b.Loop() {
		created(tmpl, sources)
	}
}

// BenchmarkAdmit1MiBSecret: one Secret with a single 1 MiB value.
func BenchmarkAdmit1MiBSecret(b *testing.B) {
	sec := secret("big", map[string][]byte{"blob": bytes.Repeat([]byte{'x'}, 1<<20)})
	tmpl := podTemplate(withVolume(corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "big"}}))
	b.ReportAllocs()
	b.SetBytes(1 << 20)
	for b.Loop() {
		admit(nil, []*corev1.Secret{sec}, tmpl)
	}
}
