#!/usr/bin/env bash
# Usage: release.sh VERSION [OUTDIR]
#
# Builds release VERSION (semver with a leading v: v0.1.0, v1.2.0-rc.1) into OUTDIR
# (default dist/VERSION), what its release page carries:
#
#   confighash_X.Y.Z_OS_ARCH.tar.gz   confighash and kubectl-confighash, per platform, and
#                                     the LICENSE
#   confighash.krew.yaml              the krew plugin manifest of those archives
#   confighash-image_X.Y.Z.oci.tar    the image ghcr.io/confighash/confighash:X.Y.Z, one
#                                     OCI image index for every linux architecture of
#                                     PLATFORMS, each image's SBOM attached, as an OCI
#                                     layout (tests/image/index.sh)
#   confighash-image_X.Y.Z_linux_ARCH.spdx.json
#                                     each image's SBOM
#   confighash-X.Y.Z.tgz              the Helm chart, version and appVersion X.Y.Z, with
#                                     Artifact Hub's annotations: what helm push sends
#   confighash.yaml                   manifests/ rendered (TLS from cert-manager), with
#                                     the image of this release
#   release-notes.md                  VERSION's section of CHANGELOG.md, and the image's
#                                     digest
#   provenance.intoto.json            what was built, from which commit, with what (an
#                                     in-toto statement, SLSA provenance v1)
#   checksums.txt                     sha256 of each of the above
#
# It refuses a VERSION that is not semver, or that CHANGELOG.md has no section for,
# before building anything.
#
# Environment: PLATFORMS, the binaries' (default "linux/amd64 linux/arm64 darwin/amd64
# darwin/arm64"), CONFIGHASH_CACHE (helm, ko and kustomize are built there once per
# machine).
set -euo pipefail

version="${1:-}"
cd "$(dirname "$0")/../.."
out="${2:-dist/$version}"
PLATFORMS="${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}"
CACHE="${CONFIGHASH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/confighash}"
# The kustomize kubectl v1.36 embeds, so that confighash.yaml is what apply -k makes.
KUSTOMIZE_VERSION=v5.8.1

fail() {
	echo "release: $*" >&2
	exit 1
}

semver='^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$'
[[ "$version" =~ $semver ]] || fail "VERSION=\"$version\" is not a semantic version with a leading v; run make release VERSION=v0.1.0"
plain="${version#v}" # the chart's version, the image tag and the file names say it without the v
tag="${plain//+/_}"   # an image tag cannot hold a +

# The notes: the lines under "## [X.Y.Z]" up to the next version or the link references.
notes="$(awk -v head="## [$plain]" '
	index($0, "## [") == 1 { if (found) exit; found = index($0, head) == 1; next }
	/^\[[^]]+\]: / { if (found) exit }
	found && (NF || text) { text = 1; print }' CHANGELOG.md)"
[[ -n "$notes" ]] || fail "CHANGELOG.md has no section \"## [$plain] - YYYY-MM-DD\" with what changes in $version; write one first"

started="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
start=$SECONDS
# step MESSAGE: says what runs now, and how long the release has taken so far.
step() { printf '==> %s (%ds)\n' "$1" $((SECONDS - start)) >&2; }

# tool NAME PACKAGE VERSION: the path of PACKAGE's command at VERSION, installed from
# the Go module proxy into the cache once per machine.
tool() {
	local bin="$CACHE/tools/$1-$3" tmp
	if [[ ! -x "$bin" ]]; then
		step "installing $1 $3 from the Go module proxy (once per machine)"
		mkdir -p "$CACHE/tools"
		tmp="$(mktemp -d "$CACHE/tools/tmp.XXXXXX")"
		GOBIN="$tmp" go install "$2@$3"
		mv "$tmp/$1" "$bin"
		rmdir "$tmp"
	fi
	echo "$bin"
}

commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
revision="$(tests/image/revision.sh)"
rm -rf "$out"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# Archives are the same for the same commit: sorted, owned by root, dated by the commit.
mtime="@$(git log -1 --format=%ct 2>/dev/null || echo 0)"
targz() { tar --sort=name --mtime="$mtime" --owner=0 --group=0 --numeric-owner -C "$1" -cf - "${@:3}" | gzip -n -9 >"$2"; }

