package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/namespaces"
	"github.com/confighash/confighash/sourcecache"
	"github.com/confighash/confighash/watcher"
	"github.com/confighash/confighash/webhook"
)

// common is the configuration both components share.
type common struct {
	ops                  string
	kubeconfig           string
	qps                  float64
	burst                int
	namespace, keySecret string
	watched              namespaceList
	hashKeyFile          string
	logFormat, logLevel  string
	shutdownTimeout      time.Duration
	reloaderAnnotations  bool
	lifecycle            lifecycleFlags
	csiIntegration       bool
	ignored              ignoredKinds
	profiling            bool
	kinds                string
	extraKinds           stringList
	sourceLabelSelector  string
	namespaceSelector    string
	everySelector        string
	rolloutWindow        string
	waveSize             int
	pinByDefault         bool
	onFailure            string
}

func (c *common) flags(fs *flag.FlagSet, shutdownTimeout time.Duration) {
	fs.StringVar(&c.ops, "ops-address", ":8080", "address of the plain-HTTP server for /healthz, /readyz, /version and /metrics")
	fs.BoolVar(&c.profiling, "profiling", false, "serve Go's profiles on the ops port, under /debug/pprof/ (heap?gc=1&debug=1 gives the live heap after a collection)")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses the in-cluster service account")
	fs.Float64Var(&c.qps, "kube-api-qps", 0, "client-side limit of queries per second to the API server; 0: none, the API server's priority and fairness applies (a limit delays every request once reached)")
	fs.IntVar(&c.burst, "kube-api-burst", 100, "burst above --kube-api-qps, when it is set")
	fs.StringVar(&c.namespace, "namespace", "confighash", "namespace confighash is installed in: the hash key Secret, the watcher's Lease")
	fs.Var(&c.watched, "namespaces", "comma-separated namespaces to act in, for an install bound by RoleBindings in each; empty: every namespace labelled for injection")
	fs.StringVar(&c.keySecret, "hash-key-secret", "confighash-hash-key", "Secret holding the HMAC key the webhook and the watcher share; created with a random key when absent")
	fs.StringVar(&c.hashKeyFile, "hash-key-file", "", "file holding the HMAC key (at least 32 bytes), instead of the Secret")
	fs.StringVar(&c.logFormat, "log-format", "json", "log format: json or console")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: trace, debug, info, warn (or warning, as Reloader spells it), error, fatal or panic")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", shutdownTimeout, "how long in-flight requests may take to finish on SIGTERM")
	fs.StringVar(&c.namespaceSelector, "namespace-selector", webhook.DefaultNamespaceSelector, "label selector of the namespaces where workloads that opt in are acted on; the webhook configuration's first namespaceSelector must select the same")
	fs.StringVar(&c.everySelector, "every-workload-namespace-selector", webhook.DefaultEveryNamespaceSelector, "label selector of the namespaces where every workload is acted on unless it opts out (Reloader's --auto-reload-all, per namespace); the webhook configuration's second namespaceSelector must select the same; empty: none")
	fs.StringVar(&c.kinds, "kinds", "", "comma-separated workload kinds to handle, of deployments, statefulsets, daemonsets, cronjobs, jobs, rollouts; empty: all; the webhook configuration's rules must list the same")
	fs.Var(&c.extraKinds, "extra-kind", extraKindUsage+"; the webhook configuration's rules and the watcher's RBAC must list it too (the chart's extraKinds)")
	fs.StringVar(&c.sourceLabelSelector, "source-label-selector", "", "label selector: only the ConfigMaps and Secrets that match count; the others are never listed or cached, and count as absent; empty: all")
	fs.StringVar(&c.rolloutWindow, "rollout-window", "", `when configuration changes may roll workloads whose namespace and annotations do not say, e.g. "Mon-Fri 09:00-17:00 Europe/Berlin; Sat 10:00-12:00 UTC"; empty: any time; the webhook and the watcher must be given the same`)
	fs.BoolVar(&c.pinByDefault, "pin-by-default", false, "pin the workloads whose namespace label and annotations do not say (confighash.dev/pin): each version of a source they roll out with is kept as an immutable snapshot, so a rollback brings the old data back; the webhook and the watcher must be given the same")
	fs.StringVar(&c.onFailure, "on-failure", "halt", "what a failed rollout of a change does to the workloads whose namespace, source and annotations do not say (confighash.dev/on-failure): halt its wave, or revert the pinned ones to the revision they ran before, with its data; the webhook and the watcher must be given the same")
	fs.IntVar(&c.waveSize, "wave-size", 0, "roll a change that reaches many workloads in waves of at most this many per namespace, each waiting for the one before to roll out and halting on a failure; 0: all at once unless annotations say; the webhook and the watcher must be given the same")
	fs.BoolVar(&c.csiIntegration, "enable-csi-integration", false, "count the Secrets Store CSI SecretProviderClasses that pods mount, from the versions the driver reports (Reloader's flag of the same name); both components must be given the same, and may read secretproviderclasspodstatuses (the chart's enableCSIIntegration)")
	fs.Var(&c.ignored, "resources-to-ignore", `"configMaps" or "secrets" (Reloader's flag of the same name): that kind never counts for any workload, and is never listed, cached or read (the chart's ignoreConfigMaps, ignoreSecrets); the webhook and the watcher must be given the same`)
	c.lifecycle.flags(fs, "")
	fs.BoolVar(&c.reloaderAnnotations, "reloader-annotations", true, "also read stakater/Reloader's annotations (reloader.stakater.com/auto and the others), as aliases of confighash's own; the webhook configuration's matchConditions must list them too (the chart's reloaderAnnotations)")
}

