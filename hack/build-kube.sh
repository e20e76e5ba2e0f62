#!/usr/bin/env bash
# build-kube.sh [OUTDIR] [K8S_VERSION]
#
# Builds kube-apiserver, kube-controller-manager and kubectl for the e2e harness and demo from the Go
# module proxy into OUTDIR (default: $BAREMETAL_CCM_CACHE/kube/v<version>, where the
# cache defaults to ~/.cache/baremetal-ccm). k8s.io/kubernetes cannot be `go install`ed
# (its go.mod replaces the staging modules), so a scratch module requires it and replaces
# every k8s.io/<staging> module by the matching v0.x release. The first build takes ~15
# minutes on 2 cores; later calls return at once when OUTDIR already holds the version.
set -euo pipefail
V=${2:-${KUBE_VERSION:-1.37.2}}
CACHE=${BAREMETAL_CCM_CACHE:-$HOME/.cache/baremetal-ccm}
OUT=$(realpath -m "${1:-$CACHE/kube/v$V}")
v=0.${V#1.}
if [ "$(cat "$OUT/.version" 2>/dev/null)" = "v$V" ] && [ -x "$OUT/kube-apiserver" ] && [ -x "$OUT/kube-controller-manager" ] && [ -x "$OUT/kubectl" ]; then
  echo "$OUT"
  exit 0
fi
mkdir -p "$OUT"
S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT
cd "$S"
printf 'module kubebuild\n\ngo 1.26\n' > go.mod
go mod edit -require="k8s.io/kubernetes@v$V"
for m in api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider \
  cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api \
  cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms \
  kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics \
  mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller streaming; do
  go mod edit -replace="k8s.io/$m=k8s.io/$m@v$v"
done
printf '//go:build tools\npackage tools\nimport (\n_ "k8s.io/kubernetes/cmd/kube-apiserver"\n_ "k8s.io/kubernetes/cmd/kube-controller-manager"\n_ "k8s.io/kubernetes/cmd/kubectl"\n)\n' > tools.go
echo "building kube-apiserver, kube-controller-manager and kubectl v$V into $OUT (first time ~15 min)" >&2
go mod tidy >&2
minor=${V#1.}; minor=${minor%%.*}
ld="-s -w -X k8s.io/component-base/version.gitVersion=v$V -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$OUT/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$OUT/kube-controller-manager.tmp" k8s.io/kubernetes/cmd/kube-controller-manager
CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$OUT/kubectl.tmp" k8s.io/kubernetes/cmd/kubectl
mv "$OUT/kube-apiserver.tmp" "$OUT/kube-apiserver"
mv "$OUT/kubectl.tmp" "$OUT/kubectl"
mv "$OUT/kube-controller-manager.tmp" "$OUT/kube-controller-manager"
echo "v$V" > "$OUT/.version"
echo "$OUT"
