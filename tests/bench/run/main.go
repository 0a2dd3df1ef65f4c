// Command run is `make bench`: it runs every benchmark and scenario of confighash on
// the local control plane, with the real webhook and watcher, and writes what it
// measured to docs/benchmarks.json and docs/benchmarks.md.
//
//	go run ./tests/bench/run [-scenarios burst,admission] [-out docs]
//
// With -scenarios, only those run; the others keep their last figures.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/confighash/confighash/tests/bench"
	"github.com/confighash/confighash/tests/cluster"
)

// suite is one go test invocation that measures one or more scenarios.
type suite struct {
	// names are the scenarios it measures, as -scenarios selects them.
	names []string
	// pkg is the package, "." or "./tests/e2e".
	pkg string
	// args are go test's -test.* arguments after -test.run '^$'.
	args []string
	// scenario marks the suites whose benchmark records a bench.Scenario itself;
	// the others print standard benchmark lines, parsed here.
	scenario bool
	// command reproduces a suite that is not a scenario.
	command string
	// large starts the control plane for thousands of workloads (cluster.LargeEnv).
	large bool
}

// suites is every suite, in the order they run: the quick ones first.
var suites = []suite{
	{names: []string{"BenchmarkAdmit10SourcesFromDigests", "BenchmarkAdmit10Sources", "BenchmarkAdmit1MiBSecret"}, pkg: ".",
		args:    []string{"-test.bench", ".", "-test.benchmem", "-test.count", "5"},
		command: "go test -run '^$' -bench . -benchmem -count 5 ."},
	{names: []string{"BenchmarkSourcesAtRest"}, pkg: "./sourcecache",
		args:    []string{"-test.bench", "^BenchmarkSourcesAtRest$", "-test.benchtime", "3x"},
		command: "go test -run '^$' -bench '^BenchmarkSourcesAtRest$' -benchtime 3x ./sourcecache"},
	{names: []string{"BenchmarkViewsAtRest/opted-in", "BenchmarkViewsAtRest/not-opted-in"}, pkg: "./watcher",
		args:    []string{"-test.bench", "^BenchmarkViewsAtRest$", "-test.benchtime", "3x"},
		command: "go test -run '^$' -bench '^BenchmarkViewsAtRest$' -benchtime 3x ./watcher"},
	{names: []string{"BenchmarkWaveWake/users-100", "BenchmarkWaveWake/users-1000"}, pkg: "./watcher",
		args:    []string{"-test.bench", "^BenchmarkWaveWake$", "-test.benchtime", "20x"},
		command: "go test -run '^$' -bench '^BenchmarkWaveWake$' -benchtime 20x ./watcher"},
	{names: []string{"BenchmarkMutatorWarmCache/touch", "BenchmarkMutatorWarmCache/create"}, pkg: "./tests/e2e",
		args:    []string{"-test.bench", "^BenchmarkMutatorWarmCache$", "-test.benchmem", "-test.benchtime", "2s", "-test.count", "3"},
		command: "go test -run '^$' -bench '^BenchmarkMutatorWarmCache$' -benchmem -benchtime 2s -count 3 ./tests/e2e"},
	{names: []string{"BenchmarkDeploymentCreate/without-webhook", "BenchmarkDeploymentCreate/with-noop-webhook", "BenchmarkDeploymentCreate/with-floor-webhook", "BenchmarkDeploymentCreate/with-webhook-no-sources", "BenchmarkDeploymentCreate/with-webhook"}, pkg: "./tests/e2e",
		args:    []string{"-test.bench", "^BenchmarkDeploymentCreate$", "-test.benchtime", "2s", "-test.count", "3"},
		command: "go test -run '^$' -bench '^BenchmarkDeploymentCreate$' -benchtime 2s -count 3 ./tests/e2e"},
	{names: []string{"BenchmarkChangeToRollout/fanout-1"}, pkg: "./tests/e2e",
		args:    []string{"-test.bench", "^BenchmarkChangeToRollout$/^fanout-1$", "-test.benchtime", "30x"},
		command: "go test -run '^$' -bench '^BenchmarkChangeToRollout$/^fanout-1$' -benchtime 30x ./tests/e2e"},
	{names: []string{"BenchmarkChangeToRollout/fanout-100", "BenchmarkChangeToRollout/fanout-1000"}, pkg: "./tests/e2e",
		args:    []string{"-test.bench", "^BenchmarkChangeToRollout$/^fanout-(100|1000)$", "-test.benchtime", "2x"},
		command: "go test -run '^$' -bench '^BenchmarkChangeToRollout$/^fanout-(100|1000)$' -benchtime 2x ./tests/e2e"},
	large(suite{names: []string{"BenchmarkChangeToRollout/fanout-10000"}, pkg: "./tests/e2e",
		args:    []string{"-test.bench", "^BenchmarkChangeToRollout$/^fanout-10000$", "-test.benchtime", "1x", "-test.timeout", "1h"},
		command: "CONFIGHASH_CLUSTER_LARGE=true go test -run '^$' -bench '^BenchmarkChangeToRollout$/^fanout-10000$' -benchtime 1x -timeout 1h ./tests/e2e"}),
	{names: []string{"BenchmarkChangeToRolloutAtDefaults/fanout-10"}, pkg: "./tests/e2e",
		args:    []string{"-test.bench", "^BenchmarkChangeToRolloutAtDefaults$", "-test.benchtime", "20x"},
		command: "go test -run '^$' -bench '^BenchmarkChangeToRolloutAtDefaults$' -benchtime 20x ./tests/e2e"},
	scenarioSuite("fanout-vs-reloader", "FanoutVsReloader"),
	scenarioSuite("burst", "Burst"),
	scenarioSuite("no-op", "NoOp"),
	scenarioSuite("mixed-kinds", "MixedKinds"),
	scenarioSuite("restart", "Restart"),
	scenarioSuite("admission", "Admission"),
	large(scenarioSuite("many-namespaces", "ManyNamespaces")),
	large(scenarioSuite("fan-out-2000", "FanOut2000")),
	large(scenarioSuite("memory-at-rest", "MemoryAtRest")),
	// 100,000 cycles, at about 16 a second on 2 cores.
	timedScenario("churn", "Churn", "4h"),
	{names: []string{"BenchmarkLabelledPodsOfANamespaceNotActedIn"}, pkg: "./tests/e2e",
		args:    []string{"-test.bench", "^BenchmarkLabelledPodsOfANamespaceNotActedIn$", "-test.benchtime", "1x"},
		command: "go test -run '^$' -bench '^BenchmarkLabelledPodsOfANamespaceNotActedIn$' -benchtime 1x ./tests/e2e"},
	// On the real node: as root on Linux, where tests/node runs.
	{names: []string{"restart-in-place"}, pkg: "./tests/node", scenario: true,
		args: []string{"-test.bench", "^BenchmarkScenarioRestartInPlace$", "-test.benchtime", "1x", "-test.timeout", "30m"}},
}

