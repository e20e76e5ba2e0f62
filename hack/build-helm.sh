#!/usr/bin/env bash
# build-helm.sh [VERSION...]
#
# Builds Helm from the Go module proxy into $BAREMETAL_CCM_CACHE/helm/<version>/helm (the
# cache defaults to ~/.cache/baremetal-ccm), for the chart's tests: `helm lint` and
# `helm template` against `baremetal-ccmctl manifests` (test/helm, run by make lint) and
# `helm install` under real kubelets (test/e2e). The versions default to $HELM_VERSIONS,
# else the newest Helm 4 and Helm 3 releases checked for advisories (docs/dev/helm.md):
# the chart must work with both. A version already in the cache is reused.
#
# Prints one line per version, "<version> <path of helm>". With HELM_NO_BUILD=1 a
# missing version is an error saying what to run, instead of a build (the tests use it).
# A cold build took 1 min 57 s for both on 2 cores (Helm 4 ~75 s, then Helm 3 41 s).
set -euo pipefail
CACHE=${BAREMETAL_CCM_CACHE:-$HOME/.cache/baremetal-ccm}
if [ $# -gt 0 ]; then versions=("$@"); else read -r -a versions <<<"${HELM_VERSIONS:-v4.3.1 v3.22.0}"; fi
for V in "${versions[@]}"; do
  V=v${V#v}
  OUT=$CACHE/helm/$V
  if [ "$(cat "$OUT/.version" 2>/dev/null)" = "$V" ] && [ -x "$OUT/helm" ]; then
    echo "$V $OUT/helm"
    continue
  fi
  if [ -n "${HELM_NO_BUILD:-}" ]; then
    echo "build-helm.sh: Helm $V is not in $OUT; run hack/build-helm.sh (or make deps)" >&2
    exit 1
  fi
  major=${V%%.*}
  m=helm.sh/helm/$major
  echo "building Helm $V into $OUT (first time ~1 min)" >&2
  start=$SECONDS
  S=$(mktemp -d)
  # Helm's go.mod has no replace directives: `go install module@version` builds it with
  # exactly the dependencies it was released with. The ldflags are those of Helm's own
  # Makefile for a release; Helm 3 also stamps the Kubernetes version its client-go has
  # (the default .Capabilities.KubeVersion of helm template and lint).
  ld="-s -w -X $m/internal/version.version=$V -X $m/internal/version.gitTreeState=clean"
  if [ "$major" = v3 ]; then
    gomod=$(go mod download -json "$m@$V" | sed -n 's/.*"GoMod": "\(.*\)",*$/\1/p')
    minor=$(awk '$1 == "k8s.io/client-go" {print $2}' "$gomod" | cut -d. -f2)
    [ -n "$minor" ] || { echo "build-helm.sh: no k8s.io/client-go in $m@$V's go.mod" >&2; rm -rf "$S"; exit 1; }
    for p in pkg/lint/rules pkg/chartutil; do ld+=" -X $m/$p.k8sVersionMajor=1 -X $m/$p.k8sVersionMinor=$minor"; done
  fi
  if ! GOBIN="$S" CGO_ENABLED=0 go install -trimpath -ldflags "$ld" "$m/cmd/helm@$V" >&2; then
    rm -rf "$S"
    exit 1
  fi
  mkdir -p "$OUT"
  mv "$S/helm" "$OUT/helm"
  rm -rf "$S"
  echo "$V" >"$OUT/.version"
  echo "built Helm $V in $((SECONDS - start)) s" >&2
  echo "$V $OUT/helm"
done
