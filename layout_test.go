package confighash_test

import (
	"go/build"
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
// source cache and the namespace gate, and each may use leaf packages of its own
// (alert, bounded), but never the other; the shared and leaf packages import only the
// domain.
func TestAdaptersNeverImportEachOther(t *testing.T) {
	rules := map[string][]string{
		"webhook":     {module, module + "/sourcecache", module + "/namespaces"},
		"watcher":     {module, module + "/sourcecache", module + "/namespaces", module + "/alert", module + "/bounded"},
		"sourcecache": {module},
		"namespaces":  {module},
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