func scenarioSuite(name, benchmark string) suite { return timedScenario(name, benchmark, "2h") }

// timedScenario is a scenario given timeout to run.
func timedScenario(name, benchmark, timeout string) suite {
	return suite{names: []string{name}, pkg: "./tests/e2e", scenario: true,
		args: []string{"-test.bench", "^BenchmarkScenario" + benchmark + "$", "-test.benchtime", "1x", "-test.timeout", timeout}}
}

func large(s suite) suite {
	s.large = true
	return s
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "make bench: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, log io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	only := fs.String("scenarios", "", "comma-separated scenarios to run; empty: all")
	out := fs.String("out", "docs", "directory of benchmarks.json and benchmarks.md")
	readme := fs.String("readme", "README.md", "README whose table of headline figures to update; empty: none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	selected, err := selectSuites(*only)
	if err != nil {
		return err
	}
	runDoc, err := readRun(filepath.Join(*out, "benchmarks.json"))
	if err != nil {
		return err
	}
	if runDoc.Versions, err = controlPlaneVersions(ctx); err != nil {
		return err
	}
	runDoc.Machine = machine()
	runDoc.Command = "make bench"
	tmp, err := os.MkdirTemp("", "confighash-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	binaries := map[string]string{}
	for _, s := range selected {
		if binaries[s.pkg], err = testBinary(ctx, tmp, s.pkg, binaries); err != nil {
			return err
		}
		start := time.Now()
		fmt.Fprintf(log, "==> %s\n", strings.Join(s.names, ", "))
		measured, err := s.run(ctx, binaries[s.pkg], tmp, log)
		if err != nil {
			return fmt.Errorf("%s: %w", strings.Join(s.names, ", "), err)
		}
		for _, m := range measured {
			m.Date = start.UTC().Truncate(time.Second)
			if !s.scenario {
				describeMicro(&m, time.Since(start))
			}
			if s.large {
				m.Notes = append(m.Notes, "The control plane's controller-manager runs with its client limits and workers raised (--kube-api-qps=300 --kube-api-burst=600 --concurrent-deployment-syncs=20 --concurrent-replicaset-syncs=20), as a cluster of this size needs.")
			}
			runDoc.put(m)
		}
		fmt.Fprintf(log, "    took %s\n", time.Since(start).Round(time.Second))
		// Written after each suite, so that an interrupted run keeps what it measured.
		runDoc.Date = time.Now().UTC().Truncate(time.Second)
		if err := write(*out, runDoc); err != nil {
			return err
		}
		if *readme != "" {
			if err := updateReadme(*readme, &runDoc.Run); err != nil {
				return err
			}
		}
	}
	return nil
}

func selectSuites(only string) ([]suite, error) {
	if only == "" {
		return suites, nil
	}
	var out []suite
	want := strings.Split(only, ",")
	for _, s := range suites {
		if slices.ContainsFunc(s.names, func(n string) bool { return slices.Contains(want, n) }) {
			out = append(out, s)
		}
	}
	for _, w := range want {
		if !slices.ContainsFunc(out, func(s suite) bool { return slices.Contains(s.names, w) }) {
			return nil, fmt.Errorf("unknown scenario %q", w)
		}
	}
	return out, nil
}

// readRun reads the last run, to keep the scenarios this one does not measure, but
// for those no suite measures any more.
func readRun(path string) (*document, error) {
	r := &document{}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &r.Run); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r.Scenarios = slices.DeleteFunc(r.Scenarios, func(s bench.Scenario) bool {
		return !slices.ContainsFunc(suites, func(su suite) bool { return slices.Contains(su.names, s.Name) })
	})
	return r, nil
}

// document is docs/benchmarks.json.
type document struct{ bench.Run }

// put adds or replaces a scenario, in suite order.
func (r *document) put(s bench.Scenario) {
	r.Scenarios = slices.DeleteFunc(r.Scenarios, func(o bench.Scenario) bool { return o.Name == s.Name })
	r.Scenarios = append(r.Scenarios, s)
	order := map[string]int{}
	for _, su := range suites {
		for _, n := range su.names {
			order[n] = len(order)
		}
	}
	slices.SortStableFunc(r.Scenarios, func(a, b bench.Scenario) int { return order[a.Name] - order[b.Name] })
}

// testBinary compiles the package's tests once.
func testBinary(ctx context.Context, dir, pkg string, built map[string]string) (string, error) {
	if b, ok := built[pkg]; ok {
		return b, nil
	}
	name := "root"
	if pkg != "." {
		name = strings.ReplaceAll(strings.TrimPrefix(pkg, "./"), "/", "-")
	}
	bin := filepath.Join(dir, name+".test")
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, pkg)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("compile %s tests: %w", pkg, err)
	}
	return bin, nil
}

