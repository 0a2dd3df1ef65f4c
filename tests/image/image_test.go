// Package image checks that the image make image builds without a Docker engine and
// the one the Dockerfile builds with one agree: base, user, entrypoint, binary path.
package image

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// dockerfile is what the final stage of the Dockerfile says.
type dockerfile struct {
	base, user, binary string
	entrypoint         []string
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var d dockerfile
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "FROM":
			d = dockerfile{base: f[1]} // the last stage is the image
		case "USER":
			d.user = f[1]
		case "COPY":
			d.binary = f[len(f)-1]
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "ENTRYPOINT ")), &d.entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT is not in exec form: %v", err)
			}
		}
	}
	return d
}

// buildScriptBase is the base build.sh uses where its registry answers.
func buildScriptBase(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("build.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`BASE_IMAGE="\$\{BASE_IMAGE:-([^}]+)\}"`).FindSubmatch(data)
	if m == nil {
		t.Fatal("build.sh sets no default BASE_IMAGE")
	}
	return string(m[1])
}

func TestImageAndDockerfileAgree(t *testing.T) {
	if testing.Short() {
		t.Skip("-short mode builds no image")
	}
	want := readDockerfile(t)
	if base := buildScriptBase(t); base != want.base {
		t.Errorf("build.sh's base %s, the Dockerfile's %s", base, want.base)
	}
	if !strings.Contains(want.base, "@sha256:") {
		t.Errorf("the Dockerfile's base %s is not pinned by digest", want.base)
	}

	out := t.TempDir()
	cmd := exec.Command("./build.sh", out)
	cmd.Env = append(os.Environ(), "VERSION=image-test")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, b)
	}
	config, files := readImage(t, filepath.Join(out, "confighash.tar"))
	if config.User != want.user {
		t.Errorf("image user %q, Dockerfile USER %q", config.User, want.user)
	}
	if !slices.Equal(config.Entrypoint, want.entrypoint) {
		t.Errorf("image entrypoint %q, Dockerfile ENTRYPOINT %q", config.Entrypoint, want.entrypoint)
	}
	if want.binary != want.entrypoint[0] {
		t.Errorf("the Dockerfile copies the binary to %s but runs %s", want.binary, want.entrypoint[0])
	}
	if mode, ok := files[strings.TrimPrefix(want.binary, "/")]; !ok || mode&0o111 == 0 {
		t.Errorf("the image has no executable %s (mode %o)", want.binary, mode)
	}
	if _, err := os.Stat(filepath.Join(out, "confighash.spdx.json")); err != nil {
		t.Errorf("no SBOM: %v", err)
	}
}

type imageConfig struct {
	User       string
	Entrypoint []string
}

// readImage reads an image archive in docker save form: its config and the mode of
// every regular file in its layers.
func readImage(t *testing.T, archive string) (imageConfig, map[string]int64) {
	t.Helper()
	entries := readTar(t, archive)
	var manifest []struct {
		Config string
		Layers []string
	}
	if err := json.Unmarshal(entries["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json: %v (%d images)", err, len(manifest))
	}
	var config struct{ Config imageConfig }
	if err := json.Unmarshal(entries[manifest[0].Config], &config); err != nil {
		t.Fatalf("image config: %v", err)
	}
	files := map[string]int64{}
	for _, layer := range manifest[0].Layers {
		zr, err := gzip.NewReader(strings.NewReader(string(entries[layer])))
		if err != nil {
			t.Fatalf("layer %s: %v", layer, err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("layer %s: %v", layer, err)
			}
			if h.Typeflag == tar.TypeReg {
				files[strings.TrimPrefix(h.Name, "/")] = h.Mode
			}
		}
	}
	return config.Config, files
}

func readTar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if entries[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}
