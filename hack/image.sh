#!/usr/bin/env bash
# image.sh [--rootfs DIR]: builds the CCM's container image without Docker or a registry
# (`make image`), reproducibly: the same commit and the same Debian packages give the same
# bytes, so the same digest.
#
#   1. make build: the static binary, version stamped.
#   2. The Debian packages packaging/image/image.yaml lists (ipmitool and its libraries,
#      CA certificates, base-files), at the versions Debian's mirror serves now:
#      `apt-get download`, kept in $BAREMETAL_CCM_CACHE/image/debs (default
#      ~/.cache/baremetal-ccm) by file name (which holds the version) and checked
#      against the SHA256 of apt's signed index. IMAGE_DEBS_DIR=DIR uses the .deb
#      files in DIR instead (a pinned set: no apt at all).
#   3. hack/mkimage writes the layers (reproducible tars, gzip) and, with
#      go-containerregistry, the image's config and manifest and an OCI image layout,
#      archived as one tar with docker's manifest.json, which
#      `ctr -n k8s.io images import`, `podman load` and `docker load` accept; with
#      --rootfs DIR it writes the same files into DIR instead (packaging/Dockerfile).
#
# Environment (the Makefile passes the first four):
#   IMAGE            reference (default localhost/baremetal-ccm/baremetal-cloud-controller-manager:$VERSION)
#   IMAGE_OUT        the archive (default dist/baremetal-cloud-controller-manager-image.tar)
#   VERSION, COMMIT  as for make build (default: from git, like the Makefile)
#   IMAGE_BUILD_DIR  where the binary is built (its bin/; default: the checkout)
#   SOURCE_DATE_EPOCH  time of every file and of the image (default: the last commit's)
# Needs: Go, dpkg-deb and apt-get (Debian or Ubuntu); apt-get update runs as root when
# apt's package lists are missing. Prints the image's summary (digest, size, packages).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rootfs=""
case "${1:-}" in
--rootfs) rootfs=$(realpath -m "${2:?--rootfs needs a directory}") ;;
"") ;;
*) echo "usage: $0 [--rootfs DIR]" >&2; exit 2 ;;
esac
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
VERSION=${VERSION:-$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || echo "v0.0.0-dev-$COMMIT")}
IMAGE=${IMAGE:-localhost/baremetal-ccm/baremetal-cloud-controller-manager:$VERSION}
IMAGE_OUT=$(realpath -m "${IMAGE_OUT:-dist/baremetal-cloud-controller-manager-image.tar}")
IMAGE_BUILD_DIR=$(realpath -m "${IMAGE_BUILD_DIR:-$root}")
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
export SOURCE_DATE_EPOCH
CACHE=${BAREMETAL_CCM_CACHE:-$HOME/.cache/baremetal-ccm}
spec=packaging/image/image.yaml

T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
CGO_ENABLED=0 go build -trimpath -o "$T/mkimage" ./hack/mkimage

echo "image.sh: make build (version $VERSION, commit $COMMIT)" >&2
make --no-print-directory build BIN="$IMAGE_BUILD_DIR/bin" VERSION="$VERSION" COMMIT="$COMMIT" >&2

debs=()
if [ -n "${IMAGE_DEBS_DIR:-}" ]; then
  for f in "$IMAGE_DEBS_DIR"/*.deb; do debs+=(--deb "$f"); done
else
  mapfile -t pkgs < <("$T/mkimage" --spec "$spec" --list-packages)
  if ! uris=$(apt-get download --print-uris "${pkgs[@]}" 2>"$T/apt.err"); then
    if [ "$(id -u)" -ne 0 ]; then
      echo "image.sh: apt-get cannot locate the image's packages ($(head -1 "$T/apt.err")); run as root: apt-get update" >&2
      exit 1
    fi
    echo "image.sh: apt-get update (apt's package lists are missing or stale)" >&2
    apt-get update -qq >&2
    uris=$(apt-get download --print-uris "${pkgs[@]}")
  fi
  D=$CACHE/image/debs
  mkdir -p "$D"
  # as root, apt would drop to its _apt user, which cannot write to our directories
  sandbox=()
  [ "$(id -u)" -ne 0 ] || sandbox=(-o APT::Sandbox::User=root)
  # each line: 'URI' FILE SIZE SHA256:HEX
  fetch=()
  declare -A want
  while read -r _ file _ hash; do
    want[$file]=${hash#SHA256:}
    [ "${want[$file]}" != "$hash" ] || { echo "image.sh: apt gave no SHA256 for $file" >&2; exit 1; }
    if [ "$(sha256sum "$D/$file" 2>/dev/null | cut -d' ' -f1)" != "${want[$file]}" ]; then
      ver=${file#*_}; ver=${ver%_*}
      fetch+=("${file%%_*}=${ver//%3a/:}")
    fi
    debs+=(--deb "$D/$file")
  done <<<"$uris"
  if [ ${#fetch[@]} -gt 0 ]; then
    echo "image.sh: downloading ${fetch[*]}" >&2
    mkdir -p "$T/dl"
    (cd "$T/dl" && apt-get download -qq "${sandbox[@]}" "${fetch[@]}" >&2)
    for f in "$T"/dl/*.deb; do
      file=$(basename "$f")
      got=$(sha256sum "$f" | cut -d' ' -f1)
      [ "$got" = "${want[$file]:-}" ] || { echo "image.sh: $file: SHA256 $got, apt's index says ${want[$file]:-nothing}" >&2; exit 1; }
      mv "$f" "$D/$file"
    done
  fi
fi

labels=(--label "org.opencontainers.image.version=$VERSION" --label "org.opencontainers.image.revision=$COMMIT")
# the host's architecture: make build's and apt's
debs+=(--arch "$(dpkg --print-architecture)")
if [ -n "$rootfs" ]; then
  "$T/mkimage" --spec "$spec" --src-dir "$IMAGE_BUILD_DIR" "${debs[@]}" --rootfs "$rootfs"
else
  mkdir -p "$(dirname "$IMAGE_OUT")"
  "$T/mkimage" --spec "$spec" --src-dir "$IMAGE_BUILD_DIR" "${debs[@]}" "${labels[@]}" --ref "$IMAGE" --out "$IMAGE_OUT"
  echo "load it with: ctr -n k8s.io images import $IMAGE_OUT | podman load -i $IMAGE_OUT | docker load -i $IMAGE_OUT"
fi
