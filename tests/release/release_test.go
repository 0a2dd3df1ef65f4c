// Package release tests what make release builds (release.sh), and that docs/install.md's
// release install works with it: the commands of its marked blocks run as written against
// the local control plane, with the release's files served in place of the release page.
package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/confighash/confighash/tests/cluster"
)

var testCluster *cluster.Cluster

func TestMain(m *testing.M) { cluster.Main(m, &testCluster) }

// releasePage is where docs/install.md downloads a release's files from.
const releasePage = "https://github.com/confighash/confighash/releases/download/"

// image is the repository of the image the release names.
const image = "ghcr.io/confighash/confighash"

func TestAVersionThatIsNotSemverOrHasNoChangelogSectionIsRefused(t *testing.T) {
	for _, tt := range []struct{ version, want string }{
		{"0.1.0", "is not a semantic version with a leading v"},
		{"v1.2", "is not a semantic version with a leading v"},
		{"v01.2.3", "is not a semantic version with a leading v"},
		{"4a89e5e-dirty", "is not a semantic version with a leading v"},
		{"v999.0.0", `CHANGELOG.md has no section "## [999.0.0]`},
	} {
		out := filepath.Join(t.TempDir(), "out")
		got, err := exec.Command("./release.sh", tt.version, out).CombinedOutput()
		if err == nil || !strings.Contains(string(got), tt.want) {
			t.Errorf("release.sh %s: %v, %q; want a failure saying %q", tt.version, err, got, tt.want)
		}
		if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("release.sh %s made %s before refusing", tt.version, out)
		}
	}
}

