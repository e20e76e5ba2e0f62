#!/usr/bin/env bash
# build-kube.sh [OUTDIR] [K8S_VERSION]
#
# Builds the Kubernetes binaries of the e2e harness and the demo from the Go module proxy
# into OUTDIR (default: $BAREMETAL_CCM_CACHE/kube/v<version>, where the cache defaults to
# ~/.cache/baremetal-ccm), and containerd into $BAREMETAL_CCM_CACHE/containerd/<version>:
#
#   kube-apiserver, kube-controller-manager, kubectl   the control plane (every e2e test)
#   kube-scheduler, kubelet                            the real-kubelet e2e tests
#   containerd, containerd-shim-runc-v2, ctr           CONTAINERD_VERSION (default v2.3.7),
#                                                      the kubelet's runtime (runc is Debian's)
#
# k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces the staging modules), so
# a scratch module requires it and replaces every staging module by the matching v0.x
# release. The list is read from k8s.io/kubernetes' own go.mod, so a staging module added
# by a release (1.37 added k8s.io/cri-streaming, which the kubelet imports) is never missed.
# containerd has no replace directives: `go install module@version` builds it as released.
#
# Only missing binaries are built: the first run takes ~15 min on 2 cores for the control
# plane, ~8 more for kube-scheduler and the kubelet, ~3 for containerd; later runs return at
# once. Prints OUTDIR on stdout (hack/lab/control-plane.sh reads it); progress goes to stderr.
set -euo pipefail
V=${2:-${KUBE_VERSION:-1.37.2}}
CACHE=${BAREMETAL_CCM_CACHE:-$HOME/.cache/baremetal-ccm}
OUT=$(realpath -m "${1:-$CACHE/kube/v$V}")
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.3.7}
CONTAINERD_OUT=$CACHE/containerd/$CONTAINERD_VERSION
v=0.${V#1.}
# KUBE_BINS="kube-apiserver kubectl" builds only those (the demo's); containerd is built
# only with the kubelet.
read -r -a bins <<<"${KUBE_BINS:-kube-apiserver kube-controller-manager kubectl kube-scheduler kubelet}"

# A directory is complete when .version names the version and every binary is there.
missing=()
if [ "$(cat "$OUT/.version" 2>/dev/null)" = "v$V" ]; then
  for b in "${bins[@]}"; do [ -x "$OUT/$b" ] || missing+=("$b"); done
else
  missing=("${bins[@]}")
fi

S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT

if [ ${#missing[@]} -gt 0 ]; then
  mkdir -p "$OUT"
  echo "building ${missing[*]} v$V into $OUT (first time ~15 min for the control plane, ~8 more for the kubelet)" >&2
  mkdir "$S/kube"
  cd "$S/kube"
  printf 'module kubebuild\n\ngo 1.26\n' >go.mod
  go mod edit -require="k8s.io/kubernetes@v$V"
  gomod=$(go mod download -json "k8s.io/kubernetes@v$V" | sed -n 's/.*"GoMod": "\(.*\)",*$/\1/p')
  [ -f "$gomod" ] || { echo "build-kube.sh: no go.mod for k8s.io/kubernetes@v$V" >&2; exit 1; }
  staging=$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$gomod")
  [ -n "$staging" ] || { echo "build-kube.sh: k8s.io/kubernetes@v$V replaces no staging module?" >&2; exit 1; }
  for m in $staging; do
    go mod edit -replace="$m=$m@v$v"
  done
  {
    printf '//go:build tools\npackage tools\nimport (\n'
    for b in "${missing[@]}"; do printf '_ "k8s.io/kubernetes/cmd/%s"\n' "$b"; done
    printf ')\n'
  } >tools.go
  go mod tidy >&2
  minor=${V#1.}; minor=${minor%%.*}
  ld="-s -w -X k8s.io/component-base/version.gitVersion=v$V -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  # Every binary is in Kubernetes' KUBE_STATIC_BINARIES list: CGO_ENABLED=0 is what the
  # official build does too.
  for b in "${missing[@]}"; do
    start=$SECONDS
    CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$OUT/$b.tmp" "k8s.io/kubernetes/cmd/$b"
    mv "$OUT/$b.tmp" "$OUT/$b"
    echo "built $b in $((SECONDS - start)) s" >&2
  done
  echo "v$V" >"$OUT/.version"
fi

if [[ " ${bins[*]} " == *" kubelet "* ]] && { [ "$(cat "$CONTAINERD_OUT/.version" 2>/dev/null)" != "$CONTAINERD_VERSION" ] || [ ! -x "$CONTAINERD_OUT/bin/containerd" ] ||
  [ ! -x "$CONTAINERD_OUT/bin/containerd-shim-runc-v2" ] || [ ! -x "$CONTAINERD_OUT/bin/ctr" ]; }; then
  echo "building containerd $CONTAINERD_VERSION into $CONTAINERD_OUT (first time ~3 min)" >&2
  start=$SECONDS
  mkdir -p "$S/containerd" "$CONTAINERD_OUT/bin"
  cd "$S"
  m=github.com/containerd/containerd/v2
  GOBIN="$S/containerd" CGO_ENABLED=0 go install -trimpath \
    -ldflags "-s -w -X $m/version.Version=$CONTAINERD_VERSION" \
    "$m/cmd/containerd@$CONTAINERD_VERSION" "$m/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" "$m/cmd/ctr@$CONTAINERD_VERSION"
  for b in containerd containerd-shim-runc-v2 ctr; do mv "$S/containerd/$b" "$CONTAINERD_OUT/bin/$b"; done
  echo "$CONTAINERD_VERSION" >"$CONTAINERD_OUT/.version"
  echo "built containerd in $((SECONDS - start)) s" >&2
fi
echo "$OUT"
