package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// root is the repository, from this package's directory.
const root = "../.."

const module = "github.com/confighash/confighash"

// goSource is the module's Go code that ships: every non-test file outside tests/.
type goSource struct {
	fset  *token.FileSet
	files []*goFile
	pkgs  map[string]map[string]constant // constants by import path and name
	calls map[string][]call              // every call, by the called function's name
}

type goFile struct {
	path    string // import path of its package
	syntax  *ast.File
	imports map[string]string // import path by the name the file uses
}

type constant struct {
	value ast.Expr
	file  *goFile
}

// scope is where an expression is written: its file and the functions around it,
// innermost last.
type scope struct {
	file  *goFile
	funcs []function
}

// function is a function declaration, or a function literal with the name of the
// variable it is assigned to, if any, and the function it is written in.
type function struct {
	node   ast.Node
	typ    *ast.FuncType
	name   string
	method bool
	outer  ast.Node
}

type call struct {
	expr *ast.CallExpr
	at   scope
}

// source is the module's shipped Go code, parsed once for every test.
var source = sync.OnceValues(readSource)

// readSource parses the module's shipped Go code.
func readSource() (*goSource, error) {
	s := &goSource{fset: token.NewFileSet(), pkgs: map[string]map[string]constant{}, calls: map[string][]call{}}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "tests" || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		syntax, err := parser.ParseFile(s.fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		f := &goFile{path: strings.TrimSuffix(module+"/"+filepath.ToSlash(rel), "/."), syntax: syntax, imports: map[string]string{}}
		for _, imp := range syntax.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			name := p[strings.LastIndex(p, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			f.imports[name] = p
		}
		s.files = append(s.files, f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the Go source: %w", err)
	}
	for _, f := range s.files {
		consts := s.pkgs[f.path]
		if consts == nil {
			consts = map[string]constant{}
			s.pkgs[f.path] = consts
		}
		for _, decl := range f.syntax.Decls {
			if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, spec := range g.Specs {
					v := spec.(*ast.ValueSpec)
					for i, name := range v.Names {
						if i < len(v.Values) {
							consts[name.Name] = constant{v.Values[i], f}
						}
					}
				}
			}
		}
	}
	s.walk(func(n ast.Node, at scope) {
		if c, ok := n.(*ast.CallExpr); ok {
			if name := calledName(c); name != "" {
				s.calls[name] = append(s.calls[name], call{c, at})
			}
		}
	})
	return s, nil
}

// walk visits every node of the source with its scope.
func (s *goSource) walk(visit func(ast.Node, scope)) {
	for _, f := range s.files {
		var stack []ast.Node
		var funcs []function
		ast.Inspect(f.syntax, func(n ast.Node) bool {
			if n == nil {
				if top := stack[len(stack)-1]; len(funcs) > 0 && funcs[len(funcs)-1].node == top {
					funcs = funcs[:len(funcs)-1]
				}
				stack = stack[:len(stack)-1]
				return true
			}
			switch fn := n.(type) {
			case *ast.FuncDecl:
				funcs = append(funcs, function{node: fn, typ: fn.Type, name: fn.Name.Name, method: fn.Recv != nil})
			case *ast.FuncLit:
				lit := function{node: fn, typ: fn.Type, name: assignedTo(fn, stack[len(stack)-1])}
				if len(funcs) > 0 {
					lit.outer = funcs[len(funcs)-1].node
				}
				funcs = append(funcs, lit)
			}
			visit(n, scope{f, slices.Clone(funcs)})
			stack = append(stack, n)
			return true
		})
	}
}

// assignedTo is the name of the variable a function literal is assigned to in its
// parent statement, or "".
func assignedTo(lit *ast.FuncLit, parent ast.Node) string {
	var names []*ast.Ident
	var values []ast.Expr
	switch p := parent.(type) {
	case *ast.AssignStmt:
		for _, l := range p.Lhs {
			id, _ := l.(*ast.Ident)
			names = append(names, id)
		}
		values = p.Rhs
	case *ast.ValueSpec:
		names, values = p.Names, p.Values
	}
	for i, v := range values {
		if v == lit && i < len(names) && names[i] != nil {
			return names[i].Name
		}
	}
	return ""
}

// calledName is the name of the function or method a call calls.
func calledName(c *ast.CallExpr) string {
	switch f := c.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

// position is where a node is, relative to the repository.
func (s *goSource) position(n ast.Node) string {
	p := s.fset.Position(n.Pos())
	rel, _ := filepath.Rel(root, p.Filename)
	return fmt.Sprintf("%s:%d", filepath.ToSlash(rel), p.Line)
}

// external are the constants of other modules the code passes where the test reads
// a value.
var external = map[string]string{
	"k8s.io/api/core/v1.EventTypeNormal":  "Normal",
	"k8s.io/api/core/v1.EventTypeWarning": "Warning",
}

// param identifies a parameter of a function, for the values its callers give it.
type param struct {
	fn    ast.Node
	index int
}

// values returns the strings e may be: string literals and constants, joined with +,
// prometheus.BuildFQName, and a function's parameter as each of its callers gives it.
// ok is false when some value cannot be told from the source.
func (s *goSource) values(e ast.Expr, at scope, seen map[param]bool) (vals []string, ok bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		v, err := strconv.Unquote(e.Value)
		return []string{v}, e.Kind == token.STRING && err == nil
	case *ast.ParenExpr:
		return s.values(e.X, at, seen)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return nil, false
		}
		xs, okX := s.values(e.X, at, seen)
		ys, okY := s.values(e.Y, at, seen)
		for _, x := range xs {
			for _, y := range ys {
				vals = append(vals, x+y)
			}
		}
		return vals, okX && okY
	case *ast.Ident:
		for i := len(at.funcs) - 1; i >= 0; i-- {
			if index := paramIndex(at.funcs[i].typ, e.Name); index >= 0 {
				return s.given(at.funcs[i], index, seen)
			}
		}
		if c, found := s.pkgs[at.file.path][e.Name]; found {
			return s.values(c.value, scope{file: c.file}, seen)
		}
	case *ast.SelectorExpr:
		if x, isIdent := e.X.(*ast.Ident); isIdent {
			path := at.file.imports[x.Name]
			if c, found := s.pkgs[path][e.Sel.Name]; found {
				return s.values(c.value, scope{file: c.file}, seen)
			}
			if v, found := external[path+"."+e.Sel.Name]; found {
				return []string{v}, true
			}
		}
	case *ast.CallExpr:
		if sel, isSel := e.Fun.(*ast.SelectorExpr); isSel && sel.Sel.Name == "BuildFQName" {
			return s.fqNames(e.Args, at, seen)
		}
	}
	return nil, false
}

