package docs

import (
	"go/ast"
	"go/token"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// What the code names, as the drift test compares it with the docs. A value the test
// cannot tell from the source (a name built at run time) is an error: names are
// constants, so that this test and a reader can find them.

// annotationNames are the names under confighash's domain the code reads or writes,
// each Domain + "/..." (confighash.Domain elsewhere), and, for the docs to mention
// too, the code's other strings under the domain (the prefixes of its keyed digests).
func annotationNames(t *testing.T, s *goSource) (names, mentionable map[string]string) {
	names, mentionable = map[string]string{}, map[string]string{}
	s.walk(func(n ast.Node, at scope) {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if n.Op != token.ADD || !isDomain(n.X, at) {
				return
			}
			vals, ok := s.values(n, at, map[param]bool{})
			if !ok {
				t.Errorf("%s: cannot tell the name built here; build names under the domain from constants", s.position(n))
			}
			for _, v := range vals {
				if !strings.HasSuffix(v, "/") { // the domain's prefix, not a name
					names[v] = s.position(n)
				}
			}
		case *ast.BasicLit:
			if v, err := strconv.Unquote(n.Value); err == nil && strings.HasPrefix(v, "confighash.dev/") {
				v, _, _ = strings.Cut(v, "\x00")
				mentionable[v] = s.position(n)
			}
		}
	})
	return names, mentionable
}

// isDomain reports whether e is the domain constant.
func isDomain(e ast.Expr, at scope) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == "Domain" && at.file.path == module
	case *ast.SelectorExpr:
		x, ok := e.X.(*ast.Ident)
		return ok && e.Sel.Name == "Domain" && at.file.imports[x.Name] == module
	}
	return false
}

// reloaderName is one of stakater/Reloader's annotations, in any of its typed forms.
var reloaderName = regexp.MustCompile(`^([a-z0-9-]+\.)*reloader\.stakater\.com/[a-z0-9-]+$`)

// reloaderNames are Reloader's annotations the code names.
func reloaderNames(s *goSource) map[string]string {
	names := map[string]string{}
	s.walk(func(n ast.Node, _ scope) {
		if lit, ok := n.(*ast.BasicLit); ok {
			if v, err := strconv.Unquote(lit.Value); err == nil && reloaderName.MatchString(v) {
				names[v] = s.position(lit)
			}
		}
	})
	return names
}

// metric is a metric the code registers.
type metric struct {
	at   string
	kind string // the Opts type: CounterOpts, HistogramOpts, ...
}

// metrics are the confighash_ metrics the code registers: the names of the
// prometheus *Opts literals (Namespace, Subsystem, Name) and of prometheus.NewDesc.
func metrics(t *testing.T, s *goSource) map[string]metric {
	found := map[string]metric{}
	add := func(n ast.Node, kind string, names []string, ok bool) {
		if !ok {
			t.Errorf("%s: cannot tell the name of the metric registered here; give it in constants", s.position(n))
		}
		for _, name := range names {
			if strings.HasPrefix(name, "confighash_") {
				found[name] = metric{s.position(n), kind}
			}
		}
	}
	s.walk(func(n ast.Node, at scope) {
		switch n := n.(type) {
		case *ast.CompositeLit:
			sel, ok := n.Type.(*ast.SelectorExpr)
			if !ok || !isPrometheus(sel.X, at) || !strings.HasSuffix(sel.Sel.Name, "Opts") {
				return
			}
			parts := map[string]ast.Expr{"Namespace": emptyString, "Subsystem": emptyString}
			for _, el := range n.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if key, ok := kv.Key.(*ast.Ident); ok {
						parts[key.Name] = kv.Value
					}
				}
			}
			if parts["Name"] == nil {
				return
			}
			names, ok := s.fqNames([]ast.Expr{parts["Namespace"], parts["Subsystem"], parts["Name"]}, at, map[param]bool{})
			add(n, sel.Sel.Name, names, ok)
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && isPrometheus(sel.X, at) && sel.Sel.Name == "NewDesc" {
				names, ok := s.values(n.Args[0], at, map[param]bool{})
				add(n, "Desc", names, ok)
			}
		}
	})
	return found
}

var emptyString = &ast.BasicLit{Kind: token.STRING, Value: `""`}

// isPrometheus reports whether e names client_golang's prometheus package.
func isPrometheus(e ast.Expr, at scope) bool {
	x, ok := e.(*ast.Ident)
	return ok && at.file.imports[x.Name] == "github.com/prometheus/client_golang/prometheus"
}

// sink is a way of sending an Event: the calls, and where their reason and type are
// among the arguments; a type index of -1 is a type the sink fixes.
type sink struct {
	calls       []call
	reason, typ int
	types       []string
}

// recorderMethods are client-go's record.EventRecorder's, with the index of the
// reason and of the type among their arguments.
var recorderMethods = map[string][2]int{"Event": {2, 1}, "Eventf": {2, 1}, "AnnotatedEventf": {3, 2}}

// eventReasons are the reasons of the Events the code sends, each with its types
// (Normal, Warning) and where. A call whose reason is a parameter of the function it
// is in makes that function a sink too, read at its callers: a recorder wrapper.
func eventReasons(t *testing.T, s *goSource) map[string]map[string]string {
	var sinks []sink
	for name, at := range recorderMethods {
		var calls []call
		for _, c := range s.calls[name] {
			if _, ok := c.expr.Fun.(*ast.SelectorExpr); ok {
				calls = append(calls, c)
			}
		}
		sinks = append(sinks, sink{calls: calls, reason: at[0], typ: at[1]})
	}
	reasons := map[string]map[string]string{}
	wrappers := map[ast.Node]bool{}
	for i := 0; i < len(sinks); i++ {
		sk := sinks[i]
		for _, c := range sk.calls {
			args := c.expr.Args
			if len(args) <= max(sk.reason, sk.typ) {
				continue
			}
			if fn, index, ok := paramOf(args[sk.reason], c.at); ok {
				if !wrappers[fn.node] {
					wrappers[fn.node] = true
					wrapper := sink{calls: s.callers(fn), reason: index, typ: -1, types: sk.types}
					if sk.typ >= 0 {
						if tfn, tindex, ok := paramOf(args[sk.typ], c.at); ok && tfn.node == fn.node {
							wrapper.typ = tindex
						} else {
							wrapper.types = s.mustValues(t, args[sk.typ], c.at)
						}
					}
					sinks = append(sinks, wrapper)
				}
				continue
			}
			types := sk.types
			if sk.typ >= 0 {
				types = s.mustValues(t, args[sk.typ], c.at)
			}
			for _, r := range s.mustValues(t, args[sk.reason], c.at) {
				if reasons[r] == nil {
					reasons[r] = map[string]string{}
				}
				for _, ty := range types {
					reasons[r][ty] = s.position(c.expr)
				}
			}
		}
	}
	return reasons
}

// paramOf reports whether e is a parameter of a function around it, and which.
func paramOf(e ast.Expr, at scope) (function, int, bool) {
	id, ok := e.(*ast.Ident)
	if !ok {
		return function{}, 0, false
	}
	for i := len(at.funcs) - 1; i >= 0; i-- {
		if index := paramIndex(at.funcs[i].typ, id.Name); index >= 0 {
			return at.funcs[i], index, true
		}
	}
	return function{}, 0, false
}

// mustValues is values, an error where the source does not tell them.
func (s *goSource) mustValues(t *testing.T, e ast.Expr, at scope) []string {
	vals, ok := s.values(e, at, map[param]bool{})
	if !ok {
		t.Errorf("%s: cannot tell the value given here; give it as a constant", s.position(e))
	}
	return vals
}
