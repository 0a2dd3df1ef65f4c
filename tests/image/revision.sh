#!/usr/bin/env bash
# Usage: revision.sh
#
# Prints the revision confighash's builds stamp (main.revision), the same for the
# release's binaries and its image: the checkout's commit, 12 hex digits, "-dirty" when
# a tracked file has changes; "unknown" outside a checkout.
set -euo pipefail
cd "$(dirname "$0")/../.."
commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
revision="${commit:0:12}"
if [[ "$revision" != unknown && -n "$(git status --porcelain --untracked-files=no)" ]]; then
	revision+="-dirty"
fi
echo "$revision"