// run runs the suite's benchmarks and returns what they measured.
func (s suite) run(ctx context.Context, binary, tmp string, log io.Writer) ([]bench.Scenario, error) {
	recorded := filepath.Join(tmp, "recorded")
	if err := os.RemoveAll(recorded); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(recorded, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, binary, append([]string{"-test.run", "^$"}, s.args...)...)
	// The tests of the root package read testdata relative to it; the e2e tests, the
	// manifests relative to theirs.
	cmd.Dir = s.pkg
	cmd.Env = append(os.Environ(), bench.OutEnv+"="+recorded, fmt.Sprintf("%s=%t", cluster.LargeEnv, s.large))
	var stdout bytes.Buffer
	cmd.Stdout = io.MultiWriter(&stdout, log)
	cmd.Stderr = log
	// The test binary stops its control plane on SIGTERM; SIGKILL would leave it.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	if err := cmd.Run(); err != nil {
		return nil, err
	}
	if s.scenario {
		return bench.ReadRecorded(recorded)
	}
	measured := parseBenchmarks(&stdout, s.command)
	for _, n := range s.names {
		if !slices.ContainsFunc(measured, func(m bench.Scenario) bool { return m.Name == n }) {
			return nil, fmt.Errorf("benchmark %s printed no result", n)
		}
	}
	return measured, nil
}