// parseSelectors parses --namespace-selector and --every-workload-namespace-selector.
func parseSelectors(optedInFlag, everyFlag string) (namespaces.Selectors, error) {
	optedIn, err := labels.Parse(optedInFlag)
	if err != nil {
		return namespaces.Selectors{}, fmt.Errorf("--namespace-selector: %w", err)
	}
	if optedIn.Empty() {
		return namespaces.Selectors{}, errors.New("--namespace-selector is empty: it would select every namespace")
	}
	s := namespaces.Selectors{OptedIn: optedIn}
	if everyFlag != "" {
		if s.Every, err = labels.Parse(everyFlag); err != nil {
			return namespaces.Selectors{}, fmt.Errorf("--every-workload-namespace-selector: %w", err)
		}
	}
	return s, nil
}

// settings are what the webhook and the watcher must be given the same of: the
// namespaces they act in, the kinds and sources, the pacing and the vocabulary.
type settings struct {
	selectors  namespaces.Selectors
	kinds      confighash.Kinds
	sources    sourcecache.Filter
	pacing     confighash.Pacing
	vocabulary confighash.Vocabulary
	lifecycle  confighash.Lifecycle
}

// lifecycleFlags are Reloader's --reload-on-create and --reload-on-delete: what a
// source's creation and deletion roll.
type lifecycleFlags struct{ onCreate, onDelete bool }

func (l *lifecycleFlags) flags(fs *flag.FlagSet, whose string) {
	fs.BoolVar(&l.onCreate, "reload-on-create", true, whose+"roll once the workloads whose named or optional ConfigMap or Secret is created after their pods started, which ran without it (Reloader's flag of the same name, false by default there); false: it is recorded, and its next change rolls them; the webhook and the watcher must be given the same")
	fs.BoolVar(&l.onDelete, "reload-on-delete", false, whose+"roll once the workloads of a ConfigMap or Secret that is deleted, and once more when it comes back (Reloader's flag of the same name); false: a delete rolls nothing, and a return rolls only with other data; the webhook and the watcher must be given the same")
}

func (l lifecycleFlags) domain() confighash.Lifecycle {
	return confighash.Lifecycle{RecordCreated: !l.onCreate, RollDeleted: l.onDelete}
}

// settings parses the flags both components share.
func (c *common) settings() (settings, error) {
	selectors, err := parseSelectors(c.namespaceSelector, c.everySelector)
	if err != nil {
		return settings{}, err
	}
	kinds, err := confighash.ParseKinds(c.kinds, c.extraKinds)
	if err != nil {
		return settings{}, fmt.Errorf("--kinds, --extra-kind: %w", err)
	}
	sourceLabels, err := labels.Parse(c.sourceLabelSelector)
	if err != nil {
		return settings{}, fmt.Errorf("--source-label-selector: %w", err)
	}
	pacing, err := confighash.ParsePacing(confighash.PacingText{Window: c.rolloutWindow, Pin: strconv.FormatBool(c.pinByDefault), OnFailure: c.onFailure})
	if err != nil {
		return settings{}, fmt.Errorf("--rollout-window, --on-failure: %w", err)
	}
	if c.waveSize < 0 {
		return settings{}, fmt.Errorf("--wave-size must be 0 or more, got %d", c.waveSize)
	}
	pacing.WaveSize = c.waveSize
	ignored := confighash.SourceKinds(c.ignored)
	return settings{
		selectors:  selectors,
		kinds:      kinds,
		sources:    sourcecache.Filter{Labels: sourceLabels, Ignored: ignored},
		pacing:     pacing,
		vocabulary: confighash.Vocabulary{Reloader: c.reloaderAnnotations, CSI: c.csiIntegration, Ignored: ignored},
		lifecycle:  c.lifecycle.domain(),
	}, nil
}