// fqNames are the names prometheus.BuildFQName makes of namespace, subsystem and name.
func (s *goSource) fqNames(parts []ast.Expr, at scope, seen map[param]bool) (names []string, ok bool) {
	combos, ok := [][]string{nil}, true
	for _, p := range parts {
		vs, okP := s.values(p, at, seen)
		ok = ok && okP
		var next [][]string
		for _, c := range combos {
			for _, v := range vs {
				next = append(next, append(slices.Clone(c), v))
			}
		}
		combos = next
	}
	for _, c := range combos {
		if c[len(c)-1] != "" {
			names = append(names, strings.Join(slices.DeleteFunc(c, func(p string) bool { return p == "" }), "_"))
		}
	}
	return names, ok
}

// paramIndex is the index of the named parameter, or -1.
func paramIndex(typ *ast.FuncType, name string) int {
	i := 0
	for _, field := range typ.Params.List {
		for _, n := range field.Names {
			if n.Name == name {
				return i
			}
			i++
		}
		if len(field.Names) == 0 {
			i++
		}
	}
	return -1
}

// given returns the values the callers of fn give its parameter at index.
func (s *goSource) given(fn function, index int, seen map[param]bool) (vals []string, ok bool) {
	key := param{fn.node, index}
	if seen[key] {
		return nil, true
	}
	seen[key] = true
	ok = true
	for _, c := range s.callers(fn) {
		if index >= len(c.expr.Args) {
			continue
		}
		vs, okC := s.values(c.expr.Args[index], c.at, seen)
		vals, ok = append(vals, vs...), ok && okC
	}
	return vals, ok
}

// callers are the calls of fn: of a method, every call of a method of its name; of a
// function, the calls of its name in its package or through an import of it; of a
// function literal, the calls of its variable in the function it is written in.
func (s *goSource) callers(fn function) []call {
	var out []call
	for _, c := range s.calls[fn.name] {
		sel, isSel := c.expr.Fun.(*ast.SelectorExpr)
		switch {
		case fn.outer != nil:
			if !isSel && slices.ContainsFunc(c.at.funcs, func(f function) bool { return f.node == fn.outer }) {
				out = append(out, c)
			}
		case fn.method:
			if isSel {
				out = append(out, c)
			}
		case isSel:
			if x, ok := sel.X.(*ast.Ident); ok && c.at.file.imports[x.Name] == s.pathOf(fn.node) {
				out = append(out, c)
			}
		default:
			if c.at.file.path == s.pathOf(fn.node) {
				out = append(out, c)
			}
		}
	}
	return out
}

// pathOf is the import path of the package a node is in.
func (s *goSource) pathOf(n ast.Node) string {
	for _, f := range s.files {
		if f.syntax.Pos() <= n.Pos() && n.End() <= f.syntax.End() {
			return f.path
		}
	}
	return ""
}
