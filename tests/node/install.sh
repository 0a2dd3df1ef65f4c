#!/usr/bin/env bash
# Installs what the real node runs from Debian's packages, once per machine:
# containerd, runc, the CNI plugins, and iptables for kubelet and kube-proxy (which
# write rules only inside the node's network namespace). Needs root and apt-get; prints
# one line and does nothing elsewhere.
set -euo pipefail

packages=(containerd runc containernetworking-plugins iptables)

if [[ "$(uname -s)" != Linux || "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
	echo "==> the real node's packages are not installed: they need root and apt-get (Debian or Ubuntu)" >&2
	exit 0
fi
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[[ ${#missing[@]} -gt 0 ]] || exit 0
echo "==> installing ${missing[*]} from Debian's packages (once per machine)" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
