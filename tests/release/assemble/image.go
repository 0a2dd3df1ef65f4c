package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The OCI image layout and image index (image-spec v1.1), as far as the release reads
// and writes them.

const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaInToto   = "application/vnd.in-toto+json"
	// The annotations BuildKit gives an attestation in an image index, which
	// registries, docker and containerd read: a manifest of platform unknown/unknown
	// that refers to the image it attests.
	refType      = "vnd.docker.reference.type"
	refDigest    = "vnd.docker.reference.digest"
	spdxDocument = "https://spdx.dev/Document"
)

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type index struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType,omitempty"`
	Manifests     []descriptor      `json:"manifests"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

// layout is an OCI image layout directory.
type layout string

func (l layout) blobPath(digest string) string {
	return filepath.Join(string(l), "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
}

func (l layout) readJSON(digest string, v any) error {
	b, err := os.ReadFile(l.blobPath(digest))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// writeBlob stores b and returns its descriptor, of mediaType.
func (l layout) writeBlob(mediaType string, b []byte) (descriptor, error) {
	sum := sha256.Sum256(b)
	d := descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(b))}
	return d, os.WriteFile(l.blobPath(d.Digest), b, 0o644)
}

func (l layout) writeJSON(mediaType string, v any) (descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return descriptor{}, err
	}
	return l.writeBlob(mediaType, b)
}

// attachSBOMs attaches to the image index ko wrote into the layout the SBOM of each
// of its images, as an in-toto statement of SPDX in an attestation manifest, and names
// the index ref in the layout's index.json: io.containerd.image.name for ctr images
// import, org.opencontainers.image.ref.name (its tag) for skopeo and crane. It
// returns the new index's digest.
func attachSBOMs(dir, sbomDir, ref string) (string, error) {
	l := layout(dir)
	var top index
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(b, &top); err != nil {
		return "", err
	}
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != mediaIndex {
		return "", fmt.Errorf("%s: want one image index, as ko writes a multi-platform build, got %+v", dir, top.Manifests)
	}
	old := top.Manifests[0].Digest
	var idx index
	if err := l.readJSON(old, &idx); err != nil {
		return "", err
	}
	name := ref[:strings.LastIndex(ref, ":")]
	var attestations []descriptor
	for _, m := range idx.Manifests {
		if m.Platform == nil || m.MediaType != mediaManifest {
			return "", fmt.Errorf("index %s: an entry without a platform: %+v", old, m)
		}
		// ko's name for a platform's SBOM: the binary's name and the platform.
		spdx, err := os.ReadFile(filepath.Join(sbomDir, fmt.Sprintf("confighash-%s-%s.spdx.json", m.Platform.OS, m.Platform.Architecture)))
		if err != nil {
			return "", err
		}
		a, err := l.attestation(name, m, json.RawMessage(spdx))
		if err != nil {
			return "", err
		}
		attestations = append(attestations, a)
	}
	idx.Manifests = append(idx.Manifests, attestations...)
	if idx.MediaType == "" {
		idx.MediaType = mediaIndex
	}
	d, err := l.writeJSON(mediaIndex, idx)
	if err != nil {
		return "", err
	}
	if err := os.Remove(l.blobPath(old)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	d.Annotations = map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref[strings.LastIndex(ref, ":")+1:]}
	top.Manifests = []descriptor{d}
	if b, err = json.Marshal(top); err != nil {
		return "", err
	}
	return d.Digest, os.WriteFile(filepath.Join(dir, "index.json"), b, 0o644)
}

// attestation stores the attestation manifest of the SBOM of image m of name, and
// returns its descriptor in the index.
func (l layout) attestation(name string, m descriptor, spdx json.RawMessage) (descriptor, error) {
	statement := map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []any{map[string]any{"name": "pkg:docker/" + name + "?platform=" + m.Platform.OS + "%2F" + m.Platform.Architecture, "digest": map[string]string{"sha256": strings.TrimPrefix(m.Digest, "sha256:")}}},
		"predicateType": spdxDocument,
		"predicate":     spdx,
	}
	layer, err := l.writeJSON(mediaInToto, statement)
	if err != nil {
		return descriptor{}, err
	}
	layer.Annotations = map[string]string{"in-toto.io/predicate-type": spdxDocument}
	config, err := l.writeJSON(mediaConfig, map[string]any{
		"architecture": "unknown", "os": "unknown", "config": map[string]any{},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layer.Digest}},
	})
	if err != nil {
		return descriptor{}, err
	}
	d, err := l.writeJSON(mediaManifest, manifest{SchemaVersion: 2, MediaType: mediaManifest, Config: config, Layers: []descriptor{layer}})
	if err != nil {
		return descriptor{}, err
	}
	d.Platform = &platform{Architecture: "unknown", OS: "unknown"}
	d.Annotations = map[string]string{refType: "attestation-manifest", refDigest: m.Digest}
	return d, nil
}
