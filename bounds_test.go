package confighash

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"runtime"
	"strings"
	"testing"
	"time"
)

// hostilePatterns is the named list of a tenant who means harm (issue 32, point 1):
// 1,000 alternatives of nested optional repetitions, 21 KB, that compiled to about
// 500 MiB and 4 s in one ParsePolicy.
func hostilePatterns() string {
	parts := make([]string, 1000)
	for i := range parts {
		parts[i] = fmt.Sprintf("(?:[a-z]?){1000}x%d", i)
	}
	return strings.Join(parts, "|")
}

// TestAnnotationsAreBoundedBeforeTheyAreParsed: whatever a workload's annotations hold,
// what confighash parses of them is bounded. A bad entry is a problem and ignored, and
// the valid ones still count; a list, a value or patterns over a bound on their number
// or size leave the workload as it is, never hashed from what fits.
func TestAnnotationsAreBoundedBeforeTheyAreParsed(t *testing.T) {
	names := func(n int) string {
		list := make([]string, n)
		for i := range list {
			list[i] = fmt.Sprintf("cm-%d", i)
		}
		return strings.Join(list, ",")
	}
	patterns := func(n int) string {
		list := make([]string, n)
		for i := range list {
			list[i] = fmt.Sprintf("app-%d-.*", i)
		}
		return strings.Join(list, ",")
	}
	tests := []struct {
		name        string
		annotations map[string]string
		include     int // sources included by name
		patterns    int
		problem     string
		left        bool // as it is
	}{
		{"a hostile pattern of 21 KB is refused unparsed",
			map[string]string{ReloaderConfigMapReload: hostilePatterns() + ",plain"}, 1, 0, "bytes long at most", false},
		{"a short pattern with nested repetitions is refused before it is compiled",
			map[string]string{ReloaderConfigMapReload: "(?:(?:[a-z]?){30}){30}x,app-.*"}, 0, 1, "too complex", false},
		{"a pattern just within the bound compiles",
			map[string]string{ReloaderConfigMapReload: "(?:[a-z]?){90}x"}, 0, 1, "", false},
		{"patterns beyond the bound, in all of a workload's lists, leave it as it is",
			map[string]string{ReloaderConfigMapReload: patterns(10), ReloaderSecretReload: patterns(10)}, 0, maxPatterns, "name patterns at most", true},
		{"a list of more than MaxSources entries leaves the workload as it is",
			map[string]string{AnnotationIncludeConfigMaps: names(MaxSources + 40)}, MaxSources, 0, "more than the 256 entries", true},
		{"a value longer than the bound is not parsed",
			map[string]string{AnnotationIncludeSecrets: strings.Repeat("a,", maxValueBytes/2+1)}, 0, 0, "longer than the 65536 bytes", true},
		{"the values of a workload are bounded in all",
			map[string]string{AnnotationIncludeConfigMaps: names(MaxSources), AnnotationIncludeSecrets: strings.Repeat("s", 60<<10) + ",a",
				AnnotationExcludeConfigMaps: strings.Repeat("e", 60<<10), AnnotationExcludeSecrets: strings.Repeat("e", 60<<10)},
			MaxSources + 1, 0, "more than the 131072 bytes allowed in all", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			p, problems := Vocabulary{Reloader: true}.ParsePolicy(tt.annotations, nil)
			if took := time.Since(start); took > time.Second {
				t.Errorf("ParsePolicy took %v", took)
			}
			if len(p.Include) != tt.include || len(p.Patterns) != tt.patterns {
				t.Errorf("%d included, %d patterns; want %d and %d", len(p.Include), len(p.Patterns), tt.include, tt.patterns)
			}
			_, err := Decide(Input{State: State{Policy: p.ForEveryWorkload()}, Mode: ModeEvery}, listed(nil))
			if left := errors.Is(err, ErrTooManySources); left != tt.left {
				t.Errorf("Decide() = %v, want left as it is: %v", err, tt.left)
			}
			found := tt.problem == "" && len(problems) == 0
			for _, pr := range problems {
				found = found || tt.problem != "" && strings.Contains(pr.Error(), tt.problem)
				if len(pr.Value) > problemValueBytes+len("...") {
					t.Errorf("a problem keeps %d bytes of the value", len(pr.Value))
				}
			}
			if !found {
				t.Errorf("problems %v, want one saying %q", problems, tt.problem)
			}
		})
	}
}

