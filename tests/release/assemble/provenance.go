package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// provenanceFile is the release's provenance: an in-toto statement, unsigned (SLSA
// Build L1), whose predicate is SLSA provenance v1.
const provenanceFile = "provenance.intoto.json"

// writeProvenance writes the statement that every file of dist (but itself and
// checksums.txt, written after it), and the image index of digest index named ref,
// were built by make release VERSION=version from commit, by this Go, between started
// and now; tools are the other tools' versions, name=version.
func writeProvenance(dist, version, commit, ref, index, started string, tools []string) error {
	entries, err := os.ReadDir(dist)
	if err != nil {
		return err
	}
	var subjects []map[string]any
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == provenanceFile || e.Name() == "checksums.txt" {
			continue
		}
		sum, err := sha256Of(filepath.Join(dist, e.Name()))
		if err != nil {
			return err
		}
		subjects = append(subjects, map[string]any{"name": e.Name(), "digest": map[string]string{"sha256": sum}})
	}
	subjects = append(subjects, map[string]any{"name": ref, "digest": map[string]string{"sha256": strings.TrimPrefix(index, "sha256:")}})
	internal := map[string]string{"go": runtime.Version()}
	for _, t := range tools {
		name, v, ok := strings.Cut(t, "=")
		if !ok {
			return fmt.Errorf("tool %q: want name=version", t)
		}
		internal[name] = v
	}
	if _, err := time.Parse(time.RFC3339, started); err != nil {
		return fmt.Errorf("started: %w", err)
	}
	statement := map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       subjects,
		"predicateType": "https://slsa.dev/provenance/v1",
		"predicate": map[string]any{
			"buildDefinition": map[string]any{
				"buildType":          "https://github.com/confighash/confighash/blob/main/tests/release/release.sh",
				"externalParameters": map[string]any{"version": version, "command": "make release VERSION=" + version},
				"internalParameters": internal,
				"resolvedDependencies": []any{map[string]any{
					"uri":    "git+https://github.com/confighash/confighash@" + version,
					"digest": map[string]string{"gitCommit": commit},
				}},
			},
			"runDetails": map[string]any{
				"builder":  map[string]any{"id": "https://github.com/confighash/confighash/blob/main/Makefile#release"},
				"metadata": map[string]any{"startedOn": started, "finishedOn": time.Now().UTC().Format(time.RFC3339)},
			},
		},
	}
	b, err := json.MarshalIndent(statement, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dist, provenanceFile), append(b, '\n'), 0o644)
}
