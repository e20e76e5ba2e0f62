#!/usr/bin/env bash
# deps.sh [--packages-only | --demo]: installs what the tests and the demo need on a fresh
# Debian machine (--demo: only what `make demo` needs: etcd, curl, openssl, iproute2 and
# bird2 from Debian, kube-apiserver and kubectl built; a first run takes minutes, not the
# half hour of everything).
#   - Debian packages: etcd-server and etcd-client (for the real kube-apiserver), curl,
#     openssl, iproute2, systemd (systemd-analyze checks the unit), openipmi (ipmi_sim)
#     and ipmitool (IPMI BMCs for the BMC tests; ipmitool is also a runtime dependency),
#     bird2 (BIRD 2, the top-of-rack BGP router of the BGP, load-balancer and route tests),
#     runc and containernetworking-plugins (the real kubelets' containerd runs them),
#     frr (FRR 8.4: zebra, bgpd and bfdd, the top-of-rack router of test/frr and the BFD
#     interop tests; the tests start their own daemons, the package's service is kept
#     from starting and disabled), prometheus (only for promtool, which checks and
#     unit-tests packaging/monitoring's alerting rules; its service is kept from
#     starting and disabled)
#   - kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, the kubelet and
#     containerd, built from the Go module proxy into $BAREMETAL_CCM_CACHE (default
#     ~/.cache/baremetal-ccm) by hack/build-kube.sh
#   - MetalLB's speaker, built from the Go module proxy into the same cache by
#     hack/build-metallb-speaker.sh (the e2e test of the MetalLB announcer runs it)
#   - Helm 4 and Helm 3, built from the Go module proxy into the same cache by
#     hack/build-helm.sh (the chart's tests: make lint, and the e2e install)
# Installing packages needs root; as another user it says what to install and fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
demo=false
[ "${1:-}" = --demo ] && demo=true
need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v bird >/dev/null 2>&1 || need+=(bird2)
if ! $demo; then
  command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
  command -v ipmi_sim >/dev/null 2>&1 || need+=(openipmi)
  command -v ipmitool >/dev/null 2>&1 || need+=(ipmitool)
  [ -x /usr/sbin/runc ] || need+=(runc)
  [ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
  { [ -x /usr/lib/frr/bgpd ] && [ -x /usr/lib/frr/bfdd ] && command -v vtysh >/dev/null 2>&1; } || need+=(frr)
  command -v promtool >/dev/null 2>&1 || need+=(prometheus)
  command -v podman >/dev/null 2>&1 || need+=(podman)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages: ${need[*]}; run as root: apt-get update && apt-get install -y --no-install-recommends ${need[*]}" >&2
    exit 1
  fi
  echo "installing Debian packages: ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  services=()
  [[ " ${need[*]} " == *" frr "* ]] && services+=(frr)
  [[ " ${need[*]} " == *" prometheus "* ]] && services+=(prometheus)
  if [ ${#services[@]} -gt 0 ]; then
    # The frr and prometheus packages enable their services and start them from their
    # postinst; the tests need only the programs. Deny that with a policy-rc.d for the
    # install unless one exists.
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\n# hack/deps.sh (baremetal-ccm): keep frr and prometheus from starting\ncase "$1" in frr|frr.service|prometheus|prometheus.service) exit 101;; esac\nexit 0\n' >/usr/sbin/policy-rc.d
      chmod 755 /usr/sbin/policy-rc.d
      trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
  fi
  apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
  for svc in "${services[@]}"; do
    # Installed for the tests only: not started at boot, and not running now (an
    # existing policy-rc.d may have let it start).
    if [ -d /run/systemd/system ]; then
      systemctl disable --now "$svc.service" >&2 || true
    else
      deb-systemd-helper disable "$svc.service" >/dev/null 2>&1 || true
      update-rc.d "$svc" disable >/dev/null 2>&1 || true
      if [ "$svc" = frr ] && ls /run/frr/*.pid >/dev/null 2>&1; then /usr/lib/frr/frrinit.sh stop >&2 || true; fi
      if [ "$svc" = prometheus ] && [ -x /etc/init.d/prometheus ]; then /etc/init.d/prometheus stop >&2 || true; fi
    fi
  done
fi
[ "${1:-}" = --packages-only ] && exit 0
if $demo; then
  KUBE_BINS="kube-apiserver kubectl" "$here/build-kube.sh" >/dev/null
  exit 0
fi
"$here/build-kube.sh" >/dev/null
"$here/build-metallb-speaker.sh" >/dev/null
"$here/build-helm.sh" >/dev/null