func TestTheReleaseInstallsAsTheDocsSay(t *testing.T) {
	c := cluster.Require(t, testCluster)
	blocks := releaseBlocks(t)
	version := docsVersion(t, blocks)
	plain := strings.TrimPrefix(version, "v")
	tag := image + ":" + plain
	revision := checkoutRevision(t)

	// The release page's layout: one directory per version.
	page := t.TempDir()
	dist := filepath.Join(page, version)
	start := time.Now()
	build := exec.CommandContext(t.Context(), "./release.sh", version, dist)
	// This machine's binaries, and the image for both architectures, as released.
	platforms := []string{runtime.GOOS + "/" + runtime.GOARCH}
	for _, arch := range []string{"amd64", "arm64"} {
		if p := "linux/" + arch; p != platforms[0] {
			platforms = append(platforms, p)
		}
	}
	build.Env = append(os.Environ(), "PLATFORMS="+strings.Join(platforms, " "))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("release.sh %s: %v\n%s", version, err, out)
	}
	t.Logf("release %s for %s/%s built in %s", version, runtime.GOOS, runtime.GOARCH, time.Since(start).Round(time.Second))

	binaries := fmt.Sprintf("confighash_%s_%s_%s.tar.gz", plain, runtime.GOOS, runtime.GOARCH)
	imageFile := fmt.Sprintf("confighash-image_%s.oci.tar", plain)
	chart := fmt.Sprintf("confighash-%s.tgz", plain)
	artifacts := []string{imageFile, chart, "confighash.yaml", "confighash.krew.yaml", "release-notes.md", "provenance.intoto.json"}
	for _, p := range platforms {
		artifacts = append(artifacts, fmt.Sprintf("confighash_%s_%s.tar.gz", plain, strings.ReplaceAll(p, "/", "_")))
	}
	for _, arch := range []string{"amd64", "arm64"} {
		artifacts = append(artifacts, fmt.Sprintf("confighash-image_%s_linux_%s.spdx.json", plain, arch))
	}

	t.Run("every artifact is there, with its checksum", func(t *testing.T) {
		entries, err := os.ReadDir(dist)
		if err != nil {
			t.Fatal(err)
		}
		var files []string
		for _, e := range entries {
			files = append(files, e.Name())
		}
		want := append([]string{"checksums.txt"}, artifacts...)
		slices.Sort(files)
		slices.Sort(want)
		if !slices.Equal(files, want) {
			t.Errorf("%s holds %q, want %q", dist, files, want)
		}
		sums := checksums(t, filepath.Join(dist, "checksums.txt"))
		for _, name := range artifacts {
			if got := sha256File(t, filepath.Join(dist, name)); sums[name] != got {
				t.Errorf("checksums.txt: %s %q, its sha256 is %s", name, sums[name], got)
			}
		}
		if len(sums) != len(artifacts) {
			t.Errorf("checksums.txt lists %d files, want the %d artifacts", len(sums), len(artifacts))
		}
	})

	t.Run("both binaries say the version", func(t *testing.T) {
		files := untar(t, filepath.Join(dist, binaries))
		if len(files) != 3 || files["confighash"] == nil || !bytes.Equal(files["confighash"], files["kubectl-confighash"]) || files["LICENSE"] == nil {
			t.Fatalf("%s holds %d files, want confighash and kubectl-confighash, the same binary, and the LICENSE", binaries, len(files))
		}
		// Extracted as users do, so that the archive's modes are what runs.
		dir := t.TempDir()
		if out, err := exec.Command("tar", "-xzf", filepath.Join(dist, binaries), "-C", dir).CombinedOutput(); err != nil {
			t.Fatalf("tar: %v\n%s", err, out)
		}
		for _, name := range []string{"confighash", "kubectl-confighash"} {
			out, err := exec.Command(filepath.Join(dir, name), "version").CombinedOutput()
			if want := "confighash " + version + " (revision " + revision + ", "; err != nil || !strings.HasPrefix(string(out), want) {
				t.Errorf("%s version: %v, %q; want it to begin %q", name, err, out, want)
			}
		}
	})

	t.Run("the chart has the release's version and appVersion", func(t *testing.T) {
		var meta struct{ Version, AppVersion string }
		if err := sigsyaml.Unmarshal(untar(t, filepath.Join(dist, chart))["confighash/Chart.yaml"], &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Version != plain || meta.AppVersion != plain {
			t.Errorf("Chart.yaml: version %q, appVersion %q; want %q for both", meta.Version, meta.AppVersion, plain)
		}
	})

	var index ociIndex
	t.Run("the image is one index for amd64 and arm64, each image with its SBOM, named by the version", func(t *testing.T) {
		index = checkImageIndex(t, untar(t, filepath.Join(dist, imageFile)), tag, plain, version, revision)
	})

	t.Run("the notes are the changelog's section", func(t *testing.T) {
		notes, err := os.ReadFile(filepath.Join(dist, "release-notes.md"))
		if err != nil {
			t.Fatal(err)
		}
		changelog, err := os.ReadFile(filepath.Join("..", "..", "CHANGELOG.md"))
		if err != nil {
			t.Fatal(err)
		}
		title, body, _ := strings.Cut(strings.TrimSuffix(string(notes), "\n"), "\n\n")
		section, image, _ := strings.Cut(body, "\n\nThe image: ")
		if title != "# confighash "+version || len(section) < 100 || !strings.Contains(string(changelog), "## ["+plain+"]") ||
			!strings.Contains(string(changelog), section) {
			t.Errorf("release-notes.md is not CHANGELOG.md's section of %s under its title:\n%s", version, notes)
		}
		if want := fmt.Sprintf("`%s`, `%s` (linux/amd64, linux/arm64)", tag, index.digest); !strings.HasPrefix(image, want) {
			t.Errorf("release-notes.md says of the image %q, want %q", image, want)
		}
	})

	t.Run("the chart carries Artifact Hub's annotations", func(t *testing.T) {
		checkArtifactHub(t, untar(t, filepath.Join(dist, chart))["confighash/Chart.yaml"], tag)
	})

	t.Run("the provenance names every file, and the image index, with the commit and the Go they were built from", func(t *testing.T) {
		checkProvenance(t, dist, version, tag, index.digest)
	})

	pageURL := serve(t, page)
	t.Run("the kubectl plugin installs from the release as the docs say", func(t *testing.T) {
		out := runBlock(t, c, blocks["plugin"], pageURL)
		if want := "confighash " + version + " ("; !strings.Contains(out, want) {
			t.Errorf("kubectl confighash version printed %q, want %q", out, want)
		}
	})

	t.Run("the krew manifest validates as krew-index's and installs the plugin with kubectl krew as the docs say", func(t *testing.T) {
		// krew as users install it: kubectl-krew on the PATH.
		bin := t.TempDir()
		if err := os.Symlink(goTool(t, "krew", "sigs.k8s.io/krew/cmd/krew", krewVersion), filepath.Join(bin, "kubectl-krew")); err != nil {
			t.Fatal(err)
		}
		checkKrewManifest(t, dist, version, pageURL, bin, filepath.Dir(c.KubectlPath))
		// A user's krew has its default index, cloned from GitHub at its first run and
		// fetched again at each install, which an install from a manifest does not
		// read: here, a clone of an empty one on this machine.
		root, remote := t.TempDir(), filepath.Join(t.TempDir(), "krew-index.git")
		work := filepath.Join(t.TempDir(), "work")
		for _, args := range [][]string{
			{"init", "-q", "--bare", remote}, {"clone", "-q", remote, work},
			{"-C", work, "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-q", "--allow-empty", "-m", "index"},
			{"-C", work, "push", "-q", "origin", "HEAD"}, {"clone", "-q", remote, filepath.Join(root, "index", "default")},
		} {
			if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
				t.Fatalf("git %s: %v\n%s", args, err, out)
			}
		}
		out := runBlockWith(t, c, blocks["krew"], pageURL, []string{"KREW_ROOT=" + root}, bin)
		if want := "confighash " + version + " ("; !strings.Contains(out, want) {
			t.Errorf("kubectl confighash version printed %q, want %q", out, want)
		}
	})

	reg, host := serveRegistry(t)
	t.Run("the image index is pushed as it is, and resolves for amd64 and arm64", func(t *testing.T) {
		bin := t.TempDir()
		if err := os.Symlink(goTool(t, "crane", "github.com/google/go-containerregistry/cmd/crane", craneVersion), filepath.Join(bin, "crane")); err != nil {
			t.Fatal(err)
		}
		runBlock(t, c, strings.ReplaceAll(blocks["image"], "registry.example.com", host), pageURL, bin)
		pushed, ok := reg.manifest("confighash/confighash", plain)
		if !ok || digestOf(pushed.body) != index.digest {
			t.Fatalf("the registry holds %s of tag %s, want the index %s", digestOf(pushed.body), plain, index.digest)
		}
		for _, m := range index.Manifests {
			if _, ok := reg.manifest("confighash/confighash", m.Digest); !ok {
				t.Errorf("the registry lacks %s of the index", m.Digest)
			}
		}
	})

	if err := c.InstallCertManagerCRDs(t.Context()); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dist, "confighash.yaml")
	t.Run("confighash.yaml applies as the docs say", func(t *testing.T) {
		t.Cleanup(func() {
			_, _ = c.Kubectl(context.Background(), nil, "delete", "--ignore-not-found", "--wait", "--timeout=2m", "-f", manifest)
		})
		runBlock(t, c, blocks["kubectl"], pageURL)
		names, err := c.Kubectl(t.Context(), nil, "get", "-f", manifest, "-o", "name")
		if err != nil {
			t.Fatalf("an object of confighash.yaml is missing after the apply: %v", err)
		}
		if got, want := strings.Count(string(names), "\n"), objects(t, manifest); got != want {
			t.Errorf("%d objects of confighash.yaml exist, want its %d", got, want)
		}
		expectImage(t, c, tag)
	})

	uninstall := func() {
		helm, err := cluster.Helm(context.Background())
		if err == nil {
			_, _ = exec.Command(helm, "uninstall", "confighash", "--namespace", "confighash", "--wait", "--kubeconfig", c.Kubeconfig).CombinedOutput()
		}
		_ = c.DeleteNamespace(context.Background(), "confighash")
	}
	t.Run("the chart installs as the docs say", func(t *testing.T) {
		t.Cleanup(uninstall)
		runBlock(t, c, blocks["helm"], pageURL)
		expectImage(t, c, tag)
	})

	t.Run("the chart installs from an OCI registry as the docs say, once helm push sent it", func(t *testing.T) {
		t.Cleanup(uninstall)
		waitNamespaceGone(t, c, "confighash")
		helm, err := cluster.Helm(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(helm, "push", filepath.Join(dist, chart), "oci://"+host+"/confighash/charts", "--plain-http").CombinedOutput(); err != nil {
			t.Fatalf("helm push: %v\n%s", err, out)
		}
		// The registry here speaks plain HTTP, which helm is told.
		block := strings.ReplaceAll(blocks["helm-oci"], "oci://ghcr.io/", "oci://"+host+"/")
		runBlock(t, c, strings.Replace(block, "helm install ", "helm install --plain-http ", 1), pageURL)
		expectImage(t, c, tag)
	})
}