// parse parses the command line; done is set when it only asked for help.
func parse(fs *flag.FlagSet, args []string, stdout io.Writer, summary string) (done bool, err error) {
	err = parseFlags(fs, args, stdout, summary)
	if errors.Is(err, flag.ErrHelp) {
		return true, nil
	}
	return false, err
}

// env is what both components start from.
type env struct {
	ctx    context.Context // carries the logr logger, for client-go and cert-manager
	log    zerolog.Logger
	rest   *rest.Config
	client kubernetes.Interface
	key    confighash.Key
	reg    *prometheus.Registry
}

// connect builds the logger, the API client and the metrics registry, and loads the
// hash key.
func (c *common) connect(ctx context.Context, component string, stderr io.Writer) (*env, error) {
	if slices.Contains(c.watched, c.namespace) {
		return nil, fmt.Errorf("--namespaces lists the install namespace %q: the webhook configuration excludes it, so workloads there would never be hashed", c.namespace)
	}
	log, lr, err := newLogger(stderr, c.logFormat, c.logLevel, component)
	if err != nil {
		return nil, err
	}
	e := &env{ctx: logr.NewContext(ctx, lr), log: log, reg: newRegistry()}
	if limit := limitMemory(cgroupMemoryMax); limit > 0 {
		log.Info().Int64("bytes", limit).Msg("Go's memory limit set to 90 % of the container's")
	}
	if c.kubeconfig != "" {
		e.rest, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	} else {
		e.rest, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	e.rest.UserAgent = "confighash-" + component + "/" + version
	e.rest.QPS, e.rest.Burst = float32(c.qps), c.burst
	if c.qps == 0 {
		e.rest.QPS = -1 // client-go's "no limit"; 0 would mean its default of 5
	}
	// Protobuf for built-in types: cheaper than JSON to encode on the API server and
	// to decode here, for every list, watch event and read. (Argo Rollouts, a custom
	// resource, is served as JSON only: the dynamic client keeps e.rest's JSON.)
	typed := rest.CopyConfig(e.rest)
	typed.ContentType = "application/vnd.kubernetes.protobuf"
	typed.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	if e.client, err = kubernetes.NewForConfig(typed); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if e.key, err = loadKey(e.ctx, e.client, c.hashKeyFile, c.namespace, c.keySecret); err != nil {
		return nil, err
	}
	return e, nil
}

// namespaceList is a comma-separated list of namespace names, sorted, without repeats.
type namespaceList []string

func (l *namespaceList) String() string { return strings.Join(*l, ",") }

func (l *namespaceList) Set(v string) error {
	var names []string
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			return fmt.Errorf("namespace %q: %s", name, strings.Join(errs, "; "))
		}
		names = append(names, name)
	}
	slices.Sort(names)
	*l = slices.Compact(names)
	return nil
}

// csi returns, with --enable-csi-integration, the client that reads the Secrets Store
// CSI driver's pod statuses, and again for the sources cache if the API server serves
// them now: live reads find them once the driver is installed, a cache could not.
func (c *common) csi(e *env) (live, cached dynamic.Interface, err error) {
	if !c.csiIntegration {
		return nil, nil, nil
	}
	dyn, err := dynamic.NewForConfig(e.rest)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	served, err := watcher.Served(e.client, sourcecache.PodStatuses)
	if err != nil || !served {
		e.log.Warn().AnErr("error", err).Msg("the Secrets Store CSI driver's SecretProviderClassPodStatuses are not served: read live until a restart")
		return dyn, nil, nil
	}
	return dyn, dyn, nil
}

// ignoredKinds is the source kinds --resources-to-ignore names, in Reloader's
// spelling, comma-separated.
type ignoredKinds confighash.SourceKinds

func (k *ignoredKinds) String() string {
	var names []string
	for _, kind := range confighash.SourceKinds(*k).All() {
		names = append(names, map[confighash.SourceKind]string{confighash.ConfigMap: "configMaps", confighash.Secret: "secrets"}[kind])
	}
	return strings.Join(names, ",")
}

func (k *ignoredKinds) Set(v string) error {
	var kinds confighash.SourceKinds
	for _, name := range strings.Split(v, ",") {
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "configmaps":
			kinds = kinds.With(confighash.ConfigMap, true)
		case "secrets":
			kinds = kinds.With(confighash.Secret, true)
		case "":
		default:
			return fmt.Errorf("%q: want configMaps or secrets", name)
		}
	}
	if kinds.Has(confighash.ConfigMap) && kinds.Has(confighash.Secret) {
		return errors.New("configMaps and secrets both: nothing would count; uninstall instead")
	}
	*k = ignoredKinds(kinds)
	return nil
}