for platform in $PLATFORMS; do
	os="${platform%/*}" arch="${platform#*/}"
	step "confighash and kubectl-confighash for $os/$arch"
	dir="$tmp/confighash_${plain}_${os}_${arch}"
	mkdir -p "$dir"
	GOOS="$os" GOARCH="$arch" CGO_ENABLED=0 go build -trimpath \
		-ldflags "-s -w -X main.version=$version -X main.revision=$revision" -o "$dir/confighash" ./cmd/confighash
	# A copy, not a link: tar cannot extract a hard link alone, and kubectl needs a file.
	cp "$dir/confighash" "$dir/kubectl-confighash"
	cp LICENSE "$dir/"
	targz "$dir" "$out/${dir##*/}.tar.gz" confighash kubectl-confighash LICENSE
done

go build -o "$tmp/assemble" ./tests/release/assemble
page="https://github.com/confighash/confighash/releases/download/"
step "the krew plugin manifest"
"$tmp/assemble" krew "$out" "$version" "$page"

linux=""
for platform in $PLATFORMS; do
	[[ "${platform%/*}" == linux ]] && linux+="${linux:+,}${platform#*/}"
done
[[ -n "$linux" ]] || fail "PLATFORMS=\"$PLATFORMS\" names no linux platform for the image"
step "the image ghcr.io/confighash/confighash:$tag, one index for linux/${linux//,/, linux/}"
digest="$(ARCH="$linux" VERSION="$version" TAG="$tag" REVISION="$revision" tests/image/index.sh "$tmp/image")"
mv "$tmp/image/confighash.oci.tar" "$out/confighash-image_${plain}.oci.tar"
for arch in ${linux//,/ }; do
	mv "$tmp/image/confighash_linux_$arch.spdx.json" "$out/confighash-image_${plain}_linux_${arch}.spdx.json"
done
printf '# confighash %s\n\n%s\n\nThe image: `ghcr.io/confighash/confighash:%s`, `%s` (linux/%s), with each platform'"'"'s SBOM.\n' \
	"$version" "$notes" "$tag" "$digest" "${linux//,/, linux/}" >"$out/release-notes.md"

step "the Helm chart $plain"
helm="$(tests/cluster/build-binaries.sh helm | sed -n 's/^helm=//p')/helm"
# A copy: the chart in the repository keeps its own version.
mkdir "$tmp/chart"
cp -R manifests/helm/confighash "$tmp/chart/"
"$tmp/assemble" chart "$tmp/chart/confighash/Chart.yaml" "$out/release-notes.md" "ghcr.io/confighash/confighash:$tag" "linux/${linux//,/,linux/}"
"$helm" package --version "$plain" --app-version "$plain" --destination "$out" "$tmp/chart/confighash" >/dev/null

step "confighash.yaml, kustomize $KUSTOMIZE_VERSION"
kustomize="$(tool kustomize sigs.k8s.io/kustomize/kustomize/v5 "$KUSTOMIZE_VERSION")"
# kustomize takes a base by a relative path only.
mkdir "$tmp/overlay"
cat >"$tmp/overlay/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $(realpath --relative-to="$tmp/overlay" manifests)
images:
- name: ghcr.io/confighash/confighash
  newTag: "$tag"
EOF
{
	echo "# confighash $version (revision $revision): kubectl apply -f confighash.yaml"
	echo "# manifests/ rendered, with TLS from cert-manager (docs/install.md)."
	"$kustomize" build "$tmp/overlay"
} >"$out/confighash.yaml"
images="$(sed -n 's/^ *image: //p' "$out/confighash.yaml" | sort -u)"
[[ "$images" == "ghcr.io/confighash/confighash:$tag" ]] || fail "confighash.yaml names other images than ghcr.io/confighash/confighash:$tag: $images"

step "provenance.intoto.json and checksums.txt"
"$tmp/assemble" provenance "$out" "$version" "$commit" "ghcr.io/confighash/confighash:$tag" "$digest" "$started" \
	"ko=$(sed -n 's/^KO_VERSION=//p' tests/image/build.sh)" "kustomize=$KUSTOMIZE_VERSION" "helm=$("$helm" version --template '{{.Version}}')"
(cd "$out" && sha256sum -- * >"$tmp/checksums.txt")
mv "$tmp/checksums.txt" "$out/"

step "done: $out"
(cd "$out" && ls -lh -- *) >&2
