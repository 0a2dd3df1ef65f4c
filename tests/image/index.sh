#!/usr/bin/env bash
# Usage: index.sh OUTDIR
#
# Builds the image of confighash for every linux architecture of ARCH (comma-separated;
# default "amd64,arm64") as one OCI image index, as a release carries it:
#
#   OUTDIR/confighash.oci.tar          an OCI image layout, tarred: its one entry the
#                                      index ghcr.io/confighash/confighash:TAG, for
#                                      crane push, skopeo copy --all oci-archive: or
#                                      ctr images import --platform
#   OUTDIR/confighash_linux_ARCH.spdx.json
#                                      each image's SBOM, also attached to the index as
#                                      an attestation (tests/release/assemble)
#
# and prints the index's digest. Environment: ARCH, and build.sh's: VERSION, TAG
# (default VERSION), REVISION.
set -euo pipefail

out="$(mkdir -p "$1" && cd "$1" && pwd)"
cd "$(dirname "$0")/../.."
ARCH="${ARCH:-amd64,arm64}"
VERSION="${VERSION:-dev}"
TAG="${TAG:-$VERSION}"
# ko names the layout's image after its path, which may hold only lowercase letters,
# digits and _-./.
tmp="/tmp/confighash-index-$$-$RANDOM"
mkdir "$tmp"
trap 'rm -rf "$tmp"' EXIT

ARCH="$ARCH" OCI_LAYOUT="$tmp/oci" VERSION="$VERSION" TAG="$TAG" tests/image/build.sh "$tmp/build" >/dev/null
go build -o "$tmp/assemble" ./tests/release/assemble
digest="$("$tmp/assemble" image "$tmp/oci/confighash" "$tmp/build/sbom-confighash" "ghcr.io/confighash/confighash:$TAG")"
for arch in ${ARCH//,/ }; do
	cp "$tmp/build/sbom-confighash/confighash-linux-$arch.spdx.json" "$out/confighash_linux_$arch.spdx.json"
done
# The same bytes for the same build: sorted, owned by root, dated at zero.
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$tmp/oci/confighash" -cf "$out/confighash.oci.tar" oci-layout index.json blobs
echo "$digest"
