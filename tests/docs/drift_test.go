package docs

import (
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/confighash/confighash/alert"
	"github.com/confighash/confighash/watcher"
	"github.com/confighash/confighash/webhook"
)

// Each test compares one kind of name both ways: what the code has and the docs do
// not list, and what the docs name and the code does not have. Each failure says
// which name is missing where.

// otherPrograms are the flags of other programs that the docs name, so that a flag of
// confighash's misspelt in the docs does not pass for one of theirs.
var otherPrograms = map[string][]string{
	"kubectl":                 {"dry-run", "field-manager", "field-selector", "force", "from", "from-file", "from-literal", "replicas", "server-side", "show-labels"},
	"helm":                    {"create-namespace", "set", "version"},
	"skopeo":                  {"all"},
	"ctr":                     {"platform"},
	"kubectl krew":            {"manifest-url"},
	"gcloud":                  {"format"},
	"sha256sum, shasum":       {"check"},
	"k3s":                     {"kube-apiserver-arg"},
	"kube-apiserver":          {"admission-control-config-file", "etcd-compaction-interval", "etcd-servers-overrides"},
	"kube-controller-manager": {"concurrent-deployment-syncs", "concurrent-replicaset-syncs"},
	// stakater/Reloader's own (internal/pkg/util's ConfigureReloaderFlags), for the
	// migration guide; those confighash shares are its own too.
	"Reloader": {"auto-reload-all", "configmap-annotation", "secret-annotation", "auto-annotation", "ignore-annotation",
		"configmap-auto-annotation", "secret-auto-annotation", "auto-search-annotation", "search-match-annotation",
		"pause-deployment-annotation", "pause-deployment-time-annotation", "webhook-url", "ignored-workload-types",
		"namespaces-to-ignore", "resource-label-selector", "is-Argo-Rollouts", "reload-strategy", "reload-on-create",
		"reload-on-delete", "enable-ha", "sync-after-restart", "enable-pprof", "pprof-addr"},
}

func TestFlagsAreDocumented(t *testing.T) {
	help := commandFlags(t)
	install := readDoc(t, "docs/install.md")
	listed := map[string]map[string]bool{}
	for _, tb := range tables(install.section("## Flags")) {
		if len(tb.header) < 2 || tb.header[0] != "flag" || tb.header[1] != "component" {
			continue
		}
		for _, row := range tb.rows {
			commands := components(t, row[1], help)
			for _, f := range flagsIn(row[0]) {
				for _, c := range commands {
					if !help[c][f] {
						t.Errorf("docs/install.md's flags tables list %s for confighash %s, which has no such flag", dashed(f), c)
					}
					if listed[c] == nil {
						listed[c] = map[string]bool{}
					}
					listed[c][f] = true
				}
			}
		}
	}
	for _, c := range slices.Sorted(maps.Keys(help)) {
		for _, f := range slices.Sorted(maps.Keys(help[c])) {
			if !listed[c][f] {
				t.Errorf("confighash %s %s is in no row of docs/install.md's flags tables (## Flags, a row for %s)", c, dashed(f), c)
			}
		}
	}

	known := map[string]bool{"help": true}
	for _, flags := range help {
		maps.Copy(known, flags)
	}
	for _, flags := range otherPrograms {
		for _, f := range flags {
			known[f] = true
		}
	}
	for _, d := range allDocs(t) {
		for _, m := range docFlag.FindAllStringSubmatch(d.text, -1) {
			f := m[1]
			prefix, isPrefix := strings.CutSuffix(f, "-") // --leader-elect-*
			if !known[f] && !(isPrefix && slices.ContainsFunc(slices.Collect(maps.Keys(known)), func(k string) bool { return strings.HasPrefix(k, prefix+"-") })) {
				t.Errorf("%s names --%s, which no confighash command has (nor is it in otherPrograms)", d.path, f)
			}
		}
	}
}

