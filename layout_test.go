package confighash_test

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
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
// leaf packages import only the domain, the door, and metrics, where every metric is
// declared.
func TestAdaptersNeverImportEachOther(t *testing.T) {
	rules := map[string][]string{
		"webhook":     {module, module + "/sourcecache", module + "/namespaces", module + "/watches", module + "/metrics"},
		"watcher":     {module, module + "/sourcecache", module + "/namespaces", module + "/watches", module + "/alert", module + "/bounded", module + "/metrics"},
		"sourcecache": {module, module + "/watches"},
		"namespaces":  {module, module + "/watches"},
		"watches":     {module, module + "/metrics"},
		"alert":       {module + "/metrics"},
		"bounded":     {},
		"metrics":     {},
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
		paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		files := map[string]*ast.File{}
		for _, path := range paths {
			if strings.HasSuffix(path, "_test.go") || strings.HasPrefix(path, "cmd/confighash/explain") {
				continue // explain runs as its user, not as a component
			}
			if files[path], err = parser.ParseFile(token.NewFileSet(), path, nil, 0); err != nil {
				t.Fatal(err)
			}
		}
		// A recipe is a package-level var whose functions make informers (a table of
		// constructors by kind): only a function that opens the door may read one.
		recipes := map[string]bool{}
		for _, f := range files {
			for _, decl := range f.Decls {
				if gen, ok := decl.(*ast.GenDecl); ok && gen.Tok == token.VAR {
					for _, spec := range gen.Specs {
						if makes, _ := opens(spec); len(makes) > 0 {
							for _, name := range spec.(*ast.ValueSpec).Names {
								recipes[name.Name] = true
							}
						}
					}
				}
			}
		}
		for _, path := range slices.Sorted(maps.Keys(files)) {
			for _, decl := range files[path].Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				makes, door := opens(fn.Body)
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					if id, ok := n.(*ast.Ident); ok && recipes[id.Name] {
						makes = append(makes, id.Name)
					}
					return true
				})
				if len(makes) > 0 && !door {
					t.Errorf("%s: %s makes %v without the door: open it through watches.Door.Open or watches.Informer, or list through watches.Door.List or Names, from a kind registered in watches.Kinds", path, fn.Name.Name, makes)
				}
			}
		}
	}
}

// opens returns the informers, lists and watches the code makes, and whether it hands
// them to the door.
func opens(code ast.Node) (makes []string, door bool) {
	lists, watches := false, false
	ast.Inspect(code, func(n ast.Node) bool {
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
	// A list beside a watch is an informer's, which the door opens; a list alone goes
	// through Door.List.
	if lists && !watches {
		makes = append(makes, "List")
	}
	return makes, door
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// TestTheDomainsFilesStandOnFloors: each file of the domain uses only names that files
// below it declare, so that it reads from the ground up (ARCHITECTURE.md, "The domain,
// floor by floor"). A name used below the file that declares it moves down, or its user
// moves up; a loop of files is refused here with the names that close it.
func TestTheDomainsFilesStandOnFloors(t *testing.T) {
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	pkg, err := (&types.Config{Importer: compiledImporter(t, fset)}).Check(module, fset, files, info)
	if err != nil {
		t.Fatal(err)
	}
	// uses[a][b] are the names of b that a uses.
	uses := map[string]map[string][]string{}
	for id, obj := range info.Uses {
		method := false
		if f, ok := obj.(*types.Func); ok {
			method = f.Signature().Recv() != nil
		}
		if obj.Pkg() != pkg || obj.Parent() != pkg.Scope() && !method {
			continue // another package's, a local, or a field
		}
		a, b := filepath.Base(fset.File(id.Pos()).Name()), filepath.Base(fset.File(obj.Pos()).Name())
		if a == b {
			continue
		}
		if uses[a] == nil {
			uses[a] = map[string][]string{}
		}
		if !slices.Contains(uses[a][b], obj.Name()) {
			uses[a][b] = append(uses[a][b], obj.Name())
		}
	}
	for _, loop := range loops(uses) {
		var why []string
		for _, a := range loop {
			for _, b := range loop {
				if names := uses[a][b]; names != nil {
					slices.Sort(names)
					if len(names) > 4 {
						names = append(names[:4], fmt.Sprintf("%d more", len(names)-4))
					}
					why = append(why, fmt.Sprintf("%s uses %s of %s", a, strings.Join(names, ", "), b))
				}
			}
		}
		t.Errorf("the domain's files %v use each other, so none stands on the others:\n\t%s", loop, strings.Join(why, "\n\t"))
	}
}

// loops returns the sets of files that reach each other through uses, each of more
// than one file (Tarjan's strongly connected components).
func loops(uses map[string]map[string][]string) [][]string {
	index, low, onStack := map[string]int{}, map[string]int{}, map[string]bool{}
	var stack []string
	var out [][]string
	var visit func(a string)
	visit = func(a string) {
		index[a], low[a] = len(index), len(index)
		stack = append(stack, a)
		onStack[a] = true
		for _, b := range slices.Sorted(maps.Keys(uses[a])) {
			if _, seen := index[b]; !seen {
				visit(b)
				low[a] = min(low[a], low[b])
			} else if onStack[b] {
				low[a] = min(low[a], index[b])
			}
		}
		if low[a] != index[a] {
			return
		}
		var loop []string
		for {
			b := stack[len(stack)-1]
			stack, onStack[b] = stack[:len(stack)-1], false
			loop = append(loop, b)
			if b == a {
				break
			}
		}
		if len(loop) > 1 {
			slices.Sort(loop)
			out = append(out, loop)
		}
	}
	for _, a := range slices.Sorted(maps.Keys(uses)) {
		if _, seen := index[a]; !seen {
			visit(a)
		}
	}
	return out
}

// compiledImporter imports the domain's dependencies from the build cache's export
// data, which go list compiles once: type-checking them from source takes 40 s.
func compiledImporter(t *testing.T, fset *token.FileSet) types.Importer {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if path, file, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			exports[path] = file
		}
	}
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
}
