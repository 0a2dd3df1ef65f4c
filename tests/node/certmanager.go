package node

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
)

// StartCertManager installs cert-manager's CRDs and runs its issuing controllers and
// CA injector (tests/node/certmanager) beside the control plane, which stops it.
func (e *Env) StartCertManager(ctx context.Context) error {
	if err := e.Cluster.InstallCertManagerCRDs(ctx); err != nil {
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
