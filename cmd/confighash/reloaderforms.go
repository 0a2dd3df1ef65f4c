package main

import (
	"flag"
	"fmt"
	"regexp"
	"strings"
)

// Flags confighash shares with stakater/Reloader read Reloader's values where they
// mean the same, so that a command line carried over from Reloader starts and keeps
// its meaning; a form that would mean something else is refused with its translation.
// --log-level's warning is read in parseLevel.

// reloaderForms are the shared flags that take a list or a selector, each with how a
// value is rewritten (nil: as given). Reloader reads each as a list and joins a
// repeated flag's values with commas, and so do these: given twice, a selector is
// both, not the last alone.
var reloaderForms = map[string]func(string) (string, error){
	"namespaces":                        nil,
	"resources-to-ignore":               nil,
	"namespace-selector":                reloaderSelector,
	"every-workload-namespace-selector": reloaderSelector,
	"source-label-selector":             reloaderSelector,
}

// readReloaderForms makes the flags of fs that Reloader also has read its forms.
func readReloaderForms(fs *flag.FlagSet) {
	for name, rewrite := range reloaderForms {
		if f := fs.Lookup(name); f != nil {
			f.Value = &joined{Value: f.Value, rewrite: rewrite}
		}
	}
}

// joined is a flag whose values, each rewritten, are joined with commas.
type joined struct {
	flag.Value
	rewrite func(string) (string, error)
	values  []string
}

func (j *joined) Set(v string) error {
	if j.rewrite != nil {
		var err error
		if v, err = j.rewrite(v); err != nil {
			return err
		}
	}
	if v != "" {
		j.values = append(j.values, v)
	}
	return j.Value.Set(strings.Join(j.values, ","))
}

// reloaderColon is an entry in Reloader's key:value form; a value of * is key:*.
var reloaderColon = regexp.MustCompile(`^([^\s:=!(),]+)\s*:\s*([^\s:=!(),]*)$`)

// reloaderSelector rewrites a label selector as Reloader does before it parses one:
// key:value is key=value; key:* and key=* are key, the label exists. Double quotes
// around the value or an entry, which Reloader's chart writes and its reading of
// lists drops, are dropped. Any other entry is left to the label selector parser.
func reloaderSelector(v string) (string, error) {
	entries := splitOutsideParens(unquote(v))
	for i, e := range entries {
		e = unquote(e)
		key, value, eq := strings.Cut(e, "=")
		switch {
		case strings.Contains(e, ":"):
			m := reloaderColon.FindStringSubmatch(e)
			if m == nil {
				return "", fmt.Errorf("%q: Reloader's forms are key:value and key:*, with one colon; otherwise give a label selector, key=value", e)
			}
			e = m[1] + "=" + m[2]
			if m[2] == "*" {
				e = m[1]
			}
		case eq && strings.TrimSpace(value) == "*" && !strings.Contains(key, "!"):
			e = strings.TrimSpace(key)
		}
		entries[i] = e
	}
	return strings.Join(entries, ","), nil
}

// splitOutsideParens splits a selector at the commas that separate its requirements,
// not those of a set, as in "tier in (a,b),team=x".
func splitOutsideParens(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// unquote trims the spaces around s, and the double quotes around that.
func unquote(s string) string {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return strings.TrimSpace(s[1 : len(s)-1])
	}
	return s
}
