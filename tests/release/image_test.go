package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

// The OCI image index of a release, as its tests read it.

type ociDescriptor struct {
	MediaType   string
	Digest      string
	Platform    *struct{ Architecture, OS string }
	Annotations map[string]string
}

type ociIndex struct {
	Manifests []ociDescriptor
	// digest is the index's own, and blobs the layout's blobs by digest.
	digest string
	blobs  map[string][]byte
}

type ociManifest struct {
	Layers []ociDescriptor
}

// checkImageIndex checks the OCI layout files (a release's image, untarred): its one
// entry the index, named tag for containerd and plain for skopeo and crane; the index
// an image for linux/amd64 and for linux/arm64, each with an attestation of its SPDX
// SBOM; the arm64 image's binary an arm64 ELF stamped with the version. It returns
// the index.
func checkImageIndex(t *testing.T, files map[string][]byte, tag, plain, version, revision string) ociIndex {
	t.Helper()
	blobs := map[string][]byte{}
	for name, b := range files {
		if hex, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			blobs["sha256:"+hex] = b
			if got := digestOf(b); got != "sha256:"+hex {
				t.Errorf("blob %s holds data of digest %s", name, got)
			}
		}
	}
	var top ociIndex
	if err := json.Unmarshal(files["index.json"], &top); err != nil || len(top.Manifests) != 1 || files["oci-layout"] == nil {
		t.Fatalf("not an OCI layout of one entry: %v, index.json %s", err, files["index.json"])
	}
	entry := top.Manifests[0]
	if entry.MediaType != "application/vnd.oci.image.index.v1+json" || entry.Annotations["io.containerd.image.name"] != tag ||
		entry.Annotations["org.opencontainers.image.ref.name"] != plain {
		t.Errorf("the layout's entry %+v: want an image index named %s (tag %s)", entry, tag, plain)
	}
	index := ociIndex{digest: entry.Digest, blobs: blobs}
	if err := json.Unmarshal(blobs[entry.Digest], &index); err != nil {
		t.Fatalf("the image index %s: %v", entry.Digest, err)
	}
	images := map[string]string{} // digest to architecture
	attested := map[string]bool{}
	for _, m := range index.Manifests {
		switch {
		case m.Platform != nil && m.Platform.OS == "linux":
			images[m.Digest] = m.Platform.Architecture
		case m.Annotations["vnd.docker.reference.type"] == "attestation-manifest":
			subject := checkSBOMAttestation(t, blobs, m)
			if subject != m.Annotations["vnd.docker.reference.digest"] {
				t.Errorf("the attestation %s is of %s, says it refers to %s", m.Digest, subject, m.Annotations["vnd.docker.reference.digest"])
			}
			attested[subject] = true
		default:
			t.Errorf("the index lists %+v, neither an image nor an attestation", m)
		}
	}
	var archs []string
	for digest, arch := range images {
		archs = append(archs, arch)
		if !attested[digest] {
			t.Errorf("the %s image has no SBOM attestation", arch)
		}
		checkImageBinary(t, blobs, digest, arch, version, revision)
	}
	if slices.Sort(archs); !slices.Equal(archs, []string{"amd64", "arm64"}) || len(attested) != 2 {
		t.Errorf("the index holds images for %q and %d attestations, want amd64 and arm64, and one each", archs, len(attested))
	}
	return index
}

// checkSBOMAttestation checks an attestation manifest holds an in-toto statement of
// an SPDX document, and returns the digest of its subject.
func checkSBOMAttestation(t *testing.T, blobs map[string][]byte, d ociDescriptor) string {
	t.Helper()
	var m ociManifest
	if err := json.Unmarshal(blobs[d.Digest], &m); err != nil || len(m.Layers) != 1 || m.Layers[0].MediaType != "application/vnd.in-toto+json" {
		t.Fatalf("the attestation %s: %v, %s", d.Digest, err, blobs[d.Digest])
	}
	var statement struct {
		Type          string `json:"_type"`
		PredicateType string
		Subject       []struct{ Digest map[string]string }
		Predicate     struct{ SPDXVersion string }
	}
	if err := json.Unmarshal(blobs[m.Layers[0].Digest], &statement); err != nil || statement.Type != "https://in-toto.io/Statement/v1" ||
		statement.PredicateType != "https://spdx.dev/Document" || statement.Predicate.SPDXVersion == "" || len(statement.Subject) != 1 {
		t.Fatalf("the attestation %s does not hold an SPDX SBOM as an in-toto statement: %v", d.Digest, err)
	}
	return "sha256:" + statement.Subject[0].Digest["sha256"]
}

// checkImageBinary checks that the image's /ko-app/confighash is an ELF of arch whose
// build stamped version and revision into it, as the release's binaries: on this
// machine's architecture, it says so; on the other, whose binary cannot run here (and
// -trimpath keeps -ldflags out of its build info), it holds their text, as the one
// built beside it with the same flags.
func checkImageBinary(t *testing.T, blobs map[string][]byte, digest, arch, version, revision string) {
	t.Helper()
	var m ociManifest
	if err := json.Unmarshal(blobs[digest], &m); err != nil {
		t.Fatal(err)
	}
	var binary []byte
	for _, l := range m.Layers {
		if b, err := fileInLayer(blobs[l.Digest], "ko-app/confighash"); err != nil {
			t.Fatal(err)
		} else if b != nil {
			binary = b
		}
	}
	f, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		t.Fatalf("the %s image's /ko-app/confighash is not an ELF: %v", arch, err)
	}
	info, err := buildinfo.Read(bytes.NewReader(binary))
	if err != nil {
		t.Fatal(err)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	if f.Machine != machines[arch] || !slices.Contains(info.Settings, debug.BuildSetting{Key: "GOARCH", Value: arch}) || !bytes.Contains(binary, []byte(version)) || !bytes.Contains(binary, []byte(revision)) {
		t.Errorf("the %s image's binary: machine %s, built with %v; want a %s ELF holding its version %s and revision %s", arch, f.Machine, info.Settings, arch, version, revision)
	}
	if arch != runtime.GOARCH {
		return
	}
	path := filepath.Join(t.TempDir(), "confighash")
	if err := os.WriteFile(path, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "version").CombinedOutput()
	if want := "confighash " + version + " (revision " + revision + ", "; err != nil || !strings.HasPrefix(string(out), want) {
		t.Errorf("the %s image's confighash version: %v, %q; want it to begin %q, as the release's binaries", arch, err, out, want)
	}
}

// fileInLayer returns the file name of a gzipped layer, nil if it holds none.
func fileInLayer(layer []byte, name string) ([]byte, error) {
	z, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(z)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if strings.TrimPrefix(h.Name, "/") == name {
			return io.ReadAll(tr)
		}
	}
}
