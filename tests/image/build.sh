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
# Environment: VERSION (what `confighash version` says), TAG (the image tag; default
# VERSION), REVISION (the commit `confighash version` says; default this checkout's,
# revision.sh), REPO (default
# ghcr.io/confighash), ARCH (the image's architecture; default this machine's), KO (a
# ko binary; default: ko KO_VERSION, installed once into the cache), CONFIGHASH_CACHE.
# With OCI_LAYOUT, a directory: each package's image for every architecture ARCH lists
# (comma-separated, amd64 and arm64 at most) is written there as one OCI image index,
# OCI_LAYOUT/NAME, with each platform's SBOM in OUTDIR/sbom-NAME/ (ko's names), rather
# than a tarball.
set -euo pipefail

out="$(mkdir -p "$1" && cd "$1" && pwd)"
shift
cd "$(dirname "$0")/../.." # packages are named from the repository's top
packages=("$@")
[[ ${#packages[@]} -gt 0 ]] || packages=(./cmd/confighash)

BASE_IMAGE="${BASE_IMAGE:-gcr.io/distroless/static-debian12:nonroot@sha256:d093aa3e30dbadd3efe1310db061a14da60299baff8450a17fe0ccc514a16639}"
REPO="${REPO:-ghcr.io/confighash}"
VERSION="${VERSION:-dev}"
TAG="${TAG:-$VERSION}"
REVISION="${REVISION:-$(tests/image/revision.sh)}"
KO="${KO:-}"
CACHE="${CONFIGHASH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/confighash}"
arch="${ARCH:-$(go env GOARCH)}"
platforms="linux/${arch//,/,linux/}"
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
# directory ko reads as its cache), an image index for amd64 and arm64 whose images
# share their one layer, and prints its name by digest. The layout is reproducible
# (sorted, fixed times and owners), so builds that assemble it at once write the same.
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
	local diff_id layer layer_size a config manifest entries="" listed="" index
	diff_id="$(sha "$tmp/layer.tar")"
	layer="$(sha "$tmp/layer.tar.gz")"
	layer_size="$(stat -c %s "$tmp/layer.tar.gz")"
	mkdir -p "$layout/blobs/sha256"
	mv "$tmp/layer.tar.gz" "$layout/blobs/sha256/$layer"
	for a in amd64 arm64; do
		printf '{"architecture":"%s","os":"linux","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],"User":"65532","WorkingDir":"/home/nonroot"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
			"$a" "$diff_id" >"$tmp/config.json"
		config="$(sha "$tmp/config.json")"
		printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":%s}]}' \
			"$config" "$(stat -c %s "$tmp/config.json")" "$layer" "$layer_size" >"$tmp/manifest.json"
		manifest="$(sha "$tmp/manifest.json")"
		entries+="${entries:+,}{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:$manifest\",\"size\":$(stat -c %s "$tmp/manifest.json"),\"platform\":{\"architecture\":\"$a\",\"os\":\"linux\"}}"
		mv "$tmp/config.json" "$layout/blobs/sha256/$config"
		mv "$tmp/manifest.json" "$layout/blobs/sha256/$manifest"
	done
	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}' "$entries" >"$tmp/index.json"
	index="$(sha "$tmp/index.json")"
	# ko looks up the index and each of its images by digest among the layout's entries.
	listed="{\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"digest\":\"sha256:$index\",\"size\":$(stat -c %s "$tmp/index.json")},$entries"
	mv "$tmp/index.json" "$layout/blobs/sha256/$index"
	printf '{"schemaVersion":2,"manifests":[%s]}' "$listed" >"$tmp/layout-index.json"
	mv "$tmp/layout-index.json" "$layout/index.json"
	echo '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
	rm -rf "$tmp"
	echo "confighash.local/static-nonroot@sha256:$index"
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
	if [[ -n "${OCI_LAYOUT:-}" ]]; then
		rm -rf "${OCI_LAYOUT:?}/$name"
		target=(--oci-layout-path="$OCI_LAYOUT/$name")
	else
		target=(--tarball="$out/$name.tar")
	fi
	# ko's progress goes to a log, shown if it fails.
	if ! KO_DEFAULTBASEIMAGE="$base" KO_DOCKER_REPO="$REPO/$name" CGO_ENABLED=0 GOFLAGS=-trimpath VERSION="$VERSION" REVISION="$REVISION" \
		"$KO" build --bare --push=false --platform="$platforms" --image-user=65532:65532 \
		--tags="$TAG" "${target[@]}" --sbom=spdx --sbom-dir="$out/sbom-$name" "$pkg" >"$out/$name.log" 2>&1; then
		cat "$out/$name.log" >&2
		exit 1
	fi
	rm "$out/$name.log"
	if [[ -n "${OCI_LAYOUT:-}" ]]; then
		echo "$name=$OCI_LAYOUT/$name $(du -sh "$OCI_LAYOUT/$name" | cut -f1)"
		continue
	fi
	mv "$out/sbom-$name"/*.spdx.json "$out/$name.spdx.json"
	rmdir "$out/sbom-$name"
	echo "$name=$out/$name.tar $(du -h "$out/$name.tar" | cut -f1)"
done
