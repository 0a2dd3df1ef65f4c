package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// document is a Markdown file of the repository, by its path from the root.
type document struct {
	path, text string
}

// readDoc reads one document.
func readDoc(t *testing.T, path string) document {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return document{path, string(text)}
}

// allDocs are the documents a user reads: docs/*.md and the README.
func allDocs(t *testing.T) []document {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs := []document{readDoc(t, "README.md")}
	for _, p := range paths {
		docs = append(docs, readDoc(t, "docs/"+filepath.Base(p)))
	}
	return docs
}

// section is the part of the document under the heading line, up to the next heading
// of the same level or higher (a # line in a code block is none); "" when it has no
// such heading.
func (d document) section(heading string) string {
	level := len(heading) - len(strings.TrimLeft(heading, "#"))
	var out []string
	in, fenced := false, false
	for _, line := range strings.Split(d.text, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if h := len(line) - len(strings.TrimLeft(line, "#")); h > 0 && strings.HasPrefix(line[h:], " ") && in && !fenced && h <= level {
			break
		}
		if line == heading {
			in = true
		}
		if in {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// table is a Markdown table: its header's cells and its rows'.
type table struct {
	header []string
	rows   [][]string
}

// tables are the tables of a text.
func tables(text string) []table {
	var out []table
	var cur *table
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			cur = nil
			continue
		}
		cells := cells(line)
		switch {
		case cur == nil:
			out = append(out, table{header: cells})
			cur = &out[len(out)-1]
		case strings.Trim(line, "|-: ") == "":
		default:
			cur.rows = append(cur.rows, cells)
		}
	}
	return out
}

// cells splits a table line at the bars that are not escaped.
func cells(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	var out []string
	start := 0
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\':
			i++
		case line[i] == '|':
			out = append(out, strings.TrimSpace(line[start:i]))
			start = i + 1
		}
	}
	return append(out, strings.TrimSpace(line[start:]))
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// code are the code spans of a text, without their backquotes.
func code(text string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}
