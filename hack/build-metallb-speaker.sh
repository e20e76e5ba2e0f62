#!/usr/bin/env bash
# build-metallb-speaker.sh [OUTDIR] [METALLB_VERSION]
#
# Builds MetalLB's speaker (go.universe.tf/metallb/speaker) from the Go module proxy into
# OUTDIR (default: $BAREMETAL_CCM_CACHE/metallb/v<version>, the cache defaulting to
# ~/.cache/baremetal-ccm) for the e2e test that runs a real speaker against BIRD. The
# version defaults to the one go.mod pins for MetalLB's API types, so the CRDs the tests
# install and the speaker that reads them always match. github.com/metallb/frr-k8s is
# not in the checksum database, hence GONOSUMDB. The first build takes ~15 minutes on
# 2 cores; later calls return at once when OUTDIR already holds the version.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
V=${2:-${METALLB_VERSION:-$(awk '$1 == "go.universe.tf/metallb" {print $2}' "$here/go.mod")}}
V=v${V#v}
CACHE=${BAREMETAL_CCM_CACHE:-$HOME/.cache/baremetal-ccm}
OUT=$(realpath -m "${1:-$CACHE/metallb/$V}")
if [ "$(cat "$OUT/.version" 2>/dev/null)" = "$V" ] && [ -x "$OUT/speaker" ]; then
  echo "$OUT"
  exit 0
fi
mkdir -p "$OUT"
echo "building MetalLB speaker $V into $OUT (first time ~15 min)" >&2
S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT
# `go install pkg@version` builds with MetalLB's own go.mod (it has no replace
# directives), exactly the dependency versions MetalLB released with.
GOBIN="$S" GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}github.com/metallb/frr-k8s" CGO_ENABLED=0 \
  go install -trimpath -ldflags "-s -w" "go.universe.tf/metallb/speaker@$V"
mv "$S/speaker" "$OUT/speaker"
echo "$V" > "$OUT/.version"
echo "$OUT"
