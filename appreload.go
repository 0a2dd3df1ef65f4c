package confighash

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// Reload is how an app reloads its files without a restart, as AnnotationRestart says:
// a signal to the processes of the pod's other containers, or an HTTP POST to the pod.
type Reload struct {
	// Signal is the signal's name, as SIGHUP; "" for an HTTP reload.
	Signal string
	// Port and Path are the HTTP reload's: POST http://127.0.0.1:Port/Path.
	Port int
	Path string
}

// reloadSignals are the signals an app may be told to reload with: those that
// conventionally mean it, and none that stops a process by default and is caught
// only by what expects it.
var reloadSignals = []string{"SIGHUP", "SIGUSR1", "SIGUSR2"}

// maxReloadPathBytes bounds an HTTP reload's path.
const maxReloadPathBytes = 256

// ParseReload reads "signal:SIGHUP" (SIGUSR1, SIGUSR2; the SIG is optional) or
// "http:PORT/PATH".
func ParseReload(text string) (Reload, error) {
	kind, arg, _ := strings.Cut(text, ":")
	switch kind {
	case "signal":
		name := "SIG" + strings.TrimPrefix(strings.ToUpper(arg), "SIG")
		if !slices.Contains(reloadSignals, name) {
			return Reload{}, fmt.Errorf("the signal %q is not one of %s", arg, strings.Join(reloadSignals, ", "))
		}
		return Reload{Signal: name}, nil
	case "http":
		port, path, _ := strings.Cut(arg, "/")
		n, err := strconv.Atoi(port)
		switch {
		case err != nil || n < 1 || n > 65535:
			return Reload{}, fmt.Errorf("the port %q is not a number from 1 to 65535", port)
		case len(path) > maxReloadPathBytes || strings.ContainsAny(path, " ?#\t\n") || strings.Contains(path, ".."):
			return Reload{}, fmt.Errorf("the path is not a plain path of at most %d bytes", maxReloadPathBytes)
		}
		return Reload{Port: n, Path: "/" + path}, nil
	}
	return Reload{}, errors.New("unknown mode")
}

// String is the reload as AnnotationRestart and the restarter's --reload spell it.
func (r Reload) String() string {
	if r.Signal != "" {
		return "signal:" + r.Signal
	}
	return "http:" + strconv.Itoa(r.Port) + r.Path
}

// ReloadVolumes returns the volumes of a pod that carry the sources that count for it,
// which its restarter watches for the kubelet's swap of their files, and whether a
// reload reaches everything those sources give the pod: none of them reaches it
// through env (read once, at the start), nor through a subPath mount (never updated).
// Otherwise why says the first that does not, and the pod is restarted in place.
func ReloadVolumes(spec *corev1.PodSpec, counts func(SourceRef) bool) (volumes []string, why string) {
	eachUse(spec, func(u use) {
		if why != "" || !counts(SourceRef{u.kind, *u.name}) {
			return
		}
		switch ref := (SourceRef{u.kind, *u.name}); u.how.what {
		case "env", "envFrom":
			why = fmt.Sprintf("%s reaches %s %s through %s, read once at its start", ref, u.how.containerKind, u.how.owner, u.how.what)
		default:
			if !slices.Contains(volumes, u.how.name) {
				volumes = append(volumes, u.how.name)
			}
		}
	})
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if why == "" && slices.Contains(volumes, m.Name) && (m.SubPath != "" || m.SubPathExpr != "") {
				why = fmt.Sprintf("volume %s reaches container %s through a subPath, which the kubelet never updates", m.Name, c.Name)
			}
		}
	}
	if why != "" {
		return nil, why
	}
	return volumes, ""
}

// Where the restarter of a pod that reloads finds the files of its sources' volumes,
// one directory each, and keeps the token it last reloaded for, which its readiness
// probe compares with the pod's: beside the token's volume, not in it, which is
// read-only and the kubelet's to write.
const (
	RestarterVolumesDir  = RestarterTokenDir + "-volumes"
	RestarterStateDir    = RestarterTokenDir + "-state"
	RestarterAppliedFile = RestarterStateDir + "/applied"
	// restarterBinary is the binary in confighash's image, for the readiness probe.
	restarterBinary = "/ko-app/confighash"
)

// Reloading makes a restarter, as Restarter returns it, tell the app to reload: it
// watches the volumes, reloads once the kubelet swapped their files, and is not Ready
// from a token's change until it reloaded for it, so that the pod is not either. A
// signal needs the pod's process namespace shared, and the restarter to run as root
// with CAP_KILL alone, to signal processes of any user. It returns the volume it keeps
// its state in.
func Reloading(c *corev1.Container, r Reload, volumes []string) corev1.Volume {
	state := RestarterName + "-state"
	c.Args = append(c.Args, "--reload="+r.String(), "--volumes-dir="+RestarterVolumesDir, "--applied-file="+RestarterAppliedFile)
	for _, v := range volumes {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v, MountPath: RestarterVolumesDir + "/" + v, ReadOnly: true})
	}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: state, MountPath: RestarterStateDir})
	c.ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{restarterBinary, "restarter", "ready", "--token-file=" + RestarterTokenFile, "--applied-file=" + RestarterAppliedFile}}},
		PeriodSeconds: 1, FailureThreshold: 1, TimeoutSeconds: 1,
	}
	if r.Signal != "" {
		sc := c.SecurityContext
		sc.RunAsNonRoot, sc.RunAsUser = ptr.To(false), ptr.To[int64](0)
		sc.Capabilities.Add = []corev1.Capability{"KILL"}
	}
	return corev1.Volume{Name: state, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Mi"))}}}
}

// RestartMode is how a change of a workload's data reaches its pods.
type RestartMode uint8

// The modes.
const (
	// RestartRollout replaces the pods: the pod template's hash changes. The default.
	RestartRollout RestartMode = iota
	// RestartInPlace restarts each pod's containers where it runs.
	RestartInPlace
	// RestartReload tells each pod's app to reload its files (see Reload), and
	// restarts it in place where its data does not all reach it as files.
	RestartReload
)

func (m RestartMode) String() string { return [...]string{"rollout", "in-place", "reload"}[m] }

// PodByPod reports whether the mode reaches the pods one by one, where they run,
// rather than through the pod template.
func (m RestartMode) PodByPod() bool { return m != RestartRollout }

// ParseRestartMode reads AnnotationRestart: "in-place", "rollout" ("" too), or a
// reload, "signal:SIGHUP" or "http:8080/-/reload" (see ParseReload).
func ParseRestartMode(text string) (RestartMode, Reload, error) {
	text = strings.TrimSpace(text)
	switch text {
	case "", "rollout":
		return RestartRollout, Reload{}, nil
	case "in-place":
		return RestartInPlace, Reload{}, nil
	}
	r, err := ParseReload(text)
	if err != nil {
		return RestartRollout, Reload{}, fmt.Errorf("restart %q: want in-place, rollout, signal:SIGHUP or http:8080/-/reload: %w", text, err)
	}
	return RestartReload, r, nil
}