// releaseBlocks returns the shell blocks of docs/install.md marked with
// <!-- release-install: NAME -->, by name: kubectl, helm and plugin.
func releaseBlocks(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string]string{}
	for _, m := range regexp.MustCompile("(?s)<!-- release-install: ([\\w-]+) -->\n+```sh\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		blocks[m[1]] = m[2]
	}
	for _, name := range []string{"kubectl", "helm", "plugin", "krew", "image"} {
		if !strings.Contains(blocks[name], releasePage) {
			t.Fatalf("docs/install.md has no block marked <!-- release-install: %s --> that downloads from %s", name, releasePage)
		}
	}
	if !strings.Contains(blocks["helm-oci"], "oci://ghcr.io/confighash/charts/confighash") {
		t.Fatal("docs/install.md has no block marked <!-- release-install: helm-oci --> that installs oci://ghcr.io/confighash/charts/confighash")
	}
	return blocks
}

// docsVersion is the one release the blocks install.
func docsVersion(t *testing.T, blocks map[string]string) string {
	t.Helper()
	var versions []string
	for _, block := range blocks {
		for _, m := range regexp.MustCompile(regexp.QuoteMeta(releasePage)+`([^/"\s]+)/`).FindAllStringSubmatch(block, -1) {
			versions = append(versions, m[1])
		}
	}
	slices.Sort(versions)
	if versions = slices.Compact(versions); len(versions) != 1 {
		t.Fatalf("docs/install.md's release blocks name the releases %q, want one", versions)
	}
	return versions[0]
}

