package node

import (
	"fmt"
	"os"
	"path/filepath"
	"text/template"

	"github.com/confighash/confighash/tests/cluster"
)

// containerdConfig keeps every path of containerd in the node's directory, but the
// few it cannot move (hostPaths). The VM this was made on has cgroup v1 and no
// CAP_SYS_RESOURCE: restrict_oom_score_adj keeps containerd from lowering scores.
const containerdConfig = `version = 2
root = "{{.Dir}}/containerd/root"
state = "{{.Dir}}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{{.Dir}}/containerd.sock"
[ttrpc]
  address = "{{.Dir}}/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{{.Dir}}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{.PauseImage}}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{{.Dir}}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{.CNIBinDir}}"
    conf_dir = "{{.Dir}}/cni"
`

// cniConfig is one bridge for the node's pods; their addresses stay in the node's
// directory. The host routes the pods' range to the node, so no masquerading.
const cniConfig = `{
  "cniVersion": "0.4.0",
  "name": "confighash-node",
  "plugins": [{
    "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "dataDir": "{{.Dir}}/cni-ipam", "ranges": [[{"subnet": "{{.PodCIDR}}"}]], "routes": [{"dst": "0.0.0.0/0"}]}
  }]
}
`

// kubeletConfig: cgroup v1 (failCgroupV1: false) with the cgroupfs driver (containerd
// 1.6 does not report one); every pod under the node's own cgroup; a short sync so
// mounted Secrets update within seconds; eviction only when the disk is nearly full.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: {{.CgroupRoot}}
containerRuntimeEndpoint: unix://{{.Dir}}/containerd.sock
failSwapOn: false
podLogsDir: {{.Dir}}/pod-logs
volumePluginDir: {{.Dir}}/volume-plugins
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
syncFrequency: 10s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: {{.CA}}}
authorization: {mode: AlwaysAllow}
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`

// kubeProxyConfig: iptables mode (the VM has no IPVS); conntrack limits left as the
// kernel has them, since those sysctls are the host's.
const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: {{.Name}}
clusterCIDR: {{.PodCIDR}}
clientConnection: {kubeconfig: {{.Kubeconfig}}}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`

// writeConfig writes the components' configuration files into the node's directory.
func (n *Node) writeConfig(c *cluster.Cluster) error {
	values := map[string]string{
		"Dir": n.dir, "PauseImage": PauseImage, "CNIBinDir": cniBinDir, "PodCIDR": podCIDR.String(),
		"CgroupRoot": n.cgroupRoot, "CA": filepath.Join(c.Dir, "ca.crt"), "Name": Name, "Kubeconfig": c.Kubeconfig,
	}
	for file, text := range map[string]string{
		"containerd.toml": containerdConfig, "cni/10-confighash.conflist": cniConfig,
		"kubelet.yaml": kubeletConfig, "kube-proxy.yaml": kubeProxyConfig,
	} {
		path := n.path(file)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		err = template.Must(template.New(file).Option("missingkey=error").Parse(text)).Execute(f, values)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", file, err)
		}
	}
	return nil
}
