package release

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"
)

// What a release says of itself: its Chart.yaml for Artifact Hub, its provenance, its
// krew manifest; and the tools that read them, built from the Go module proxy.

const (
	krewVersion  = "v0.4.3"
	craneVersion = "v0.21.7"
)

// goTool returns the path of pkg's command at version, installed into the cache once
// per machine, as release.sh installs its tools.
func goTool(t *testing.T, name, pkg, version string) string {
	t.Helper()
	cache := os.Getenv("CONFIGHASH_CACHE")
	if cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(dir, "confighash")
	}
	bin := filepath.Join(cache, "tools", name+"-"+version)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	tmp, err := os.MkdirTemp(filepath.Join(cache, "tools"), "tmp.")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	install := exec.CommandContext(t.Context(), "go", "install", pkg+"@"+version)
	install.Env = append(os.Environ(), "GOBIN="+tmp)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install %s@%s: %v\n%s", pkg, version, err, out)
	}
	if err := os.Rename(filepath.Join(tmp, filepath.Base(pkg)), bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// checkArtifactHub checks the chart's Artifact Hub annotations: its image, for both
// architectures, its changes, its links.
func checkArtifactHub(t *testing.T, chartYAML []byte, tag string) {
	t.Helper()
	var chart struct{ Annotations map[string]string }
	if err := sigsyaml.Unmarshal(chartYAML, &chart); err != nil {
		t.Fatal(err)
	}
	var images []struct {
		Image     string
		Platforms []string
	}
	var changes []struct{ Kind, Description string }
	var links []struct{ Name, URL string }
	for key, v := range map[string]any{"artifacthub.io/images": &images, "artifacthub.io/changes": &changes, "artifacthub.io/links": &links} {
		if err := sigsyaml.Unmarshal([]byte(chart.Annotations[key]), v); err != nil {
			t.Errorf("Chart.yaml's %s: %v", key, err)
		}
	}
	if len(images) != 1 || images[0].Image != tag || !slices.Equal(images[0].Platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("artifacthub.io/images: %+v, want %s for linux/amd64 and linux/arm64", images, tag)
	}
	kinds := []string{"added", "changed", "deprecated", "removed", "fixed", "security"}
	for _, c := range changes {
		if !slices.Contains(kinds, c.Kind) || c.Description == "" || strings.ContainsAny(c.Description, "*`") {
			t.Errorf("artifacthub.io/changes: %+v is not a change Artifact Hub shows", c)
		}
	}
	if len(changes) < 3 || len(links) == 0 || chart.Annotations["artifacthub.io/prerelease"] != "false" {
		t.Errorf("Chart.yaml's annotations: %d changes, %d links, prerelease %q; want the release's changes, links, not a pre-release",
			len(changes), len(links), chart.Annotations["artifacthub.io/prerelease"])
	}
}

// checkProvenance checks that the release's provenance is an in-toto statement of SLSA
// provenance naming every other file of dist by its sha256 and the image index by
// tag and digest, built from this commit by this Go with make release.
func checkProvenance(t *testing.T, dist, version, tag, index string) {
	t.Helper()
	var statement struct {
		Type          string `json:"_type"`
		PredicateType string
		Subject       []struct {
			Name   string
			Digest map[string]string
		}
		Predicate struct {
			BuildDefinition struct {
				ExternalParameters   map[string]string
				InternalParameters   map[string]string
				ResolvedDependencies []struct {
					URI    string
					Digest map[string]string
				}
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(dist, "provenance.intoto.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &statement); err != nil || statement.Type != "https://in-toto.io/Statement/v1" || statement.PredicateType != "https://slsa.dev/provenance/v1" {
		t.Fatalf("provenance.intoto.json is not an in-toto statement of SLSA provenance v1: %v", err)
	}
	named := map[string]string{}
	for _, s := range statement.Subject {
		named[s.Name] = s.Digest["sha256"]
	}
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "provenance.intoto.json" || e.Name() == "checksums.txt" {
			continue
		}
		if got := sha256File(t, filepath.Join(dist, e.Name())); named[e.Name()] != got {
			t.Errorf("the provenance names %s with sha256 %q, the file's is %s", e.Name(), named[e.Name()], got)
		}
		delete(named, e.Name())
	}
	if "sha256:"+named[tag] != index {
		t.Errorf("the provenance names %s as sha256 %q, want the index %s", tag, named[tag], index)
	}
	delete(named, tag)
	if len(named) > 0 {
		t.Errorf("the provenance names what the release does not hold: %v", named)
	}
	commit, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	def := statement.Predicate.BuildDefinition
	if len(def.ResolvedDependencies) != 1 || def.ResolvedDependencies[0].Digest["gitCommit"] != strings.TrimSpace(string(commit)) ||
		def.InternalParameters["go"] != runtime.Version() || def.ExternalParameters["command"] != "make release VERSION="+version {
		t.Errorf("the provenance's build: %+v; want commit %s, Go %s, make release VERSION=%s", def, strings.TrimSpace(string(commit)), runtime.Version(), version)
	}
}

// checkKrewManifest checks the krew manifest as krew-index checks a plugin submitted to
// it (validate-krew-manifest, on the manifest named after the plugin: its schema, and an install
// for each platform with kubectl krew, found in bins, which must extract a LICENSE),
// downloading from page, and that it names each archive of the release by its sha256.
func checkKrewManifest(t *testing.T, dist, version, page string, bins ...string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "plugins")
	b, err := os.ReadFile(filepath.Join(dist, "confighash.krew.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "confighash.yaml"), bytes.ReplaceAll(b, []byte(releasePage), []byte(page)), 0o644); err != nil {
		t.Fatal(err)
	}
	validate := exec.Command(goTool(t, "validate-krew-manifest", "sigs.k8s.io/krew/cmd/validate-krew-manifest", krewVersion), "-manifest", filepath.Join(dir, "confighash.yaml"))
	validate.Env = []string{"PATH=" + strings.Join(append(bins, os.Getenv("PATH")), string(os.PathListSeparator)), "HOME=" + t.TempDir()}
	if out, err := validate.CombinedOutput(); err != nil {
		t.Fatalf("validate-krew-manifest: %v\n%s", err, out)
	}
	var plugin struct {
		Spec struct {
			Version   string
			Platforms []struct{ URI, Sha256 string }
		}
	}
	if err := sigsyaml.Unmarshal(b, &plugin); err != nil {
		t.Fatal(err)
	}
	sums := checksums(t, filepath.Join(dist, "checksums.txt"))
	for _, p := range plugin.Spec.Platforms {
		file := strings.TrimPrefix(p.URI, releasePage+version+"/")
		if sums[file] == "" || sums[file] != p.Sha256 {
			t.Errorf("the krew manifest downloads %s with sha256 %s; the release's checksum of %q is %q", p.URI, p.Sha256, file, sums[file])
		}
	}
	if plugin.Spec.Version != version || len(plugin.Spec.Platforms) == 0 {
		t.Errorf("the krew manifest: version %q, %d platforms; want %s, every archive", plugin.Spec.Version, len(plugin.Spec.Platforms), version)
	}
}
