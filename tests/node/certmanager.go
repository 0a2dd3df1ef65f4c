package node

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// StartCertManager installs cert-manager's CRDs from the module the project requires
// and runs its issuing controllers and CA injector (tests/node/certmanager) beside
// the control plane, which stops it.
func (e *Env) StartCertManager(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager").Output()
	if err != nil {
		return fmt.Errorf("locate the cert-manager module: %w", err)
	}
	crds := filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds")
	// Server-side: the CRDs are too large for client-side apply's annotation.
	if _, err := e.Cluster.Kubectl(ctx, nil, "apply", "--server-side", "-f", crds); err != nil {
		return err
	}
	if _, err := e.Cluster.Kubectl(ctx, nil, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io", "crd/certificaterequests.cert-manager.io"); err != nil {
		return err
	}
	binary := filepath.Join(e.dir, "certmanager")
	build := exec.CommandContext(ctx, "go", "build", "-o", binary, "./tests/node/certmanager")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build cert-manager: %w: %s", err, out)
	}
	return e.Cluster.Run("cert-manager", binary, "--kubeconfig="+e.Cluster.Kubeconfig)
}
