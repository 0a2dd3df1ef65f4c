package main

import (
	"os"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// annotateChart adds Artifact Hub's annotations to the release's copy of Chart.yaml:
// its changes, read from the release notes (release-notes.md, CHANGELOG.md's section),
// its image ref for each of platforms (comma-separated), its links, and whether it is
// a pre-release (https://artifacthub.io/docs/topics/annotations/helm/).
func annotateChart(chartYAML, notesFile, ref, platforms string) error {
	b, err := os.ReadFile(chartYAML)
	if err != nil {
		return err
	}
	var chart map[string]any
	if err := yaml.Unmarshal(b, &chart); err != nil {
		return err
	}
	notes, err := os.ReadFile(notesFile)
	if err != nil {
		return err
	}
	annotations, _ := chart["annotations"].(map[string]any)
	if annotations == nil {
		annotations = map[string]any{}
	}
	for key, v := range map[string]any{
		"artifacthub.io/changes": changesOf(string(notes)),
		"artifacthub.io/images":  []map[string]any{{"name": "confighash", "image": ref, "platforms": strings.Split(platforms, ",")}},
		"artifacthub.io/links": []map[string]string{
			{"name": "source", "url": "https://github.com/confighash/confighash"},
			{"name": "documentation", "url": "https://github.com/confighash/confighash/tree/main/docs"},
			{"name": "migrating from Reloader", "url": "https://github.com/confighash/confighash/blob/main/docs/migrating-from-reloader.md"},
		},
	} {
		text, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		annotations[key] = string(text)
	}
	annotations["artifacthub.io/prerelease"] = strings.Contains(ref[strings.LastIndex(ref, ":")+1:], "-")
	annotations["artifacthub.io/license"] = "Apache-2.0"
	chart["annotations"] = annotations
	if b, err = yaml.Marshal(chart); err != nil {
		return err
	}
	return os.WriteFile(chartYAML, b, 0o644)
}

// changesOf reads the changes of release notes in Keep a Changelog's form: under each
// "### Added" (and Changed, Deprecated, Removed, Fixed, Security) heading, one change
// per top-level bullet, told by its bold title, or else its first sentence.
func changesOf(notes string) []map[string]string {
	kinds := map[string]string{"Added": "added", "Changed": "changed", "Deprecated": "deprecated", "Removed": "removed", "Fixed": "fixed", "Security": "security"}
	bold := regexp.MustCompile(`^\*\*(.+?)\*\*`)
	links := regexp.MustCompile(`\[([^]]+)\]\([^)]*\)`)
	var changes []map[string]string
	kind := ""
	for line := range strings.Lines(notes) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "### "):
			kind = kinds[strings.TrimSpace(strings.TrimPrefix(line, "### "))]
		case kind != "" && strings.HasPrefix(line, "- "):
			text := strings.TrimPrefix(line, "- ")
			if m := bold.FindStringSubmatch(text); m != nil {
				text = m[1]
			} else if end := strings.Index(text, ". "); end > 0 {
				text = text[:end]
			}
			text = strings.TrimSuffix(links.ReplaceAllString(strings.ReplaceAll(text, "`", ""), "$1"), ":")
			changes = append(changes, map[string]string{"kind": kind, "description": text})
		}
	}
	return changes
}