// docFlag is a --flag in prose or code; one ending in - is a prefix, as --alert-*.
var docFlag = regexp.MustCompile(`(?:^|[^A-Za-z0-9-])--([A-Za-z][A-Za-z0-9-]*)`)

// helpFlag is a flag in --help: "  --name  [$VAR]" or Go's "  -name string".
var helpFlag = regexp.MustCompile(`(?m)^  --?([A-Za-z0-9][A-Za-z0-9-]*)`)

// command is a command in confighash's usage.
var command = regexp.MustCompile(`(?m)^  ([a-z]+)  +\S`)

// commandFlags are the flags of each command, by name without dashes, as the binary's
// --help lists them; the commands are those its usage lists.
func commandFlags(t *testing.T) map[string]map[string]bool {
	bin := filepath.Join(t.TempDir(), "confighash")
	build := exec.Command("go", "build", "-o", bin, "./cmd/confighash")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/confighash: %v\n%s", err, out)
	}
	usage, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("confighash: %v\n%s", err, usage)
	}
	_, commands, _ := strings.Cut(string(usage), "Commands:")
	flags := map[string]map[string]bool{}
	for _, c := range command.FindAllStringSubmatch(commands, -1) {
		out, err := exec.Command(bin, c[1], "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("confighash %s --help: %v\n%s", c[1], err, out)
		}
		flags[c[1]] = map[string]bool{}
		for _, f := range helpFlag.FindAllStringSubmatch(string(out), -1) {
			flags[c[1]][f[1]] = true
		}
	}
	if len(flags["webhook"]) == 0 || len(flags["watcher"]) == 0 {
		t.Fatalf("no flags read from the webhook's or the watcher's --help: %v", flags)
	}
	return flags
}

// components are the commands a flags row's component cell names: "both" is the
// webhook and the watcher.
func components(t *testing.T, cell string, help map[string]map[string]bool) []string {
	var out []string
	for _, c := range strings.FieldsFunc(strings.ReplaceAll(cell, " and ", ","), func(r rune) bool { return r == ',' }) {
		switch c = strings.TrimSpace(c); {
		case c == "both":
			out = append(out, "webhook", "watcher")
		case help[c] != nil:
			out = append(out, c)
		default:
			t.Errorf("docs/install.md's flags tables: component %q is no command of confighash (both, %s)", c, strings.Join(slices.Sorted(maps.Keys(help)), ", "))
		}
	}
	return out
}

var flagSpan = regexp.MustCompile(`^--?([A-Za-z0-9][A-Za-z0-9-]*)$`)

