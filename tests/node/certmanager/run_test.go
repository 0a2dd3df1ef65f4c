package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// An API server that serves no cert-manager.io/v1 stands in for a cluster without the
// CRDs: nothing more of a real one is needed to see run refuse it.
func TestRunFailsAtOnceWithoutWhatItNeeds(t *testing.T) {
	noCRDs := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(noCRDs.Close)
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: noCRDs.URL}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c"}
	cfg.CurrentContext = "c"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}

	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no --kubeconfig is refused":                           {nil, "--kubeconfig is required"},
		"a kubeconfig that cannot be read is refused":          {[]string{"--kubeconfig=" + filepath.Join(t.TempDir(), "none")}, "load kubeconfig"},
		"an API server without cert-manager's CRDs is refused": {[]string{"--kubeconfig=" + kubeconfig, "--crd-timeout=0"}, "CRDs are not served"},
	} {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(t.Context(), tc.args, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run: got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
