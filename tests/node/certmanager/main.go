// Command certmanager runs a real cert-manager against a Kubernetes API server: the
// controllers that issue and renew Certificates from SelfSigned and CA issuers, and the
// CA injector that fills the caBundle of webhook configurations.
//
// It exists because the modules of cert-manager's own binaries (controller-binary,
// cainjector-binary) are not on the Go module proxy, while the library is: tests run
// this against the local control plane (tests/cluster) to check our manifests with the
// cert-manager users run, not a stand-in. ACME, Vault, Venafi, the ingress and Gateway
// shims, the webhook and leader election are left out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zerologr"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
)

// shutdownGrace bounds the stop after a signal or a failure: the controllers finish the
// item in hand, the informers and the injector's manager stop.
const shutdownGrace = 30 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "certmanager: %v\n", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	kubeconfig               string
	clusterResourceNamespace string
	crdTimeout               time.Duration
	logLevel                 string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("certmanager", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.kubeconfig, "kubeconfig", "", "the kubeconfig of the API server (required)")
	fs.StringVar(&cfg.clusterResourceNamespace, "cluster-resource-namespace", "cert-manager",
		"where ClusterIssuers find their Secrets")
	fs.DurationVar(&cfg.crdTimeout, "crd-timeout", 30*time.Second,
		"how long to wait for cert-manager's CRDs to be served before failing")
	fs.StringVar(&cfg.logLevel, "log-level", "info",
		"zerolog level; cert-manager logs its info at V(2), which is trace here")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if cfg.kubeconfig == "" {
		return cfg, errors.New("--kubeconfig is required")
	}
	return cfg, nil
}

// run starts the controllers and the CA injector, and returns when ctx is cancelled
// (nil) or when one of them fails.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, cfg.logLevel)
	if err != nil {
		return err
	}
	// cert-manager's controllers take their logger from the context.
	ctx = logr.NewContext(ctx, log)

	// The injector gets this config directly, so KUBECONFIG is never read, unlike
	// upstream's cainjector (controller-runtime's GetConfig).
	restConfig, err := clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	if err := waitForCRDs(ctx, restConfig, cfg.crdTimeout); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting
		}
		return err
	}

	// Built first: the injector's manager starts nothing until Start, so its failure
	// leaves nothing to stop.
	injector, err := newCAInjector(ctx, restConfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	stopInformers, err := startControllers(gctx, g, log.WithValues("component", "controllers"), cfg)
	if err != nil {
		cancel() // the controllers started so far
		return errors.Join(err, stop(g, stopInformers))
	}
	g.Go(func() error {
		log := log.WithValues("component", "cainjector")
		log.Info("running")
		defer log.Info("stopped")
		if err := injector.Start(gctx); err != nil {
			return fmt.Errorf("cainjector: %w", err)
		}
		return nil
	})

	<-gctx.Done() // a signal, or a failure
	return stop(g, stopInformers)
}

// stop waits, at most shutdownGrace, for the group and then the informers to stop.
func stop(g *errgroup.Group, stopInformers func()) error {
	done := make(chan error, 1)
	go func() {
		err := g.Wait()
		stopInformers()
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(shutdownGrace):
		return fmt.Errorf("not stopped within %s", shutdownGrace)
	}
}

// waitForCRDs waits, at most timeout, until cert-manager's CRDs are served, so that
// this may start right after they are applied; without them the informers would wait
// forever, and the injector's manager would time out only after minutes.
func waitForCRDs(ctx context.Context, restConfig *rest.Config, timeout time.Duration) error {
	dc, err := discovery.NewDiscoveryClientForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("create discovery client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := servesCRDs(dc)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cert-manager's CRDs are not served after %s (apply deploy/crds first): %w", timeout, err)
		case <-time.After(time.Second):
		}
	}
}

func servesCRDs(dc discovery.DiscoveryInterface) error {
	resources, err := dc.ServerResourcesForGroupVersion("cert-manager.io/v1")
	if err != nil {
		return err
	}
	want := map[string]bool{"certificates": true, "certificaterequests": true, "issuers": true, "clusterissuers": true}
	for _, r := range resources.APIResources {
		delete(want, r.Name)
	}
	if len(want) > 0 {
		return fmt.Errorf("cert-manager.io/v1 lacks %v", want)
	}
	return nil
}

// newLogger writes zerolog to w and routes klog (cert-manager, client-go) and
// controller-runtime (the injector) through it.
func newLogger(w io.Writer, level string) (logr.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return logr.Logger{}, fmt.Errorf("--log-level: %w", err)
	}
	// Durations in seconds, as in the rest of the project.
	zerolog.DurationFieldUnit = time.Second
	zl := zerolog.New(w).Level(lvl).With().Timestamp().Logger()
	log := zerologr.New(&zl)
	klog.SetLogger(log)
	ctrl.SetLogger(log)
	return log, nil
}
