// Package namespaces tells both components how confighash acts in each namespace:
// not at all, on the workloads that opt in, or on every workload that does not opt
// out, from the namespace's labels.
package namespaces

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/watches"
)

// Selectors select the namespaces confighash acts in.
type Selectors struct {
	// OptedIn selects those where it acts on the workloads that opt in.
	OptedIn labels.Selector
	// Every selects those where it acts on every workload that does not opt out; it
	// wins where both select.
	Every labels.Selector
}

// DefaultSelectors select namespaces by confighash's injection label.
func DefaultSelectors() Selectors {
	return Selectors{
		OptedIn: labels.SelectorFromSet(labels.Set{confighash.InjectionLabel: confighash.InjectionEnabled}),
		Every:   labels.SelectorFromSet(labels.Set{confighash.InjectionLabel: confighash.InjectionEvery}),
	}
}

// ModeOf is the namespace's mode. One being deleted is off: its sources and workloads
// are going away, and touching them is waste.
func (s Selectors) ModeOf(n *corev1.Namespace) confighash.Mode {
	if n == nil || n.DeletionTimestamp != nil {
		return confighash.ModeOff
	}
	set := labels.Set(n.Labels)
	switch {
	case s.Every != nil && s.Every.Matches(set):
		return confighash.ModeEvery
	case s.OptedIn != nil && s.OptedIn.Matches(set):
		return confighash.ModeOptedIn
	}
	return confighash.ModeOff
}

// PacingOf is how configuration changes roll in the namespace, from its annotations
// (confighash.AnnotationRolloutWindow, AnnotationWaveSize) and pin label; an error
// says which of its settings are bad, each ignored on its own, and which keys under
// confighash's prefix nothing reads there.
func PacingOf(n *corev1.Namespace) (confighash.Pacing, error) {
	if n == nil {
		return confighash.Pacing{}, nil
	}
	p, err := confighash.ParsePacing(confighash.PacingText{Window: n.Annotations[confighash.AnnotationRolloutWindow], WaveSize: n.Annotations[confighash.AnnotationWaveSize],
		Pin: n.Labels[confighash.AnnotationPin], OnFailure: n.Annotations[confighash.AnnotationOnFailure],
		Canary: n.Annotations[confighash.AnnotationCanary], Bake: n.Annotations[confighash.AnnotationBake],
		Analysis: n.Annotations[confighash.AnnotationAnalysis]})
	errs := []error{err}
	for _, m := range []map[string]string{n.Annotations, n.Labels} {
		for _, u := range confighash.UnknownKeys(m, confighash.OnNamespace, false) {
			errs = append(errs, u)
		}
	}
	return p, confighash.JoinErrors(errs...)
}

// samePacing reports whether two namespaces read as the same pacing, with the same
// problems: it compares what PacingOf makes of them, so that a setting added there
// re-checks the namespace's workloads when it changes, with no list to keep in step.
func samePacing(a, b *corev1.Namespace) bool {
	pa, errA := PacingOf(a)
	pb, errB := PacingOf(b)
	return pa.Equal(pb) && fmt.Sprint(errA) == fmt.Sprint(errB)
}

// Gate tells how confighash acts in a namespace, once it has synced.
type Gate interface {
	Mode(namespace string) confighash.Mode
	// Known reports whether the namespace has been read: the mode of one that has not
	// is not known yet, though Mode says off.
	Known(namespace string) bool
	// Pacing is how changes roll there, and what is wrong with its annotations.
	Pacing(namespace string) (confighash.Pacing, error)
	HasSynced() bool
	Run(ctx context.Context)
}

// Cluster watches every namespace: few, small objects.
type Cluster struct {
	informer  cache.SharedIndexInformer
	selectors Selectors
}

// NewCluster watches every namespace. After the first list, it calls onEnabled, when
// set, for a namespace that starts being acted in, or in another mode, or with another
// pacing.
func NewCluster(client kubernetes.Interface, selectors Selectors, onEnabled func(namespace string)) (*Cluster, error) {
	inf, err := watches.Informer(watches.Namespaces, coreinformers.NewNamespaceInformer(client, 0, cache.Indexers{}), nil)
	if err != nil {
		return nil, err
	}
	c := &Cluster{inf, selectors}
	_, err = c.informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if n, ok := obj.(*corev1.Namespace); ok && !initial && selectors.ModeOf(n) != confighash.ModeOff && onEnabled != nil {
				onEnabled(n.Name)
			}
		},
		UpdateFunc: func(old, obj any) {
			o, _ := old.(*corev1.Namespace)
			n, ok := obj.(*corev1.Namespace)
			if now := selectors.ModeOf(n); ok && now != confighash.ModeOff && (now != selectors.ModeOf(o) || o != nil && !samePacing(o, n)) && onEnabled != nil {
				onEnabled(n.Name)
			}
		},
	})
	return c, err
}