// benchLine is a line of go test -bench output: name-GOMAXPROCS, iterations, then
// value-unit pairs.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.+)$`)

// parseBenchmarks turns go test -bench output into one scenario per benchmark, each
// unit a figure: the median over the repetitions, with every repetition kept.
func parseBenchmarks(r io.Reader, command string) []bench.Scenario {
	var out []bench.Scenario
	index := map[string]int{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		i, ok := index[m[1]]
		if !ok {
			i = len(out)
			index[m[1]] = i
			out = append(out, bench.Scenario{Name: m[1], Title: m[1], Command: command})
		}
		fields := strings.Fields(m[2])
		for j := 0; j+1 < len(fields); j += 2 {
			v, err := strconv.ParseFloat(fields[j], 64)
			if err != nil {
				continue
			}
			addRun(&out[i], fields[j+1], v)
		}
	}
	for i := range out {
		for j := range out[i].Figures {
			f := &out[i].Figures[j]
			runs := slices.Clone(f.Runs)
			slices.Sort(runs)
			f.Value = runs[len(runs)/2]
			if len(f.Runs) == 1 {
				f.Runs = nil
			}
		}
	}
	return out
}

func addRun(s *bench.Scenario, unit string, v float64) {
	for j := range s.Figures {
		if s.Figures[j].Unit == unit {
			s.Figures[j].Runs = append(s.Figures[j].Runs, v)
			return
		}
	}
	s.Figures = append(s.Figures, bench.Figure{Name: unit, Unit: unit, Runs: []float64{v}})
}

// controlPlaneVersions builds the control plane if needed and reads its versions from
// the cache directories build-binaries.sh reports.
func controlPlaneVersions(ctx context.Context) (map[string]string, error) {
	out, err := exec.CommandContext(ctx, "tests/cluster/build-binaries.sh", "etcd", "kwok", "kubernetes").Output()
	if err != nil {
		return nil, fmt.Errorf("build the control plane: %w", err)
	}
	versions := map[string]string{"go": runtime.Version(), "confighash": gitDescribe(ctx)}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, dir, ok := strings.Cut(line, "=")
		if ok {
			versions[name] = strings.TrimPrefix(filepath.Base(dir), name+"-")
		}
	}
	return versions, nil
}

func gitDescribe(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// machine describes this machine from /proc.
func machine() bench.Machine {
	m := bench.Machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		if _, err := fmt.Sscanf(string(data), "MemTotal: %d kB", &kb); err == nil {
			m.MemoryGB = (kb + 1<<19) >> 20
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(data))
	}
	return m
}

func write(dir string, r *document) error {
	data, err := json.MarshalIndent(r.Run, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "benchmarks.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "benchmarks.md"), markdown(&r.Run), 0o644)
}
