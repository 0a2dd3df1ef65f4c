package watcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/confighash/confighash"
)

// The metric gate of a bake: while the first wave bakes, a query the install names
// (--analysis-query), for the canary's namespace and workload, is read from Prometheus
// (--prometheus-url), and each value it returns must hold against the threshold the
// workload, its source or its namespace sets (confighash.dev/analysis). A value that
// does not hold fails the canary. A Prometheus that cannot be read proves nothing: the
// wave halts, and reverts nothing. So does one with no data at the bake's last check:
// before it, the canary's new pods may not have been scraped yet.

// analysisTimeout bounds one query; analysisBytes and analysisSamples, its answer.
const (
	analysisTimeout = 5 * time.Second
	analysisBytes   = 1 << 20
	analysisSamples = 1000
)

// analyst reads the metric gates of bakes from Prometheus.
type analyst struct {
	url     string
	queries map[string]string
	client  *http.Client
	metrics Recorder
}

func newAnalyst(prometheusURL string, queries map[string]string, metrics Recorder) *analyst {
	return &analyst{url: strings.TrimSuffix(prometheusURL, "/"), queries: queries, client: &http.Client{Timeout: analysisTimeout}, metrics: metrics}
}

// check reads the gate for the workload: why it fails, "" when every value holds; and
// unsure when it could not be read, which proves no failure. No data holds until the
// last check of the bake.
func (a *analyst) check(ctx context.Context, v *view, gate confighash.Analysis, last bool) (why string, unsure bool) {
	why, result := a.read(ctx, v, gate, last)
	a.metrics.AnalysisRead(result)
	return why, result == AnalysisUnreadable || result == AnalysisNoData && why != ""
}

// read reads the gate, and says why it fails or could not be read.
func (a *analyst) read(ctx context.Context, v *view, gate confighash.Analysis, last bool) (string, AnalysisResult) {
	text, ok := a.queries[gate.Query]
	switch {
	case !ok:
		return fmt.Sprintf("the metric gate %q names no query of the install (--analysis-query)", gate), AnalysisUnreadable
	case a.url == "":
		return fmt.Sprintf("the metric gate %q cannot be read: the watcher has no --prometheus-url", gate), AnalysisUnreadable
	}
	query := strings.NewReplacer("$namespace", v.Namespace, "$workload", v.Name).Replace(text)
	values, err := a.query(ctx, query)
	values = slices.DeleteFunc(values, math.IsNaN) // 0/0: no traffic, no data
	switch {
	case err != nil:
		return fmt.Sprintf("the metric gate %q could not be read from Prometheus: %v", gate, err), AnalysisUnreadable
	case len(values) == 0 && !last:
		return "", AnalysisNoData
	case len(values) == 0:
		return fmt.Sprintf("the metric gate %q: Prometheus had no data for it by the end of the bake", gate), AnalysisNoData
	}
	for _, value := range values {
		if !gate.Holds(value) {
			return fmt.Sprintf("the metric gate failed: %s is %s, want %s %s", gate.Query, strconv.FormatFloat(value, 'g', 4, 64),
				gate.Op, strconv.FormatFloat(gate.Threshold, 'g', -1, 64)), AnalysisFails
		}
	}
	return "", AnalysisHolds
}

// promAnswer is what Prometheus's instant query API answers, the parts read.
type promAnswer struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	} `json:"data"`
}

// query runs an instant query and returns its values: a vector's, or a scalar.
func (a *analyst) query(ctx context.Context, query string) ([]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, analysisTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.url+"/api/v1/query?"+url.Values{"query": {query}}.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, analysisBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > analysisBytes {
		return nil, fmt.Errorf("an answer of more than %d bytes", analysisBytes)
	}
	var answer promAnswer
	if err := json.Unmarshal(body, &answer); err != nil {
		return nil, fmt.Errorf("%s: an answer that is not Prometheus's: %w", resp.Status, err)
	}
	if answer.Status != "success" {
		return nil, fmt.Errorf("%s: %s", resp.Status, answer.Error)
	}
	switch answer.Data.ResultType {
	case "scalar":
		var sample [2]any
		if err := json.Unmarshal(answer.Data.Result, &sample); err != nil {
			return nil, err
		}
		v, err := sampleValue(sample)
		return []float64{v}, err
	case "vector":
		var vector []struct {
			Value [2]any `json:"value"`
		}
		if err := json.Unmarshal(answer.Data.Result, &vector); err != nil {
			return nil, err
		}
		if len(vector) > analysisSamples {
			return nil, fmt.Errorf("%d series, more than %d", len(vector), analysisSamples)
		}
		values := make([]float64, len(vector))
		for i, s := range vector {
			if values[i], err = sampleValue(s.Value); err != nil {
				return nil, err
			}
		}
		return values, nil
	}
	return nil, fmt.Errorf("a %s, not a vector or a scalar", answer.Data.ResultType)
}

// sampleValue reads a sample's value, which Prometheus writes as a string.
func sampleValue(sample [2]any) (float64, error) {
	text, ok := sample[1].(string)
	if !ok {
		return 0, errors.New("a sample with no value")
	}
	return strconv.ParseFloat(text, 64)
}
