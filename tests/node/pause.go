package node

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// writePauseImage writes the sandbox image as an OCI layout archive, which
// `ctr images import` reads: one layer holding the pause binary, as Kubernetes'
// own image has it (/pause, user 65535).
func writePauseImage(archive, pauseBinary string) error {
	binary, err := os.ReadFile(pauseBinary)
	if err != nil {
		return err
	}
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	if err := lw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(binary)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := lw.Write(binary); err != nil {
		return err
	}
	if err := lw.Close(); err != nil {
		return err
	}

	blobs := map[string][]byte{}
	add := func(data []byte) string {
		sum := sha256.Sum256(data)
		digest := "sha256:" + hex.EncodeToString(sum[:])
		blobs[digest] = data
		return digest
	}
	layerDigest := add(layer.Bytes())
	config, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/pause"}, "User": "65535:65535"},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	configDigest := add(config)
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": configDigest, "size": len(config)},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": layer.Len()}},
	})
	manifestDigest := add(manifest)
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifestDigest, "size": len(manifest),
			"annotations": map[string]string{"io.containerd.image.name": PauseImage, "org.opencontainers.image.ref.name": PauseImage[strings.LastIndex(PauseImage, ":")+1:]},
		}},
	})

	f, err := os.Create(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	w := tar.NewWriter(f)
	files := []struct {
		name string
		data []byte
	}{{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)}, {"index.json", index}}
	for digest, data := range blobs {
		files = append(files, struct {
			name string
			data []byte
		}{"blobs/sha256/" + strings.TrimPrefix(digest, "sha256:"), data})
	}
	for _, file := range files {
		if err := w.WriteHeader(&tar.Header{Name: file.name, Mode: 0o644, Size: int64(len(file.data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := w.Write(file.data); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("write %s: %w", archive, err)
	}
	return f.Close()
}
