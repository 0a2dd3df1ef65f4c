#!/usr/bin/env bash
# Usage: build.sh OUTDIR [PACKAGE...]
#
# Builds the image of each main package (default ./cmd/confighash) without a Docker
# engine, with ko: OUTDIR/NAME.tar (for `docker load` or `ctr images import`) and
# OUTDIR/NAME.spdx.json, its SBOM. The layout is the Dockerfile's: the static binary at
# /ko-app/NAME, its entrypoint, user 65532.
#
# The base is BASE_IMAGE (distroless static nonroot, pinned by digest) when its
# registry answers. Where no registry can be reached, it is a base assembled here with
# what distroless static gives a Go binary (passwd and group with the nonroot user
# 65532, CA certificates, /tmp), kept as an OCI layout in the cache and named by its
# digest, which ko reads from its cache without asking a registry.
#
# Environment: VERSION (the image tag and `confighash version`), REPO (default
# ghcr.io/confighash), ARCH (the image's architecture; default this machine's), KO (a
# ko binary; default: ko KO_VERSION, installed once into the cache), CONFIGHASH_CACHE.
set -euo pipefail

out="$(mkdir -p "$1" && cd "$1" && pwd)"
shift
cd "$(dirname "$0")/../.." # packages are named from the repository's top
packages=("$@")
[[ ${#packages[@]} -gt 0 ]] || packages=(./cmd/confighash)

BASE_IMAGE="${BASE_IMAGE:-gcr.io/distroless/static-debian12:nonroot@sha256:d093aa3e30dbadd3efe1310db061a14da60299baff8450a17fe0ccc514a16639}"
REPO="${REPO:-ghcr.io/confighash}"
VERSION="${VERSION:-dev}"
KO="${KO:-}"
CACHE="${CONFIGHASH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/confighash}"
arch="${ARCH:-$(go env GOARCH)}"
KO_VERSION=v0.19.1

if [[ -z "$KO" ]]; then
	KO="$CACHE/tools/ko-$KO_VERSION"
	if [[ ! -x "$KO" ]]; then
		echo "==> installing ko $KO_VERSION from the Go module proxy (once per machine)" >&2
		mkdir -p "$CACHE/tools"
		tmp="$(mktemp -d "$CACHE/tools/tmp.XXXXXX")"
		GOBIN="$tmp" go install "github.com/google/ko@$KO_VERSION"
		mv "$tmp/ko" "$KO"
		rmdir "$tmp"
	fi
fi

# sha FILE: the hex sha256 of FILE.
sha() { sha256sum "$1" | cut -d' ' -f1; }

# local_base: assembles the base as an OCI layout in $CACHE/image-base/img (the
# directory ko reads as its cache) and prints its name by digest. The layer is
# reproducible: sorted, fixed times and owners.
local_base() {
	local layout="$CACHE/image-base/img" stage tmp
	tmp="$(mktemp -d)"
	stage="$tmp/root"
	mkdir -p "$stage/etc/ssl/certs" "$stage/tmp" "$stage/home/nonroot"
	chmod 1777 "$stage/tmp"
	chmod 700 "$stage/home/nonroot"
	printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
		'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$stage/etc/passwd"
	printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' >"$stage/etc/group"
	cp /etc/ssl/certs/ca-certificates.crt "$stage/etc/ssl/certs/"
	local tarflags=(--sort=name --mtime=@0 --numeric-owner --format=posix --pax-option=delete=atime,delete=ctime -C "$stage")
	tar "${tarflags[@]}" --owner=0 --group=0 --exclude=./home/nonroot -cf "$tmp/layer.tar" .
	tar "${tarflags[@]}" --owner=65532 --group=65532 -rf "$tmp/layer.tar" ./home/nonroot
	gzip -n -9 <"$tmp/layer.tar" >"$tmp/layer.tar.gz"
	local diff_id layer layer_size config config_size manifest
	diff_id="$(sha "$tmp/layer.tar")"
	layer="$(sha "$tmp/layer.tar.gz")"
	layer_size="$(stat -c %s "$tmp/layer.tar.gz")"
	printf '{"architecture":"%s","os":"linux","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],"User":"65532","WorkingDir":"/home/nonroot"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
		"$arch" "$diff_id" >"$tmp/config.json"
	config="$(sha "$tmp/config.json")"
	config_size="$(stat -c %s "$tmp/config.json")"
	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":%s}]}' \
		"$config" "$config_size" "$layer" "$layer_size" >"$tmp/manifest.json"
	manifest="$(sha "$tmp/manifest.json")"
	mkdir -p "$layout/blobs/sha256"
	mv "$tmp/layer.tar.gz" "$layout/blobs/sha256/$layer"
	mv "$tmp/config.json" "$layout/blobs/sha256/$config"
	printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s}]}' \
		"$manifest" "$(stat -c %s "$tmp/manifest.json")" >"$layout/index.json"
	mv "$tmp/manifest.json" "$layout/blobs/sha256/$manifest"
	echo '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
	rm -rf "$tmp"
	echo "confighash.local/static-nonroot@sha256:$manifest"
}

registry="${BASE_IMAGE%%/*}"
if [[ "$(curl -s -o /dev/null -m 5 -w '%{http_code}' "https://$registry/v2/" || true)" != 000 ]]; then
	export KOCACHE="$CACHE/ko"
	base="$BASE_IMAGE"
else
	export KOCACHE="$CACHE/image-base"
	mkdir -p "$KOCACHE"
	# One writer at a time: concurrent builds (test packages) share the layout.
	exec {lock}>"$KOCACHE.lock"
	flock "$lock"
	base="$(local_base)"
	flock -u "$lock"
	echo "==> $registry cannot be reached: base assembled here, $base" >&2
fi

for pkg in "${packages[@]}"; do
	name="$(basename "$pkg")"
	# ko's progress goes to a log, shown if it fails.
	if ! KO_DEFAULTBASEIMAGE="$base" KO_DOCKER_REPO="$REPO/$name" CGO_ENABLED=0 GOFLAGS=-trimpath VERSION="$VERSION" \
		"$KO" build --bare --push=false --platform="linux/$arch" --image-user=65532:65532 \
		--tags="$VERSION" --tarball="$out/$name.tar" --sbom=spdx --sbom-dir="$out/sbom-$name" "$pkg" >"$out/$name.log" 2>&1; then
		cat "$out/$name.log" >&2
		exit 1
	fi
	rm "$out/$name.log"
	mv "$out/sbom-$name"/*.spdx.json "$out/$name.spdx.json"
	rmdir "$out/sbom-$name"
	echo "$name=$out/$name.tar $(du -h "$out/$name.tar" | cut -f1)"
done
