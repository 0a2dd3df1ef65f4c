package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/confighash/confighash/tests/bench"
)

// micro describes the benchmarks that print standard lines, by name: a title, what
// they measure, and the goal of those that have one, with a check of their figures,
// named by unit.
var micro = map[string]struct {
	title, setup, goal string
	met                func(fig func(unit string) float64) bool
}{
	"BenchmarkAdmit10SourcesFromDigests": {title: "Domain: 10 sources from cached digests",
		setup: "10 sources (5 ConfigMaps by envFrom, 5 Secrets by volume) of 10 keys of 1 KiB, from the per-key digests a cache keeps: references, policy, per-source digests, record, hash"},
	"BenchmarkAdmit10Sources": {title: "Domain: 10 sources from their values",
		setup: "the same, hashing the 100 KiB of values first, as after a live read"},
	"BenchmarkAdmit1MiBSecret": {title: "Domain: one 1 MiB Secret",
		setup: "one Secret holding one 1 MiB value, from its value"},
	"BenchmarkSourcesAtRest": {title: "Cache: heap per source",
		setup: "10,000 Secrets of one key of 1 KiB over 10 namespaces, as the sources cache keeps them (digests, name, resourceVersion, times), in a store indexed by namespace as the informers' are; heap after a forced collection",
		goal:  "400 bytes per source",
		met:   func(f func(string) float64) bool { return f("heap-bytes/source") <= 400 }},
	"BenchmarkViewsAtRest/opted-in": {title: "Watcher: heap per workload",
		setup: "10,000 opted-in Deployments using a ConfigMap and a Secret, with their hash and record, as the watcher keeps them, in a store indexed by namespace as the informers' are; heap after a forced collection"},
	"BenchmarkViewsAtRest/not-opted-in": {title: "Watcher: heap per workload not opted in",
		setup: "the same 10,000 Deployments without the opt-in, in namespaces that opt workloads in one by one: the watcher keeps the key of each alone",
		goal:  "no more than the key: 128 bytes per workload",
		met:   func(f func(string) float64) bool { return f("heap-bytes/workload") <= 128 }},
	"BenchmarkWaveWake/users-100": {title: "Watcher: a wake of a wave, 100 users",
		setup: "one ConfigMap used by 100 opted-in Deployments, rolled in waves of 10; the first 10 released and rolling out; one wake (a status moved on): each of the 90 waiting is checked once, finding its wave not come"},
	"BenchmarkWaveWake/users-1000": {title: "Watcher: a wake of a wave, 1,000 users",
		setup: "the same with 1,000 Deployments, 990 waiting",
		goal:  "linear in the users: under 50 ms for 1,000",
		met:   func(f func(string) float64) bool { return f("ns/op") < 50e6 }},
	"BenchmarkMutatorWarmCache/touch": {title: "Webhook in process, warm cache, a touch",
		setup: "a touched Deployment (its trigger names the version the cache holds) with 5 sources, 3 ConfigMaps and 2 Secrets of 10 keys of 1 KiB, posted as an AdmissionReview to the webhook's HTTP handler: decoding, policy, cache reads, hashing, JSON patch, response",
		goal:  "p99 under 1 ms in process",
		met:   func(f func(string) float64) bool { return f("p99-µs") < 1000 }},
	"BenchmarkMutatorWarmCache/create": {title: "Webhook in process, warm cache, a create",
		setup: "the same Deployment created: each source's current version is read with a consistent metadata GET, the five in one round, before the cache answers. Beside each create, untimed, the same process reads one source's version (one-read) and the five versions at once (five-reads) with no webhook around them: the floors its time is made of",
		goal:  "p50 within 1.3 × one consistent read, in the same run",
		met:   func(f func(string) float64) bool { return f("p50-µs") <= 1.3*f("one-read-p50-µs") }},
	"BenchmarkDeploymentCreate/without-webhook": {title: "Sequential create, webhook not called",
		setup: "sequential creates of a Deployment of 0 replicas using 5 sources, in a namespace the webhook does not serve"},
	"BenchmarkDeploymentCreate/with-noop-webhook": {title: "Sequential create, a no-op webhook",
		setup: "the same through a webhook served by the benchmark on 127.0.0.1 that allows every create unchanged: what any webhook adds here"},
	"BenchmarkDeploymentCreate/with-webhook-no-sources": {title: "Sequential create, webhook, no sources",
		setup: "the same in a namespace it serves, with a pod template that uses no source"},
	"BenchmarkDeploymentCreate/with-floor-webhook": {title: "Sequential create, the floor webhook",
		setup: "the same through a webhook served by the benchmark on 127.0.0.1 that makes one consistent read of each of the 5 sources (a metadata GET), all at once, and returns confighash's patch: what rule 4 asks of this create"},
	"BenchmarkDeploymentCreate/with-webhook": {title: "Sequential create, webhook, 5 sources",
		setup: "the same with the 5 sources; in-webhook is the webhook's own mean admission time"},
	"BenchmarkChangeToRollout/fanout-1": {title: "Change to rollout, fan-out 1",
		setup: "one ConfigMap used through envFrom by one Deployment of 0 replicas; the watcher runs with --debounce=0 --touch-rate=100000 --workers=16; from the update call returning to the Deployment's generation bump; requests from the API server's own counters",
		goal:  "p50 under 50 ms; one PATCH per workload, no LIST",
		met: func(f func(string) float64) bool {
			return f("p50-ms") < 50 && f("PATCH/workload") == 1 && f("LIST/change") == 0
		}},
	"BenchmarkChangeToRollout/fanout-100": {title: "Change to rollout, fan-out 100",
		setup: "the same with 100 Deployments",
		goal:  "one PATCH per workload, no LIST",
		met:   func(f func(string) float64) bool { return f("PATCH/workload") == 1 && f("LIST/change") == 0 }},
	"BenchmarkChangeToRolloutAtDefaults/fanout-10": {title: "Change to rollout, fan-out 10, default flags",
		setup: "one ConfigMap used by 10 Deployments of 0 replicas; the watcher with its default flags: the first 10 workloads a change reaches are touched together; a change alone (no apply wrote it, and the ConfigMap had not been written for 5 s before) is touched at once, and one with others (an apply's, a burst) once none has reached a workload for 100 ms (--quiet-period), at most 1 s after the first (--debounce), so that a release's writes roll once. This benchmark's rounds follow each other within 5 s: a burst, which waits the quiet period (fanout-vs-reloader times changes alone)",
		goal:  "p50 under 400 ms; one PATCH per workload, no LIST",
		met: func(f func(string) float64) bool {
			return f("p50-ms") < 400 && f("PATCH/workload") == 1 && f("LIST/change") == 0
		}},
	"BenchmarkChangeToRollout/fanout-1000": {title: "Change to rollout, fan-out 1,000",
		setup: "the same with 1,000 Deployments",
		goal:  "all 1,000 rolled within 10 s with the touch rate raised; one PATCH per workload, no LIST",
		met: func(f func(string) float64) bool {
			return f("max-ms") < 10000 && f("PATCH/workload") == 1 && f("LIST/change") == 0
		}},
	"BenchmarkChangeToRollout/fanout-10000": {title: "Change to rollout, fan-out 10,000",
		setup: "the same with 10,000 Deployments, on the control plane for thousands of workloads; then, in the same run, the floor: a client with no rate limit, 16 requests at once as the watcher's 16 workers, patching an annotation onto the 10,000 pod templates itself, timed to the last generation bump",
		goal:  "all 10,000 rolled within 1.5 × the plain-PATCH floor; one PATCH per workload, no LIST",
		met: func(f func(string) float64) bool {
			return f("max-ms") <= 1.5*f("plain-PATCH-floor-ms") && f("PATCH/workload") == 1 && f("LIST/change") == 0
		}},
}

