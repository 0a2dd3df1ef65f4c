package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	"github.com/cert-manager/cert-manager/pkg/util"
)

// newCAInjector returns the manager of cert-manager's CA injector, which copies the CA
// of the Certificate named by `cert-manager.io/inject-ca-from` into webhook
// configurations, APIServices and CRD conversion webhooks. It runs on Start.
func newCAInjector(ctx context.Context, restConfig *rest.Config) (manager.Manager, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		kscheme.AddToScheme, cmscheme.AddToScheme, apiextensionsv1.AddToScheme, apiregistrationv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("build cainjector scheme: %w", err)
		}
	}
	mgr, err := ctrl.NewManager(util.RestConfigWithUserAgent(restConfig, "cainjector"), ctrl.Options{
		Scheme: scheme,
		// No metrics, health or pprof listeners: tests look at the objects.
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{ReaderFailOnMissingInformer: true},
		// As upstream: the injector reads Secrets from the API server and its watches
		// cache only their metadata, so no informer holds every Secret's data.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return nil, fmt.Errorf("create cainjector manager: %w", err)
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		// inject-ca-from names a Certificate; without this only inject-ca-from-secret works.
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	}); err != nil {
		return nil, fmt.Errorf("register cainjector reconcilers: %w", err)
	}
	return mgr, nil
}
