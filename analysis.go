package confighash

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Analysis is the metric gate of a bake (AnnotationAnalysis): a query the install
// names (the watcher's --analysis-query), whose every value must hold against a
// threshold while the first wave bakes. "error-ratio < 0.05". A namespace user picks a
// query and a threshold, never the query's text: the install's queries read the
// canary's own namespace and workload.
type Analysis struct {
	Query     string
	Op        string
	Threshold float64
}

// maxAnalysisBytes bounds the annotation before it is read.
const maxAnalysisBytes = 256

const queryName = `[a-z0-9]([-a-z0-9]*[a-z0-9])?`

var (
	analysisText = regexp.MustCompile(`^\s*(` + queryName + `)\s*(<=|>=|<|>)\s*(\S+)\s*$`)
	queryNameRE  = regexp.MustCompile(`^` + queryName + `$`)
)

// IsQueryName reports whether a query of the install may be named so: lowercase
// letters, digits and dashes, as an analysis names it.
func IsQueryName(name string) bool {
	return len(name) <= maxAnalysisBytes && queryNameRE.MatchString(name)
}

const wantAnalysis = "want a query the install names, a comparison and a number, such as error-ratio < 0.05"

// IsZero reports whether no gate is set.
func (a Analysis) IsZero() bool { return a.Query == "" }

func (a Analysis) String() string {
	if a.IsZero() {
		return ""
	}
	return fmt.Sprintf("%s %s %s", a.Query, a.Op, strconv.FormatFloat(a.Threshold, 'g', -1, 64))
}

// Holds reports whether a value of the query passes the gate.
func (a Analysis) Holds(v float64) bool {
	switch a.Op {
	case "<":
		return v < a.Threshold
	case "<=":
		return v <= a.Threshold
	case ">":
		return v > a.Threshold
	case ">=":
		return v >= a.Threshold
	}
	return false
}

// parseAnalysis reads "name < number"; empty text sets nothing.
func parseAnalysis(text string) (Analysis, error) {
	if strings.TrimSpace(text) == "" {
		return Analysis{}, nil
	}
	if len(text) > maxAnalysisBytes {
		return Analysis{}, fmt.Errorf("analysis of %d bytes, more than %d: %s", len(text), maxAnalysisBytes, wantAnalysis)
	}
	m := analysisText.FindStringSubmatch(text)
	if m == nil {
		return Analysis{}, fmt.Errorf("analysis %q: %s", text, wantAnalysis)
	}
	threshold, err := strconv.ParseFloat(m[4], 64)
	if err != nil || math.IsNaN(threshold) || math.IsInf(threshold, 0) {
		return Analysis{}, fmt.Errorf("analysis %q: %s", text, wantAnalysis)
	}
	return Analysis{Query: m[1], Op: m[3], Threshold: threshold}, nil
}
