package confighash_test

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/confighash/confighash"

// imports returns the packages the non-test files of a package of this module import.
func imports(t *testing.T, dir string) []string {
	t.Helper()
	pkg, err := build.ImportDir(dir, 0)
	if err != nil {
		t.Fatalf("read package %s: %v", dir, err)
	}
	return pkg.Imports
}

func TestDomainDoesNoIO(t *testing.T) {
	forbidden := []string{"k8s.io/client-go", "net/http", "github.com/rs/zerolog", "github.com/prometheus", "os", "log"}
	for _, imp := range imports(t, ".") {
		for _, f := range forbidden {
			if imp == f || strings.HasPrefix(imp, f+"/") {
				t.Errorf("the domain package imports %s; clients, HTTP, logs, metrics and files belong in the adapters", imp)
			}
		}
		if strings.HasPrefix(imp, module+"/") {
			t.Errorf("the domain package imports %s; adapters depend on the domain, never the reverse", imp)
		}
	}
}

// TestAdaptersNeverImportEachOther: the webhook and the watcher share the domain, the
// source cache, the namespace gate and the door their watches go through, and each may
// use leaf packages of its own (alert, bounded), but never the other; the shared and
// leaf packages import only the domain, and the door.
func TestAdaptersNeverImportEachOther(t *testing.T) {
	rules := map[string][]string{
		"webhook":     {module, module + "/sourcecache", module + "/namespaces", module + "/watches"},
		"watcher":     {module, module + "/sourcecache", module + "/namespaces", module + "/watches", module + "/alert", module + "/bounded"},
		"sourcecache": {module, module + "/watches"},
		"namespaces":  {module, module + "/watches"},
		"watches":     {module},
		"alert":       {},
		"bounded":     {},
		"restarter":   {module},
	}
	for dir, allowed := range rules {
		for _, imp := range imports(t, dir) {
			if strings.HasPrefix(imp, module) && !slices.Contains(allowed, imp) {
				t.Errorf("%s imports %s; it may import only %v of this module", dir, imp, allowed)
			}
		}
	}
}

// informerMakers are the calls that make an informer, or the list and watch under one.
var informerMakers = regexp.MustCompile(`^(New\w*Informer|NewSharedInformerFactory\w*|NewDynamicSharedInformerFactory|NewFilteredDynamicSharedInformerFactory|New\w*ListWatch\w*|NewReflector\w*)$`)

// TestEveryInformerIsOpenedThroughTheDoor (rule 13): an informer is made only in a
// function that hands it to the door (watches.Door.Open, watches.Informer), which
// registers its kind for the flood test, keeps a tenant's objects only where
// confighash acts, and bounds each in bytes; a list, only through watches.Door.List,
// in pages, each object bounded. A watch or list made anywhere else is refused here,
// before any review has to find it.
func TestEveryInformerIsOpenedThroughTheDoor(t *testing.T) {
	for _, dir := range []string{".", "webhook", "watcher", "sourcecache", "namespaces", "certs", "alert", "bounded", "restarter", "cmd/confighash"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") || strings.HasPrefix(path, "cmd/confighash/explain") {
				continue // explain runs as its user, not as a component
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				var makes []string
				door, lists, watches := false, false, false
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					switch n := n.(type) {
					case *ast.CallExpr:
						if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
							switch {
							case informerMakers.MatchString(sel.Sel.Name):
								makes = append(makes, sel.Sel.Name)
							case sel.Sel.Name == "List" && len(n.Args) == 2:
								lists = true // a client's: a store's List takes none
							case sel.Sel.Name == "Open" || sel.Sel.Name == "Informer" && isIdent(sel.X, "watches") || sel.Sel.Name == "List" && len(n.Args) == 6 || sel.Sel.Name == "Names" && len(n.Args) == 5:
								door = true
							}
						}
					case *ast.SelectorExpr:
						watches = watches || n.Sel.Name == "Watch"
					case *ast.CompositeLit:
						if sel, ok := n.Type.(*ast.SelectorExpr); ok && isIdent(sel.X, "cache") && sel.Sel.Name == "ListWatch" {
							makes = append(makes, "cache.ListWatch")
						}
					}
					return true
				})
				// A list beside a watch is an informer's, which the door opens; a list
				// alone goes through Door.List.
				if lists && !watches {
					makes = append(makes, "List")
				}
				if len(makes) > 0 && !door {
					t.Errorf("%s: %s makes %v without the door: open it through watches.Door.Open or watches.Informer, or list through watches.Door.List or Names, from a kind registered in watches.Kinds", path, fn.Name.Name, makes)
				}
			}
		}
	}
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}
