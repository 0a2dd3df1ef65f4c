package confighash

import (
	"regexp/syntax"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Bounds on what a workload's annotations make confighash parse (rule 10): the
// watcher reads every workload of the namespaces it acts in, and anyone who may edit
// one there chooses these values. What is over a bound is a problem and ignored.
const (
	// maxValueBytes is the longest annotation value parsed: room for a list of
	// MaxSources names of the longest length.
	maxValueBytes = 64 << 10
	// maxPolicyBytes is how many bytes of a workload's annotation values are parsed
	// in all.
	maxPolicyBytes = 2 * maxValueBytes
	// maxPatternBytes is the longest name pattern: that of an object name.
	maxPatternBytes = validation.DNS1123SubdomainMaxLength
	// maxPatternSize bounds a pattern's compiled program, in instructions: a short
	// pattern with nested repetitions can otherwise compile to millions of them.
	maxPatternSize = 500
	// maxPatterns is how many name patterns a workload may have, in all its lists.
	maxPatterns = 16
)

// programSize bounds from above the instructions an expression compiles to, without
// compiling it; past maxPatternSize it stops counting.
func programSize(re *syntax.Regexp) int {
	n := 1
	switch re.Op {
	case syntax.OpLiteral:
		n = len(re.Rune)
	case syntax.OpCapture, syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		n = 2 + programSize(re.Sub[0])
	case syntax.OpRepeat:
		count := re.Max
		if count < 0 {
			count = re.Min + 1
		}
		n = count * (2 + programSize(re.Sub[0]))
	case syntax.OpConcat, syntax.OpAlternate:
		for _, sub := range re.Sub {
			n = min(n+1+programSize(sub), maxPatternSize+1)
		}
	}
	return min(n, maxPatternSize+1)
}

// cost is what matching one byte of a name may cost, in units of maxMatchWork: its
// program's instructions, and a step's fixed cost in as many again.
func (p NamePattern) cost() int { return p.size + 32 }

// maxMatchWork bounds the work of matching a workload's name patterns against the
// names of its namespace, in bytes of names times the patterns' costs: at most about
// 4 ns a unit (BenchmarkWorstPatternMatch), so a fifth of a second. Counted, not
// timed, so that the webhook, the watcher and explain decide alike.
const maxMatchWork = 50_000_000

// matchWork is the work of matching the policy's patterns of a kind against names.
func (p Policy) matchWork(kind SourceKind, names []string) int {
	size := 0
	for _, pat := range p.Patterns {
		if pat.Kind == kind {
			size += pat.cost()
		}
	}
	bytes := 0
	for _, name := range names {
		bytes += len(name) + 1
	}
	return bytes * size
}
