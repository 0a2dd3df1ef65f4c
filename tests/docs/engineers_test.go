package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// engineersDocs are the documents for those who change confighash.
var engineersDocs = []string{"ARCHITECTURE.md", "CONTRIBUTING.md"}

// TestEngineersDocsNameWhatExists: every file, Go name, make target and flag that
// ARCHITECTURE.md and CONTRIBUTING.md name exists, so that they stay a true map as the
// code moves.
func TestEngineersDocsNameWhatExists(t *testing.T) {
	files := repoFiles(t)
	declared := declaredNames(t)
	targets := makeTargets(t)
	help := commandFlags(t)
	flag := func(name string) bool {
		for _, flags := range help {
			if flags[name] {
				return true
			}
		}
		return false
	}
	for _, path := range engineersDocs {
		doc := readDoc(t, path)
		for _, m := range filePath.FindAllString(doc.text, -1) {
			if !files.has(m) {
				t.Errorf("%s names the file %s, which is not in the repository", path, m)
			}
		}
		for _, span := range code(doc.text) {
			switch {
			case strings.HasPrefix(span, "make "):
				for _, target := range strings.Fields(span)[1:] {
					if !strings.Contains(target, "=") && !targets[target] {
						t.Errorf("%s names `%s`: the Makefile has no target %s", path, span, target)
					}
				}
			case strings.HasPrefix(span, "--"):
				if name, _, _ := strings.Cut(strings.TrimPrefix(span, "--"), "="); !flag(name) {
					t.Errorf("%s names the flag %s, which no component has", path, span)
				}
			case files.has(strings.TrimSuffix(span, "/")):
			case goName.MatchString(span):
				if name := goName.FindStringSubmatch(span)[1]; !declared[name] {
					t.Errorf("%s names `%s`: no Go declaration is named %s", path, span, name)
				}
			}
		}
	}
}

// filePath is a path to a file of the repository as the docs write it, code span or not.
var filePath = regexp.MustCompile(`\b[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*\.(go|yaml|sh)\b`)

// goName is a Go name as the docs write it, Name, pkg.Name, (*T).Name or Name(), with
// its last part: a span of one lower-case word must be a declaration too.
var goName = regexp.MustCompile(`^(?:\(\*?[A-Za-z_]\w*\)\.|[A-Za-z_]\w*\.)?([A-Za-z_]\w*)(?:\(\))?$`)

// repoPaths are the repository's files and directories, by their path from the root.
type repoPaths map[string]bool

// has reports whether path is a file or directory of the repository, from the root or,
// for a bare file name, anywhere.
func (r repoPaths) has(path string) bool {
	if r[path] {
		return true
	}
	if !strings.Contains(path, "/") {
		for p := range r {
			if strings.HasSuffix(p, "/"+path) {
				return true
			}
		}
	}
	return false
}

func repoFiles(t *testing.T) repoPaths {
	t.Helper()
	paths := repoPaths{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "dist") {
			return filepath.SkipDir
		}
		paths[filepath.ToSlash(rel)] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

// declaredNames are the names of the module's Go declarations, tests included: funcs,
// methods, types and their fields, constants and variables.
func declaredNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return err
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				names[decl.Name.Name] = true
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						names[spec.Name.Name] = true
						if st, ok := spec.Type.(*ast.StructType); ok {
							for _, f := range st.Fields.List {
								for _, n := range f.Names {
									names[n.Name] = true
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

var makeTarget = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)

func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range makeTarget.FindAllStringSubmatch(string(text), -1) {
		targets[m[1]] = true
	}
	return targets
}
