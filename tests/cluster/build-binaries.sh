#!/usr/bin/env bash
# Usage: build-binaries.sh [COMPONENT...]
#
# Builds the named components (default: etcd kwok kubernetes, the local control plane)
# from the Go module proxy and caches them outside the repository, one directory per
# component and version:
#
#   $CONFIGHASH_CACHE/kubernetes-vX.Y.Z/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl}
#   $CONFIGHASH_CACHE/etcd-vX.Y.Z/etcd
#   $CONFIGHASH_CACHE/kwok-vX.Y.Z/kwok
#   $CONFIGHASH_CACHE/node-vX.Y.Z/{kubelet,kube-proxy,pause} (a real node, for make test-node)
#   $CONFIGHASH_CACHE/helm-vX.Y.Z/helm (only the tests need it, to lint and render the chart)
#   $CONFIGHASH_CACHE/prometheus-vX.Y.Z/prometheus (the tests of the metric gate read a real one),
#     without its service discovery plugins (tag remove_all_sd): the tests name their targets
#
# Each directory is built under a temporary name and renamed into place, under a lock,
# so concurrent runs never see or leave a half-built cache. Prints one line per named
# component, NAME=DIR, on stdout; each build that runs, with its elapsed time, and any
# failure go to stderr.
set -euo pipefail

KUBE_VERSION="${CONFIGHASH_KUBE_VERSION:-v1.36.3}"
ETCD_VERSION="${CONFIGHASH_ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${CONFIGHASH_KWOK_VERSION:-v0.7.0}"
HELM_VERSION="${CONFIGHASH_HELM_VERSION:-v3.22.0}"
# Prometheus 3.x, as its Go module numbers it (v0.316.0 is Prometheus v3.16.0).
PROMETHEUS_VERSION="${CONFIGHASH_PROMETHEUS_VERSION:-v0.316.0}"
CACHE="${CONFIGHASH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/confighash}"

mkdir -p "$CACHE"

# build_once NAME VERSION BUILDER: runs BUILDER DIR only if $CACHE/NAME-VERSION is absent.
build_once() {
	local name="$1" version="$2" builder="$3"
	local final="$CACHE/$name-$version"
	[[ -d "$final" ]] && return 0
	exec {lock}>"$final.lock"
	flock "$lock"
	if [[ ! -d "$final" ]]; then
		local tmp
		tmp="$(mktemp -d "$final.tmp.XXXXXX")"
		echo "==> building $name $version from the Go module proxy (once per machine, cached in $CACHE)" >&2
		local start=$SECONDS
		if ! ("$builder" "$tmp" "$version"); then
			rm -rf "$tmp"
			echo "==> building $name $version failed" >&2
			return 1
		fi
		echo "    built $name in $(elapsed $((SECONDS - start)))" >&2
		rm -rf "$tmp/src"
		chmod 755 "$tmp"
		mv -T "$tmp" "$final"
	fi
	flock -u "$lock"
	exec {lock}>&-
}

# elapsed SECONDS: a duration as 12m34s.
elapsed() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# quiet CMD...: runs CMD, showing its output only if it fails.
quiet() {
	local out
	if ! out="$("$@" 2>&1)"; then
		echo "$out" >&2
		return 1
	fi
}

# fetch CMD...: runs a step that downloads modules with a time limit, up to 5 times. A
# connection to the module proxy can stall (seen here: a zip stuck at 0 bytes for 8
# minutes, which curl then fetched in under a second); each attempt keeps what the
# ones before it downloaded.
fetch() {
	local attempt status
	for attempt in 1 2 3 4 5; do
		# --foreground keeps the command in this process group, where Ctrl-C reaches it.
		status=0
		timeout --foreground 180 "$@" || status=$?
		[[ $status -eq 124 ]] || return "$status" # done, or failed for another reason
		echo "    $* did not finish in 3 minutes (attempt $attempt of 5)" >&2
	done
	return 1
}