// flagsIn are the flags named in a flags row's first cell.
func flagsIn(cell string) []string {
	var out []string
	for _, c := range code(cell) {
		if m := flagSpan.FindStringSubmatch(c); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// dashed is a flag as it is written: -n, --namespace.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// ourName is an annotation or label under confighash's domain in a text, also as a
// JSON pointer writes it (confighash.dev~1hash); a trailing - (kubectl's removal) is
// not part of it.
var ourName = regexp.MustCompile(`confighash\.dev(?:/|~1)[a-z0-9]+(?:-[a-z0-9]+)*(?:/[a-z0-9]+(?:-[a-z0-9]+)*)*`)

// reloaderMention is one of Reloader's annotations in a text.
var reloaderMention = regexp.MustCompile(`(?:[a-z0-9-]+\.)*reloader\.stakater\.com/[a-z0-9]+(?:-[a-z0-9]+)*`)

// namesIn are the names under confighash's domain in a text.
func namesIn(text string) []string {
	var out []string
	for _, n := range ourName.FindAllString(text, -1) {
		out = append(out, strings.ReplaceAll(n, "~1", "/"))
	}
	return out
}

// tableNames are the names under confighash's domain in the first cells of a text's
// tables: those its rows are about.
func tableNames(text string) map[string]bool {
	names := map[string]bool{}
	for _, tb := range tables(text) {
		for _, row := range tb.rows {
			for _, n := range namesIn(row[0]) {
				names[n] = true
			}
		}
	}
	return names
}

func TestAnnotationsAndLabelsAreDocumented(t *testing.T) {
	s := mustSource(t)
	names, mentionable := annotationNames(t, s)
	entries := tableNames(readDoc(t, "docs/annotations.md").text)
	for _, n := range slices.Sorted(maps.Keys(names)) {
		if !entries[n] {
			t.Errorf("%s (%s) is in no table of docs/annotations.md (a row whose first cell names it)", n, names[n])
		}
	}

	migration := readDoc(t, "docs/migrating-from-reloader.md")
	mentioned := map[string]bool{}
	for _, n := range reloaderMention.FindAllString(migration.text, -1) {
		mentioned[n] = true
	}
	reloader := reloaderNames(s)
	for _, n := range slices.Sorted(maps.Keys(reloader)) {
		if !mentioned[n] {
			t.Errorf("Reloader's %s (%s) is not in docs/migrating-from-reloader.md", n, reloader[n])
		}
	}

	for _, d := range allDocs(t) {
		for _, line := range strings.Split(d.text, "\n") {
			if strings.Contains(line, unknownKey) {
				continue
			}
			for _, n := range namesIn(line) {
				if names[n] == "" && mentionable[n] == "" {
					t.Errorf("%s names %s, which the code does not have", d.path, n)
				}
			}
		}
	}
}

// unknownKey is in the message the components give for a key nothing reads, which
// the docs quote with a misspelt key.
const unknownKey = "not a key confighash reads"

// metricName is a confighash metric in a text (not a file name, confighash_0.1.0_...).
var metricName = regexp.MustCompile(`confighash_[a-z][a-z0-9_]*[a-z0-9]`)

func TestMetricsAreDocumented(t *testing.T) {
	s := mustSource(t)
	found := metrics(t, s)
	// What the components' recorders register, to check that the source was read
	// right; the binary's own metrics (main) are read from the source alone.
	reg := prometheus.NewRegistry()
	if _, err := webhook.NewPrometheusRecorder(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := watcher.NewPrometheusRecorder(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := alert.NewPrometheusRecorder(reg); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if _, ok := found[f.GetName()]; !ok {
			t.Errorf("%s is registered, and this test did not find it in the source: teach metrics() how it is made", f.GetName())
		}
	}

	doc := readDoc(t, "docs/metrics.md")
	labelValuesAreDocumented(t, families, doc)
	documented := map[string]bool{}
	for _, span := range code(doc.text) {
		if m := metricName.FindString(span); m != "" && strings.HasPrefix(span, m) {
			documented[m] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(found)) {
		if !documented[name] {
			t.Errorf("%s (%s) is not in docs/metrics.md (a code span that starts with its name)", name, found[name].at)
		}
	}

	for _, d := range allDocs(t) {
		for _, name := range metricName.FindAllString(d.text, -1) {
			if _, ok := found[name]; ok {
				continue
			}
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
			if m, ok := found[base]; !ok || (m.kind != "HistogramOpts" && m.kind != "SummaryOpts") {
				t.Errorf("%s names %s, which the code does not register", d.path, name)
			}
		}
	}
}

// labelValuesAreDocumented checks that the row of docs/metrics.md of each metric names,
// as a code span, each value of its labels that the recorders create at start (each
// series exists from the start, at zero); a kind label's values are Kubernetes kinds.
func labelValuesAreDocumented(t *testing.T, families []*dto.MetricFamily, doc document) {
	t.Helper()
	rows := map[string]string{}
	for _, line := range strings.Split(doc.text, "\n") {
		if m := metricRow.FindStringSubmatch(line); m != nil {
			rows[m[1]] = line
		}
	}
	missing := map[string]bool{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if row, ok := rows[f.GetName()]; ok && l.GetName() != "kind" && !strings.Contains(row, "`"+l.GetValue()+"`") {
					missing[fmt.Sprintf("docs/metrics.md's row of %s does not name the value `%s` of its label %s", f.GetName(), l.GetValue(), l.GetName())] = true
				}
			}
		}
	}
	for _, m := range slices.Sorted(maps.Keys(missing)) {
		t.Error(m)
	}
}

// metricRow is a row of a metrics table, by the metric it starts with.
var metricRow = regexp.MustCompile("^\\| `(confighash_[a-z_]+)`")

// eventMentions are the ways the docs name an Event: "a `Healed` Event", "a Warning
// `Held` Event", "Warning Event `Held`", "`Healed` (Warning)".
var eventMentions = []*regexp.Regexp{
	regexp.MustCompile("`([A-Z][A-Za-z]+)`\\s+(?:\\((?:Normal|Warning)\\)\\s+)?(?:(?:Normal|Warning)\\s+)?Events?\\b"),
	regexp.MustCompile("\\bEvents?:?\\s+`([A-Z][A-Za-z]+)`"),
	regexp.MustCompile("\\b(?:Normal|Warning)\\s+`([A-Z][A-Za-z]+)`"),
	regexp.MustCompile("`([A-Z][A-Za-z]+)`\\s+\\((?:Normal|Warning)\\)"),
}

func TestEventReasonsAreDocumented(t *testing.T) {
	s := mustSource(t)
	reasons := eventReasons(t, s)
	doc := readDoc(t, "docs/troubleshooting.md")
	listed := map[string]string{} // reason: its row's types
	for _, tb := range tables(doc.text) {
		if len(tb.header) < 2 || tb.header[0] != "reason" || tb.header[1] != "type" {
			continue
		}
		for _, row := range tb.rows {
			for _, r := range code(row[0]) {
				listed[r] = strings.Join(slices.DeleteFunc(slices.Sorted(slices.Values(strings.FieldsFunc(row[1], func(r rune) bool { return r == ',' || r == ' ' }))), func(w string) bool { return w != "Normal" && w != "Warning" }), ", ")
			}
		}
	}
	for _, r := range slices.Sorted(maps.Keys(reasons)) {
		types := slices.Sorted(maps.Keys(reasons[r]))
		sent := strings.Join(types, ", ")
		at := reasons[r][types[0]]
		switch cell, ok := listed[r]; {
		case !ok:
			t.Errorf("the Event %s (%s, %s) is not in docs/troubleshooting.md's Events table", r, sent, at)
		case cell != sent:
			t.Errorf("docs/troubleshooting.md's Events table says %s is %q; the code sends it as %s (%s)", r, cell, sent, at)
		}
	}
	for _, r := range slices.Sorted(maps.Keys(listed)) {
		if reasons[r] == nil {
			t.Errorf("docs/troubleshooting.md's Events table lists %s, which the code does not send", r)
		}
	}
	for _, d := range allDocs(t) {
		for _, re := range eventMentions {
			for _, m := range re.FindAllStringSubmatch(d.text, -1) {
				if reasons[m[1]] == nil {
					t.Errorf("%s names the Event %s, which the code does not send", d.path, m[1])
				}
			}
		}
	}
}

func TestGitOpsListsEveryAnnotationConfighashWrites(t *testing.T) {
	written := tableNames(readDoc(t, "docs/annotations.md").section("## Written by confighash"))
	if len(written) == 0 {
		t.Fatal(`docs/annotations.md has no table under "## Written by confighash"`)
	}
	gitops := readDoc(t, "docs/gitops.md")
	listed := tableNames(gitops.text)
	var snippets []string
	for _, block := range strings.Split(gitops.text, "```yaml")[1:] {
		block, _, _ = strings.Cut(block, "```")
		snippets = append(snippets, namesIn(block)...)
	}
	for _, n := range slices.Sorted(maps.Keys(written)) {
		if !listed[n] {
			t.Errorf("docs/gitops.md's table does not list %s, which docs/annotations.md says confighash writes", n)
		}
		if !slices.Contains(snippets, n) {
			t.Errorf("docs/gitops.md's YAML snippets do not ignore %s, which confighash writes", n)
		}
	}
}

func mustSource(t *testing.T) *goSource {
	t.Helper()
	s, err := source()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
