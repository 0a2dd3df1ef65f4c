package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// krewFile is the plugin manifest's name in a release; submitted to krew-index, it is
// named after the plugin, in its plugins directory.
const krewFile = "confighash.krew.yaml"

// The krew plugin manifest (krew.googlecontainertools.github.com/v1alpha2).
type krewPlugin struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       krewSpec       `json:"spec"`
}

type krewSpec struct {
	Version          string         `json:"version"`
	Homepage         string         `json:"homepage"`
	ShortDescription string         `json:"shortDescription"`
	Description      string         `json:"description"`
	Platforms        []krewPlatform `json:"platforms"`
}

type krewPlatform struct {
	Selector map[string]map[string]string `json:"selector"`
	URI      string                       `json:"uri"`
	Sha256   string                       `json:"sha256"`
	Files    []map[string]string          `json:"files"`
	Bin      string                       `json:"bin"`
}

// writeKrew writes the plugin manifest of the archives of version in dist
// (confighash_X.Y.Z_OS_ARCH.tar.gz), each downloaded from page.
func writeKrew(dist, version, page string) error {
	archive := regexp.MustCompile(`^confighash_[^_]+_([a-z]+)_([a-z0-9]+)\.tar\.gz$`)
	entries, err := os.ReadDir(dist)
	if err != nil {
		return err
	}
	plugin := krewPlugin{
		APIVersion: "krew.googlecontainertools.github.com/v1alpha2", Kind: "Plugin",
		Metadata: map[string]any{"name": "confighash"},
		Spec: krewSpec{
			Version:          version,
			Homepage:         "https://github.com/confighash/confighash",
			ShortDescription: "Explain which workloads a ConfigMap or Secret change rolls",
			Description: "Tells, for each workload confighash acts on, which ConfigMaps and Secrets count for\n" +
				"it, whether it is up to date with their data, and what the next change rolls and\n" +
				"when: `kubectl confighash explain deployment/web`, or offline from manifests with\n" +
				"`--file` and `--with`, to see what an edit would roll before it is applied. Also\n" +
				"`kubectl confighash resume` for a wave a failed rollout halted.\n",
		},
	}
	for _, e := range entries {
		m := archive.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		sum, err := sha256Of(filepath.Join(dist, e.Name()))
		if err != nil {
			return err
		}
		plugin.Spec.Platforms = append(plugin.Spec.Platforms, krewPlatform{
			Selector: map[string]map[string]string{"matchLabels": {"os": m[1], "arch": m[2]}},
			URI:      page + version + "/" + e.Name(),
			Sha256:   sum,
			Files:    []map[string]string{{"from": "kubectl-confighash", "to": "."}, {"from": "LICENSE", "to": "."}},
			Bin:      "kubectl-confighash",
		})
	}
	if len(plugin.Spec.Platforms) == 0 {
		return fmt.Errorf("%s holds no archive of the binaries", dist)
	}
	slices.SortFunc(plugin.Spec.Platforms, func(a, b krewPlatform) int { return strings.Compare(a.URI, b.URI) })
	b, err := yaml.Marshal(plugin)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dist, krewFile), b, 0o644)
}

func sha256Of(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