# new_module DIR: an empty throwaway module to resolve and build one component in.
new_module() {
	mkdir -p "$1/src"
	(cd "$1/src" && go mod init confighash.local/build >/dev/null 2>&1)
}

# The builders run where errexit does not apply (the caller checks their status), so
# each step that can fail returns explicitly.

# kube_module DIR VERSION: a throwaway module in DIR/src that can build commands of
# k8s.io/kubernetes at VERSION. Kubernetes requires its staging modules at v0.0.0 with
# replaces into ./staging; replaces do not apply to a dependency, so each is mapped to
# its published version. Sets kube_dir to the module's source directory.
kube_module() {
	local out="$1" version="$2"
	local staging="v0.${version#v1.}"
	new_module "$out" && cd "$out/src" || return 1
	local info gomod mods
	info="$(fetch go mod download -json "k8s.io/kubernetes@$version")" || { echo "$info" >&2; return 1; }
	gomod="$(sed -n 's/.*"GoMod": "\(.*\)",/\1/p' <<<"$info")"
	mods="$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod")" || return 1
	for m in $mods; do
		go mod edit -replace "$m=$m@$staging" || return 1
	done
	kube_dir="$(sed -n 's/.*"Dir": "\(.*\)",/\1/p' <<<"$info")"
}

# kube_build DIR VERSION CMD...: builds k8s.io/kubernetes/cmd/CMD at VERSION into DIR.
kube_build() {
	local out="$1" version="$2"
	shift 2
	local pkgs=()
	for c in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
	quiet fetch go get "${pkgs[@]/%/@$version}" || return 1
	CGO_ENABLED=0 go build -o "$out" \
		-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/client-go/pkg/version.gitVersion=$version" \
		"${pkgs[@]}"
}

build_kubernetes() {
	kube_module "$1" "$2" || return 1
	kube_build "$1" "$2" kube-apiserver kube-controller-manager kube-scheduler kubectl
}

# build_node: what a real node runs beside containerd: kubelet, kube-proxy, and the
# pause binary, built from the pause.c in the same module (static, as Kubernetes
# builds it).
build_node() {
	kube_module "$1" "$2" || return 1
	kube_build "$1" "$2" kubelet kube-proxy || return 1
	gcc -Os -Wall -Werror -static -DVERSION="$2" -o "$1/pause" "$kube_dir/build/pause/linux/pause.c"
}

# build_main OUT VERSION PACKAGE BINARY: builds the main package PACKAGE at VERSION (of
# the module that holds it) as OUT/BINARY. go get names the package, not the module,
# so that the requirements of everything it imports are added.
build_main() {
	local out="$1" version="$2" pkg="$3" binary="$4"
	new_module "$out" && cd "$out/src" || return 1
	quiet fetch go get "$pkg@$version" || return 1
	CGO_ENABLED=0 go build -o "$out/$binary" -ldflags "-s -w" "$pkg"
}

build_etcd() { build_main "$1" "$2" go.etcd.io/etcd/server/v3 etcd; }
build_kwok() { build_main "$1" "$2" sigs.k8s.io/kwok/cmd/kwok kwok; }
build_helm() { build_main "$1" "$2" helm.sh/helm/v3/cmd/helm helm; }
build_prometheus() { GOFLAGS=-tags=remove_all_sd build_main "$1" "$2" github.com/prometheus/prometheus/cmd/prometheus prometheus; }

components=("$@")
[[ ${#components[@]} -gt 0 ]] || components=(etcd kwok kubernetes)
for c in "${components[@]}"; do
	case "$c" in
	etcd) version="$ETCD_VERSION" ;;
	kwok) version="$KWOK_VERSION" ;;
	kubernetes | node) version="$KUBE_VERSION" ;;
	helm) version="$HELM_VERSION" ;;
	prometheus) version="$PROMETHEUS_VERSION" ;;
	*)
		echo "build-binaries.sh: unknown component $c (want etcd, kwok, kubernetes, node, helm or prometheus)" >&2
		exit 2
		;;
	esac
	build_once "$c" "$version" "build_$c"
	echo "$c=$CACHE/$c-$version"
done
