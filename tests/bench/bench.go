// Package bench is what `make bench` reports: each scenario's figures and whether its
// goal was met, recorded as JSON by the benchmarks that measure them and rendered, with
// the machine and versions they ran on, into docs/benchmarks.md and docs/benchmarks.json.
package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// OutEnv names the directory a benchmark records its scenario in; unset, it records
// nothing, so `go test -bench` alone still prints its figures.
const OutEnv = "CONFIGHASH_BENCH_OUT"

// Run is one `make bench`: where, when, with what, and every scenario.
type Run struct {
	Date      time.Time         `json:"date"`
	Command   string            `json:"command"`
	Machine   Machine           `json:"machine"`
	Versions  map[string]string `json:"versions"`
	Scenarios []Scenario        `json:"scenarios"`
}

// Machine is what the figures were measured on.
type Machine struct {
	CPU      string `json:"cpu"`
	Cores    int    `json:"cores"`
	MemoryGB int    `json:"memory_gib"`
	Kernel   string `json:"kernel"`
	Go       string `json:"go"`
}

// Scenario is one measured situation and its outcome.
type Scenario struct {
	// Name is stable, for scripts: "burst", "fan-out-2000", "BenchmarkAdmit10Sources".
	Name  string `json:"name"`
	Title string `json:"title"`
	Setup string `json:"setup,omitempty"`
	Load  string `json:"load,omitempty"`
	// Command reproduces this scenario alone.
	Command string   `json:"command"`
	Figures []Figure `json:"figures"`
	// Goal says what must hold; Met whether it did, in this run.
	Goal  string   `json:"goal,omitempty"`
	Met   *bool    `json:"met,omitempty"`
	Notes []string `json:"notes,omitempty"`
	// Date is when it was measured; Seconds, how long it took, setup included.
	Date    time.Time `json:"date"`
	Seconds float64   `json:"seconds"`
}

// Figure is one measured quantity. Runs holds every repetition when there were
// several; Value is then their median.
type Figure struct {
	Name  string    `json:"name"`
	Value float64   `json:"value"`
	Unit  string    `json:"unit"`
	Runs  []float64 `json:"runs,omitempty"`
}

// Add appends a figure.
func (s *Scenario) Add(name string, value float64, unit string) {
	s.Figures = append(s.Figures, Figure{Name: name, Value: value, Unit: unit})
}

// AddLatencies appends the p50, p95, p99 and max of samples, in milliseconds.
func (s *Scenario) AddLatencies(prefix string, samples []time.Duration) {
	for _, q := range []struct {
		name string
		q    float64
	}{{"p50", .50}, {"p95", .95}, {"p99", .99}, {"max", 1}} {
		s.Add(prefix+" "+q.name, Milliseconds(Quantile(samples, q.q)), "ms")
	}
}

// Judge sets the goal and whether it was met.
func (s *Scenario) Judge(goal string, met bool) {
	s.Goal, s.Met = goal, &met
}

// Figure returns the value of the named figure, or NaN.
func (s *Scenario) Figure(name string) float64 {
	for _, f := range s.Figures {
		if f.Name == name {
			return f.Value
		}
	}
	return math.NaN()
}

// Quantile returns the q-quantile of samples (nearest rank), 0 for none. It sorts
// samples.
func Quantile(samples []time.Duration, q float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	slices.Sort(samples)
	i := int(math.Ceil(q*float64(len(samples)))) - 1
	return samples[max(0, min(i, len(samples)-1))]
}

// Milliseconds returns d in milliseconds, to 0.1 ms.
func Milliseconds(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Millisecond)*10) / 10
}

// Record writes the scenario to the directory named by OutEnv, if set.
func Record(s Scenario) error {
	dir := os.Getenv(OutEnv)
	if dir == "" {
		return nil
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, s.Name+".json"), data, 0o644); err != nil {
		return fmt.Errorf("record scenario %s: %w", s.Name, err)
	}
	return nil
}

// ReadRecorded reads every scenario recorded in dir.
func ReadRecorded(dir string) ([]Scenario, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []Scenario
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var s Scenario
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// LiveHeap is the heap in use after a forced collection: what a program holds, steady
// between runs, unlike the heap in use at any other moment.
func LiveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BusyCPU is the CPU time the machine has spent outside idle since boot, from
// /proc/stat: the difference over a run, divided by its operations, is what each
// cost every process together. It fails where there is no /proc.
func BusyCPU() (time.Duration, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	// user, nice, system, then irq and softirq: not idle, iowait, the time another
	// guest stole, nor guests' time (already counted in user).
	for _, i := range []int{1, 2, 3, 6, 7} {
		ticks, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += ticks
	}
	// The kernel counts in USER_HZ, 100 per second on every Linux architecture Go
	// supports.
	return time.Duration(busy) * 10 * time.Millisecond, nil
}
