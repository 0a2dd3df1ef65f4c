package watcher

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// The watcher is a small dispatcher over capabilities (ARCHITECTURE.md, "The
// watcher"): its core keeps the queue and the sync, and each capability is a type
// with its own state. These bound the core, and keep each capability's state its own:
// the compiler does not, inside one package.
const (
	maxWatcherMethods = 35
	maxWatcherFields  = 12
)

// capabilities are the types that hold a capability's state, by the Watcher's field
// that holds each.
var capabilities = map[string]string{
	"pacer": "pacer", "jobs": "jobs", "snapshots": "snapshots", "proofs": "proofs",
	"restarts": "restarts", "decider": "decider", "report": "reporter", "workloads": "workloads",
}

func TestTheWatcherIsASmallDispatcher(t *testing.T) {
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files[p] = f
	}
	methods := map[string]int{}            // by receiver type
	fields := map[string]map[string]bool{} // by struct type
	home := map[string]map[string]bool{}   // the files of each type's methods
	for p, f := range files {
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil {
					continue
				}
				typ := receiver(decl.Recv.List[0].Type)
				methods[typ]++
				if home[typ] == nil {
					home[typ] = map[string]bool{}
				}
				home[typ][p] = true
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					fields[ts.Name.Name] = map[string]bool{}
					for _, field := range st.Fields.List {
						for _, n := range field.Names {
							fields[ts.Name.Name][n.Name] = true
						}
					}
				}
			}
		}
	}
	if n := methods["Watcher"]; n > maxWatcherMethods {
		t.Errorf("*Watcher has %d methods, want at most %d: a new capability is a type of its own", n, maxWatcherMethods)
	}
	if n := len(fields["Watcher"]); n > maxWatcherFields {
		t.Errorf("Watcher has %d fields, want at most %d", n, maxWatcherFields)
	}
	// A capability's fields are read and written in its own files alone: elsewhere,
	// w.pacer.waves is a reach into another's state, where a method would say what
	// is asked of it.
	for p, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			inner, ok := sel.X.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			typ, isCapability := capabilities[inner.Sel.Name]
			if !isCapability || !fields[typ][sel.Sel.Name] || home[typ][p] {
				return true
			}
			t.Errorf("%s: %s.%s reaches into the state of %s, outside its files", fset.Position(sel.Pos()), inner.Sel.Name, sel.Sel.Name, typ)
			return true
		})
	}
}

// receiver is the name of a method's receiver type.
func receiver(e ast.Expr) string {
	if star, ok := e.(*ast.StarExpr); ok {
		e = star.X
	}
	if idx, ok := e.(*ast.IndexExpr); ok {
		e = idx.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