// TestPatternsMatchWithinTheirWork: matching a workload's patterns against a namespace
// of many names is refused, as too many sources are, beyond a bound on the work; the
// usual cases are far from it.
func TestPatternsMatchWithinTheirWork(t *testing.T) {
	policy := func(list string) Policy {
		p, problems := Vocabulary{Reloader: true}.ParsePolicy(map[string]string{ReloaderConfigMapReload: list}, nil)
		if len(problems) > 0 {
			t.Fatal(problems)
		}
		return p
	}
	many := make([]string, 20_000)
	for i := range many {
		many[i] = fmt.Sprintf("team-a-service-%d-config-%d", i, i)
	}
	tests := []struct {
		name    string
		list    string
		names   []string
		refused bool
	}{
		{"a usual pattern over 20,000 names", "app-.*", many, false},
		{"the costliest patterns over 20,000 names", strings.Repeat("(?:[a-z]?){90}x,", maxPatterns), many, true},
		{"the costliest patterns over a usual namespace", strings.Repeat("(?:[a-z]?){90}x,", maxPatterns), many[:20], false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := policy(tt.list)
			_, err := p.patternNames(nil, listed(tt.names))
			if refused := errors.Is(err, ErrTooManySources); refused != tt.refused {
				t.Fatalf("patternNames() = %v, want refused: %v", err, tt.refused)
			}
		})
	}
}

// listed is a namespace holding these ConfigMaps.
type listed []string

func (l listed) Names(SourceKind) ([]string, error) { return l, nil }
func (l listed) Read([]SourceRef) (map[SourceRef]Source, error) {
	return nil, errors.New("not read")
}

// BenchmarkWorstPatternMatch measures matching the costliest patterns within the
// bounds against the longest names, per unit of maxMatchWork (bytes of names times
// the patterns' costs).
func BenchmarkWorstPatternMatch(b *testing.B) {
	name := SourceRef{ConfigMap, strings.Repeat("a", maxPatternBytes)}
	for _, expr := range []string{"(?:[a-z]?){90}x", "[a-z]*[a-z]*[a-z]*[a-z]*[a-z]*[a-z]*y", "(?:a|b|aa|ab|[a-z]+)*x", "app-.*"} {
		p, problems := Vocabulary{Reloader: true}.ParsePolicy(map[string]string{ReloaderConfigMapReload: expr}, nil)
		if len(problems) > 0 {
			b.Fatal(problems)
		}
		pat := p.Patterns[0]
		b.Run(expr, func(b *testing.B) {
			for b.Loop() {
				pat.Matches(name)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64((len(name.Name)+1)*pat.cost()), "ns/unit")
		})
	}
}

// parseCost is what one ParsePolicy call took and allocated.
func parseCost(parse func()) (time.Duration, uint64) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	parse()
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	return took, after.TotalAlloc - before.TotalAlloc
}

// checkPatternPrograms fails if an accepted pattern compiles to more instructions than
// its size says: the size is what bounds matching.
func checkPatternPrograms(t *testing.T, p Policy) {
	t.Helper()
	for _, pat := range p.Patterns {
		re, err := syntax.Parse(pat.Expr.String(), syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			t.Fatal(err)
		}
		if len(prog.Inst) > pat.size || pat.size > maxPatternSize {
			t.Fatalf("pattern %q compiles to %d instructions, sized %d (bound %d)", pat.Expr, len(prog.Inst), pat.size, maxPatternSize)
		}
	}
}

// TestARecordIsBounded: a sources record is anyone's to write who may edit the
// workload; one with more entries than a workload can have is not a record, so the
// watcher never keeps more of it.
func TestARecordIsBounded(t *testing.T) {
	entries := func(n int) string {
		var b strings.Builder
		b.WriteString("v2")
		for i := range n {
			fmt.Fprintf(&b, " configmap/c%d=absent", i)
		}
		return b.String()
	}
	if r, err := ParseRecord(entries(maxRecordEntries)); err != nil || len(r) != maxRecordEntries {
		t.Fatalf("a record of %d entries: %d entries, %v", maxRecordEntries, len(r), err)
	}
	if _, err := ParseRecord(entries(maxRecordEntries + 1)); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("a record of %d entries: %v, want ErrBadRecord", maxRecordEntries+1, err)
	}
	if r, err := ParseRecord("\tv2 "); err != nil || r == nil || len(r) != 0 {
		t.Fatalf("an empty record: %#v, %v", r, err)
	}
}