// describeMicro titles a benchmark that prints standard lines and judges its goal,
// if it has one.
func describeMicro(s *bench.Scenario, took time.Duration) {
	s.Seconds = took.Round(time.Second).Seconds()
	d, ok := micro[s.Name]
	if !ok {
		return
	}
	s.Title, s.Setup = d.title, d.setup
	if d.met == nil {
		return
	}
	s.Judge(d.goal, d.met(func(unit string) float64 {
		for _, f := range s.Figures {
			if f.Unit == unit {
				return f.Value
			}
		}
		return math.NaN()
	}))
}

// markdown renders docs/benchmarks.md.
func markdown(r *bench.Run) []byte {
	var b bytes.Buffer
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	p("# Benchmarks")
	p("")
	p("Written by `make bench` (tests/bench/run) from what it measured; do not edit by hand.")
	p("The same figures, for scripts: [benchmarks.json](benchmarks.json). `make bench SCENARIOS=burst,admission`")
	p("measures only those and keeps the others.")
	p("")
	m := r.Machine
	p("- **Machine:** %s, %d cores, %d GiB, %s.", m.CPU, m.Cores, m.MemoryGB, m.Kernel)
	p("- **Versions:** confighash %s, Kubernetes %s, etcd %s, kwok %s, %s.", r.Versions["confighash"], r.Versions["kubernetes"], r.Versions["etcd"], r.Versions["kwok"], r.Versions["go"])
	p("- **Last run:** %s, `%s`.", r.Date.Format("2006-01-02 15:04 MST"), r.Command)
	p("")
	p("The local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,")
	p("kwok) runs on the same cores as confighash and the load, so every figure includes their")
	p("competition for the CPU. The webhook and the watcher run as processes, with their")
	p("default settings unless a scenario says otherwise.")
	p("")
	p("## Summary")
	p("")
	p("| scenario | goal | met |")
	p("|---|---|---|")
	for _, s := range r.Scenarios {
		if s.Met == nil {
			continue
		}
		p("| [%s](#%s) | %s | %s |", s.Title, anchor(s.Title), s.Goal, metText(s.Met))
	}
	for _, s := range r.Scenarios {
		p("")
		p("## %s", s.Title)
		p("")
		if s.Setup != "" {
			p("- **Setup:** %s.", s.Setup)
		}
		if s.Load != "" {
			p("- **Load:** %s.", s.Load)
		}
		p("- **Run:** `%s` (%s, %s).", s.Command, s.Date.Format("2006-01-02"), duration(s.Seconds))
		if s.Goal != "" {
			p("- **Goal:** %s. **%s.**", s.Goal, metText(s.Met))
		}
		p("")
		p("| figure | value |")
		p("|---|---|")
		for _, f := range s.Figures {
			p("| %s | %s |", f.Name, value(f))
		}
		for _, n := range s.Notes {
			p("")
			p("%s", n)
		}
	}
	return b.Bytes()
}

