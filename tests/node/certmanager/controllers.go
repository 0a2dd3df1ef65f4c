package main

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"

	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	// The issuers and clusterissuers controllers find an issuer's implementation in a
	// registry these packages fill from init.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// controllers are the cert-manager controllers this runs, by the names they register
// from init: what a Certificate from a SelfSigned or CA issuer needs to be issued, to
// become Ready and to be renewed.
var controllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	// With no policy engine, something must approve CertificateRequests; upstream's
	// default approver approves them all.
	approver.ControllerName,
	crca.CRControllerName,
	crselfsigned.CRControllerName,
	trigger.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	issuing.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
}

// workers per controller, upstream's default.
const workers = 5

// startControllers creates every controller, runs each in g and starts the informers
// they share. It returns the function that stops the informers once g is done.
func startControllers(ctx context.Context, g *errgroup.Group, log logr.Logger, cfg config) (stopInformers func(), err error) {
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig: cfg.kubeconfig,
		// Used only where the API server has no priority and fairness: upstream's defaults.
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: cfg.clusterResourceNamespace},
		// Upstream's defaults, which its configuration file sets: zero values would
		// retry a failed request at once and copy no annotation.
		CertificateOptions: controller.CertificateOptions{
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("create controller context: %w", err)
	}
	// Every Context the factory builds shares its informer factories.
	shared, err := factory.Build()
	if err != nil {
		return nil, fmt.Errorf("create controller context: %w", err)
	}
	stopInformers = func() {
		shared.SharedInformerFactory.Shutdown()
		shared.KubeSharedInformerFactory.Shutdown()
	}
	for _, name := range controllers {
		c, err := controller.Known()[name](factory)
		if err != nil {
			return stopInformers, fmt.Errorf("create controller %s: %w", name, err)
		}
		g.Go(func() error {
			log := log.WithValues("controller", name)
			log.Info("running")
			defer log.Info("stopped")
			// Run fails when the context ends before the caches sync: not an error.
			if err := c.Run(workers, ctx); err != nil && ctx.Err() == nil {
				return fmt.Errorf("controller %s: %w", name, err)
			}
			return nil
		})
	}
	// Only now: a factory starts the informers requested before Start, and each
	// controller requested its own when it was created.
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	return stopInformers, nil
}
