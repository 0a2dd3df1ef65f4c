package docs

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// ruleRow is a row of ARCHITECTURE.md's rules table: its number and its name.
var ruleRow = regexp.MustCompile(`(?m)^\| (\d+) \| ([^|]+) \|`)

// ruleCitation is "rule N", "rules N and M" or "rules N, M and K", across a line break
// of a comment or a paragraph.
var ruleCitation = regexp.MustCompile(`\b[Rr]ules?[\s/]+(\d+(?:(?:,|,? and)[\s/]+\d+)*)\b`)

var number = regexp.MustCompile(`\d+`)

// TestRuleCitationsNameARule: every "rule N" in the code and the docs is a row of
// ARCHITECTURE.md's rules table, numbered in order, where an engineer who clones the
// repository reads it; none cites a document the repository does not have.
func TestRuleCitationsNameARule(t *testing.T) {
	rules := map[int]string{}
	for i, m := range ruleRow.FindAllStringSubmatch(readDoc(t, "ARCHITECTURE.md").section("## The rules, and the tests that guard them"), -1) {
		n, _ := strconv.Atoi(m[1])
		if n != i+1 {
			t.Fatalf("ARCHITECTURE.md's rule %q is numbered %d, want %d: rows are numbered in order", m[2], n, i+1)
		}
		rules[n] = strings.TrimSpace(m[2])
	}
	if len(rules) < 13 {
		t.Fatalf("ARCHITECTURE.md's rules table has %d numbered rows, want at least 13", len(rules))
	}
	cited := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "dist") {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".md") || strings.HasSuffix(p, ".json")) {
			return nil
		}
		text, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if strings.Contains(string(text), "DESIGN"+" rule") {
			t.Errorf("%s cites a rule of DESIGN: the repository's rules are ARCHITECTURE.md's, cited as (rule N)", rel)
		}
		for _, m := range ruleCitation.FindAllStringSubmatch(string(text), -1) {
			for _, field := range number.FindAllString(m[1], -1) {
				n, _ := strconv.Atoi(field)
				if _, ok := rules[n]; !ok {
					t.Errorf("%s cites rule %d: ARCHITECTURE.md has no such rule", rel, n)
				}
				cited++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cited == 0 {
		t.Fatal("no citation of a rule found: the pattern reads none")
	}
}

var quoted = regexp.MustCompile(`"[^"\n]*"`)

// TestCommentsNameFilesThatExist: a Go comment that names a file of the repository
// (a path ending in .go, .yaml or .sh) names one that is there. A quoted name is an
// example of a key or a user's file, not one of the repository's.
func TestCommentsNameFilesThatExist(t *testing.T) {
	files := repoFiles(t)
	fset := token.NewFileSet()
	named := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return err
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for _, group := range f.Comments {
			for _, m := range filePath.FindAllString(quoted.ReplaceAllString(group.Text(), ""), -1) {
				named++
				if !files.has(m) {
					t.Errorf("%s: a comment names %s, which is not in the repository", rel, m)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if named == 0 {
		t.Fatal("no comment names a file: the pattern reads none")
	}
}