func (c *Cluster) Mode(ns string) confighash.Mode { return c.selectors.ModeOf(c.get(ns)) }

func (c *Cluster) Known(ns string) bool { return c.get(ns) != nil }

func (c *Cluster) Pacing(ns string) (confighash.Pacing, error) { return PacingOf(c.get(ns)) }

// get returns the namespace, or nil.
func (c *Cluster) get(ns string) *corev1.Namespace {
	obj, exists, err := c.informer.GetStore().GetByKey(ns)
	n, ok := obj.(*corev1.Namespace)
	if err != nil || !exists || !ok {
		return nil
	}
	return n
}

func (c *Cluster) HasSynced() bool { return c.informer.HasSynced() }

func (c *Cluster) Run(ctx context.Context) { go c.informer.RunWithContext(ctx) }

// PollInterval is how soon a namespaced install sees a namespace labelled,
// unlabelled or deleted.
const PollInterval = 10 * time.Second

// NewGate returns the gate for the listed namespaces of a namespaced install, or for
// the whole cluster when none are listed.
func NewGate(client kubernetes.Interface, selectors Selectors, listed []string, onEnabled func(string), log zerolog.Logger) (Gate, error) {
	if len(listed) > 0 {
		return NewListed(client, selectors, listed, PollInterval, onEnabled, log), nil
	}
	return NewCluster(client, selectors, onEnabled)
}

// Listed reads each namespace of a namespaced install every interval. A
// RoleBinding in a namespace grants a get of that Namespace object, but a list or a
// watch of namespaces needs a cluster-wide grant, so an informer cannot be used.
type Listed struct {
	client    kubernetes.Interface
	selectors Selectors
	names     []string
	interval  time.Duration
	onEnabled func(namespace string)
	log       zerolog.Logger
	// Only refresh uses these: the namespaces read at least once, and those whose
	// last read failed.
	read, failing map[string]bool

	mu     sync.RWMutex
	state  map[string]listedState
	synced bool
}

// listedState is what Listed keeps of a namespace.
type listedState struct {
	mode      confighash.Mode
	pacing    confighash.Pacing
	pacingErr error
}

func NewListed(client kubernetes.Interface, selectors Selectors, names []string, interval time.Duration, onEnabled func(string), log zerolog.Logger) *Listed {
	return &Listed{client: client, selectors: selectors, names: names, interval: interval, onEnabled: onEnabled, log: log,
		read: map[string]bool{}, failing: map[string]bool{}, state: map[string]listedState{}}
}

func (l *Listed) Mode(ns string) confighash.Mode {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.state[ns].mode
}

func (l *Listed) Known(ns string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	_, ok := l.state[ns]
	return ok
}

func (l *Listed) Pacing(ns string) (confighash.Pacing, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.state[ns].pacing, l.state[ns].pacingErr
}

func (l *Listed) HasSynced() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.synced
}

func (l *Listed) Run(ctx context.Context) {
	go func() {
		t := time.NewTicker(l.interval)
		defer t.Stop()
		for {
			l.refresh(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// refresh reads every namespace once. One that is gone or refused counts as off;
// after any other error, such as a timeout, it keeps its last state. Once all have
// been read, a namespace that starts being acted in, or in another mode, or with
// another pacing, is passed to onEnabled.
func (l *Listed) refresh(ctx context.Context) {
	l.mu.RLock()
	state, wasSynced := maps.Clone(l.state), l.synced
	l.mu.RUnlock()
	var enabled []string
	for _, name := range l.names {
		n, err := l.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if ctx.Err() != nil {
			return
		}
		if err != nil && !l.failing[name] {
			l.log.Warn().Err(err).Str("namespace", name).Msg("cannot read a watched namespace")
		}
		l.failing[name] = err != nil
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
			continue
		}
		now := listedState{mode: confighash.ModeOff}
		if err == nil {
			now.mode = l.selectors.ModeOf(n)
			now.pacing, now.pacingErr = PacingOf(n)
		}
		was := state[name]
		if wasSynced && now.mode != confighash.ModeOff && (now.mode != was.mode || !now.pacing.Equal(was.pacing)) {
			enabled = append(enabled, name)
		}
		state[name], l.read[name] = now, true
	}
	l.mu.Lock()
	l.state, l.synced = state, len(l.read) == len(l.names)
	l.mu.Unlock()
	for _, name := range enabled {
		if l.onEnabled != nil {
			l.onEnabled(name)
		}
	}
}
