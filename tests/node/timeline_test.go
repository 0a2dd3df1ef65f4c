package node

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
)

// A timeline is where the time of one change's restarts in place goes, pod by pod,
// from three sources with sub-second clocks on the one host: a watch of the
// namespace's pods (the watcher's token written, a nudge, Ready), the token file the kubelet
// writes (its modification time), and containerd's log (the restarter's exit, the
// app stopped, each container started again).
type timeline struct {
	start time.Time
	mu    sync.Mutex
	steps []step
}

// readySeen is the step of a pod seen Ready again.
const readySeen = "Ready (seen by a watch)"

type step struct {
	at       time.Time
	pod, say string
}

func (tl *timeline) add(at time.Time, pod, say string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.steps = append(tl.steps, step{at, pod, say})
}

// watchPods records, until ctx ends, each pod's token written and its Ready changes,
// at the time the watch delivers them. It returns once the watch is open.
func (tl *timeline) watchPods(ctx context.Context, env *Env, ns string) error {
	w, err := env.Cluster.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	go func() {
		defer w.Stop()
		tokens, nudges, ready := map[string]string{}, map[string]string{}, map[string]bool{}
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now := time.Now()
			token := pod.Annotations[confighash.AnnotationRestartToken]
			if old, seen := tokens[pod.Name]; seen && old != token {
				tl.add(now, pod.Name, "the watcher's token written (seen by a watch)")
			}
			tokens[pod.Name] = token
			nudge := pod.Annotations[confighash.AnnotationRestartNudge]
			if old, seen := nudges[pod.Name]; seen && old != nudge {
				tl.add(now, pod.Name, "the watcher's nudge written (seen by a watch)")
			}
			nudges[pod.Name] = nudge
			r := podReady(pod)
			if old, seen := ready[pod.Name]; seen && old != r {
				tl.add(now, pod.Name, map[bool]string{true: readySeen, false: "not Ready (seen by a watch)"}[r])
			}
			ready[pod.Name] = r
		}
	}()
	return nil
}

// tokenFiles records when the kubelet last wrote each pod's token file: the time the
// downward API volume's swap happened.
func (tl *timeline) tokenFiles(env *Env, pods map[string]*corev1.Pod) {
	for name, pod := range pods {
		file := env.Node.path(filepath.Join("kubelet", "pods", string(pod.UID), "volumes", "kubernetes.io~downward-api", confighash.RestarterName, "token"))
		if fi, err := os.Stat(file); err == nil && fi.ModTime().After(tl.start) {
			tl.add(fi.ModTime(), name, "token file written by the kubelet")
		}
	}
}

var (
	containerdTime = regexp.MustCompile(`^time="([^"]+)"`)
	sandboxOf      = regexp.MustCompile(`RunPodSandbox for &PodSandboxMetadata\{Name:([^,]+),Uid:[^,]+,Namespace:([^,]+),.*returns sandbox id \\"([0-9a-f]+)\\"`)
	containerOf    = regexp.MustCompile(`CreateContainer within sandbox \\"([0-9a-f]+)\\" for &ContainerMetadata\{Name:([^,]+),Attempt:\d+,\} returns container id \\"([0-9a-f]+)\\"`)
	exited         = regexp.MustCompile(`msg="shim disconnected" id=([0-9a-f]+)`)
	stopping       = regexp.MustCompile(`msg="StopContainer for \\"([0-9a-f]+)\\" with timeout`)
	started        = regexp.MustCompile(`msg="StartContainer for \\"([0-9a-f]+)\\" returns successfully"`)
)

// containerd records, from containerd's log, each of the namespace's containers
// that exited, was stopped by the kubelet or started, after the timeline's start.
func (tl *timeline) containerd(env *Env, ns string) error {
	f, err := os.Open(env.Node.path("containerd.log"))
	if err != nil {
		return err
	}
	defer f.Close()
	pods, containers := map[string]string{}, map[string][2]string{} // sandbox → pod; container → pod, name
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		m := containerdTime.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		if m := sandboxOf.FindStringSubmatch(line); m != nil && m[2] == ns {
			pods[m[3]] = m[1]
		}
		if m := containerOf.FindStringSubmatch(line); m != nil && pods[m[1]] != "" {
			containers[m[3]] = [2]string{pods[m[1]], m[2]}
		}
		if at.Before(tl.start) {
			continue
		}
		for _, e := range []struct {
			re  *regexp.Regexp
			say string
		}{{exited, "exited"}, {stopping, "stopped by the kubelet"}, {started, "started"}} {
			if m := e.re.FindStringSubmatch(line); m != nil {
				if c, ok := containers[m[1]]; ok {
					tl.add(at, c[0], c[1]+" "+e.say+" (containerd)")
				}
			}
		}
	}
	return s.Err()
}

// String is the timeline, one line a step, in ms since its start.
func (tl *timeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	steps := slices.Clone(tl.steps)
	slices.SortStableFunc(steps, func(a, b step) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, "%7.0f ms  %s  %s\n", float64(s.at.Sub(tl.start).Microseconds())/1000, s.pod, s.say)
	}
	return b.String()
}

// lastReady returns when the last of pods was seen Ready, and whether each was.
func (tl *timeline) lastReady(pods []string) (time.Time, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	last := map[string]time.Time{}
	for _, s := range tl.steps {
		if s.say == readySeen && s.at.After(last[s.pod]) {
			last[s.pod] = s.at
		}
	}
	var at time.Time
	for _, p := range pods {
		t, ok := last[p]
		if !ok {
			return time.Time{}, false
		}
		if t.After(at) {
			at = t
		}
	}
	return at, true
}

// table is the timeline as a Markdown table: a row a step, in the order the first pod
// took them, a column a pod, in the order they started; each cell is the time since
// the start, and since the pod's step before (the first: since the pod before it was
// done).
func (tl *timeline) table() string {
	tl.mu.Lock()
	steps := slices.Clone(tl.steps)
	tl.mu.Unlock()
	slices.SortStableFunc(steps, func(a, b step) int { return a.at.Compare(b.at) })
	var pods, rows []string
	at := map[[2]string]time.Time{}
	for _, s := range steps {
		if !slices.Contains(pods, s.pod) {
			pods = append(pods, s.pod)
		}
		if s.pod == pods[0] && !slices.Contains(rows, s.say) {
			rows = append(rows, s.say)
		}
		if _, ok := at[[2]string{s.pod, s.say}]; !ok {
			at[[2]string{s.pod, s.say}] = s.at
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| step | %s |\n|---|%s\n", strings.Join(pods, " | "), strings.Repeat("---|", len(pods)))
	prev := map[string]time.Time{}
	for i, p := range pods {
		prev[p] = tl.start
		if i > 0 {
			prev[p] = at[[2]string{pods[i-1], rows[len(rows)-1]}]
		}
	}
	for _, r := range rows {
		cells := make([]string, len(pods))
		for i, p := range pods {
			t, ok := at[[2]string{p, r}]
			if !ok {
				continue
			}
			cells[i] = fmt.Sprintf("%d (+%d)", t.Sub(tl.start).Milliseconds(), t.Sub(prev[p]).Milliseconds())
			prev[p] = t
		}
		fmt.Fprintf(&b, "| %s | %s |\n", r, strings.Join(cells, " | "))
	}
	return b.String()
}