func metText(met *bool) string {
	switch {
	case met == nil:
		return "no goal"
	case *met:
		return "Met"
	default:
		return "Not met"
	}
}

// anchor is GitHub's anchor for a heading.
func anchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// value renders a figure: its value and unit, and the range of its repetitions.
func value(f bench.Figure) string {
	unit := f.Unit
	switch {
	case unit == "count":
		unit = ""
	case unit == f.Name: // a go test -bench unit, as p50-ms or allocs/op
		unit = unit[strings.LastIndexByte(unit, '-')+1:]
		if unit != "ms" && unit != "µs" {
			unit = ""
		}
	}
	text := strings.TrimSpace(number(f.Value) + " " + unit)
	if len(f.Runs) > 1 {
		lo, hi := f.Runs[0], f.Runs[0]
		for _, v := range f.Runs {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		text += fmt.Sprintf(" (%s-%s over %d runs)", number(lo), number(hi), len(f.Runs))
	}
	return text
}

func number(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

func duration(seconds float64) string {
	if seconds < 60 {
		return fmt.Sprintf("%.0f s", seconds)
	}
	return fmt.Sprintf("%.0f min", seconds/60)
}

// headlines are the figures README shows, from the scenarios that measure them: each
// a figure's name and the label README gives it.
var headlines = []struct {
	scenario, what string
	figures        [][2]string
}{
	{"burst", "300 updates in 30 s to 10 ConfigMaps used by 10 Deployments",
		[][2]string{{"rollouts", "rollouts"}, {"coalesced", "coalesced"}, {"lost", "lost"}, {"spurious", "spurious"}, {"latency p99", "p99"}}},
	{"restart", "the watcher killed during a stream of updates",
		[][2]string{{"updates", "updates"}, {"lost", "lost"}, {"spurious", "spurious"}}},
	{"fan-out-2000", "one ConfigMap used by 2,000 Deployments, touch rate raised",
		[][2]string{{"raised latency p50", "p50"}, {"raised latency max", "all rolled"}}},
	{"BenchmarkChangeToRollout/fanout-10000", "one ConfigMap used by 10,000 Deployments, touch rate raised, against a client patching them itself",
		[][2]string{{"max-ms", "all rolled"}, {"plain-PATCH-floor-ms", "the client"}}},
	{"memory-at-rest", "550 MiB of Secret and ConfigMap values, 2,000 workloads",
		[][2]string{{"all watcher RSS", "watcher RSS"}, {"all webhook RSS", "webhook RSS"}}},
	{"fanout-vs-reloader", "one ConfigMap change alone reaching 10 Deployments, then 100, at default flags, against Reloader's way in the same run",
		[][2]string{{"fan-out 10, confighash p50", "p50"}, {"fan-out 10, Reloader's way p50", "Reloader's way"}, {"fan-out 10, confighash max", "max"}, {"fan-out 10, Reloader's way max", "Reloader's way"},
			{"fan-out 100, confighash p50", "at 100, p50"}, {"fan-out 100, Reloader's way p50", "Reloader's way"}}},
	{"admission", "3,000 creates with 5 sources, 16 in parallel: added by the webhook, against a webhook making one consistent read of each source",
		[][2]string{{"added p50", "p50"}, {"floor webhook added p50", "the floor's"}, {"added p99", "p99"}, {"floor webhook added p99", "the floor's"}}},
	{"BenchmarkChangeToRollout/fanout-1", "ConfigMap update to rollout, no debounce",
		[][2]string{{"p50-ms", "p50"}}},
}

// readmeBlock renders the headline figures for README, between its bench markers.
func readmeBlock(r *bench.Run) string {
	var b strings.Builder
	b.WriteString("| scenario | figures | goal met |\n|---|---|---|\n")
	for _, h := range headlines {
		i := slices.IndexFunc(r.Scenarios, func(s bench.Scenario) bool { return s.Name == h.scenario })
		if i < 0 {
			continue
		}
		s := r.Scenarios[i]
		var figs []string
		for _, fig := range h.figures {
			for _, f := range s.Figures {
				if f.Name == fig[0] {
					figs = append(figs, fig[1]+" "+value(f))
				}
			}
		}
		fmt.Fprintf(&b, "| [%s](docs/benchmarks.md#%s) | %s | %s |\n", h.what, anchor(s.Title), strings.Join(figs, ", "), metText(s.Met))
	}
	fmt.Fprintf(&b, "\n%s, %d cores; control plane on the same cores. From `make bench`, %s.\n", r.Machine.CPU, r.Machine.Cores, r.Date.Format("2006-01-02"))
	return b.String()
}

// Markers around the block of README that make bench writes.
const (
	readmeBegin = "<!-- make bench writes this table -->\n"
	readmeEnd   = "<!-- end of the table make bench writes -->\n"
)

// updateReadme replaces README's headline block.
func updateReadme(path string, r *bench.Run) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	text := string(data)
	begin, end := strings.Index(text, readmeBegin), strings.Index(text, readmeEnd)
	if begin < 0 || end < begin {
		return fmt.Errorf("%s has no block between %q and %q", path, strings.TrimSpace(readmeBegin), strings.TrimSpace(readmeEnd))
	}
	text = text[:begin+len(readmeBegin)] + readmeBlock(r) + text[end:]
	return os.WriteFile(path, []byte(text), 0o644)
}