// serve serves dir over HTTP until the test ends, and returns its URL. The krew
// manifest is served with its downloads from the release page served from here too.
func serve(t *testing.T, dir string) string {
	t.Helper()
	files := http.FileServer(http.Dir(dir))
	var url string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, ".krew.yaml") {
			files.ServeHTTP(w, r)
			return
		}
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(r.URL.Path)))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(bytes.ReplaceAll(b, []byte(releasePage), []byte(url)))
	}))
	t.Cleanup(srv.Close)
	url = srv.URL + "/"
	return url
}

// runBlock runs a block of the docs with bash, downloading from page instead of the
// release page, as a user with an empty home directory whose PATH has the control
// plane's kubectl, the helm the tests build and the directories bins, and returns its
// output.
func runBlock(t *testing.T, c *cluster.Cluster, block, page string, bins ...string) string {
	t.Helper()
	return runBlockWith(t, c, block, page, nil, bins...)
}

// runBlockWith runs a block as runBlock does, with the environment variables env too.
func runBlockWith(t *testing.T, c *cluster.Cluster, block, page string, env []string, bins ...string) string {
	t.Helper()
	helm, err := cluster.Helm(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", strings.ReplaceAll(block, releasePage, page))
	cmd.Dir = home
	// Only what a user's shell would have: no proxy for the local page, no Go settings.
	cmd.Env = []string{
		"HOME=" + home,
		"KUBECONFIG=" + c.Kubeconfig,
		"PATH=" + strings.Join(append(append([]string{filepath.Join(home, ".local", "bin")}, bins...), filepath.Dir(c.KubectlPath), filepath.Dir(helm), os.Getenv("PATH")), string(os.PathListSeparator)),
	}
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the docs' block failed: %v\n%s\n%s", err, block, out)
	}
	t.Logf("the docs' block said:\n%s", out)
	return string(out)
}

// waitNamespaceGone waits, two minutes at most, until the namespace is deleted.
func waitNamespaceGone(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if _, err := c.Client.CoreV1().Namespaces().Get(t.Context(), name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
	}
	t.Fatalf("namespace %s is still there 2 minutes after its deletion", name)
}

// expectImage checks that both components' Deployments run tag.
func expectImage(t *testing.T, c *cluster.Cluster, tag string) {
	t.Helper()
	for _, name := range []string{"confighash-webhook", "confighash-watcher"} {
		d, err := c.Client.AppsV1().Deployments("confighash").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ctr := range d.Spec.Template.Spec.Containers {
			if ctr.Image != tag {
				t.Errorf("deployment %s runs %s, want %s", name, ctr.Image, tag)
			}
		}
	}
}

// objects counts the objects of a multi-document YAML file.
func objects(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := yaml.NewYAMLReader(bufio.NewReader(f))
	n := 0
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		var obj struct{ Kind string }
		if err := sigsyaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind != "" {
			n++
		}
	}
}

// checksums reads a sha256sum file: file name to hex digest.
func checksums(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	for line := range strings.Lines(string(b)) {
		sum, name, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "  ")
		if !ok {
			t.Fatalf("checksums.txt: %q is not a sha256sum line", line)
		}
		sums[name] = sum
	}
	return sums
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(digestOf(b), "sha256:")
}

// untar reads the regular files of a tar archive, gzipped or not.
func untar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, "gz") {
		if r, err = gzip.NewReader(f); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}

// checkoutRevision is the commit release.sh stamps: 12 hex digits, "-dirty" when a
// tracked file has changes.
func checkoutRevision(t *testing.T) string {
	t.Helper()
	rev, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	changes, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) > 0 {
		return strings.TrimSpace(string(rev)) + "-dirty"
	}
	return strings.TrimSpace(string(rev))
}
