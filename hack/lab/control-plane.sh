#!/usr/bin/env bash
# control-plane.sh up|down WORKDIR
#
# A throwaway Kubernetes control plane on 127.0.0.1 for e2e tests and demos: etcd
# (Debian etcd-server) and kube-apiserver on free random ports, nothing else (no
# kubelet, no kube-controller-manager, no pod CIDRs).
#
#   up    starts both, writes WORKDIR/admin.kubeconfig (bearer token in group
#         system:masters) and waits until /readyz is OK (LAB_READY_TIMEOUT, default 60 s).
#         On failure it prints the log tail and stops what it started.
#   down  stops only the PIDs that up recorded in WORKDIR (TERM, then KILL after 10 s),
#         waits for them to exit and removes the data; logs (*.log) stay. Idempotent.
#
# Environment:
#   KUBE_BIN       directory holding kube-apiserver (default: hack/build-kube.sh's output)
#   LAB_NO_BUILD   1: fail instead of running hack/build-kube.sh (a first build takes ~15 min)
#   LAB_OWNER_PID  a watcher runs `down` once this process is gone, so a killed test run
#                  leaves nothing behind
# Needs: etcd (Debian etcd-server), curl, openssl, coreutils; `make deps` installs them.
set -euo pipefail

die() { echo "control-plane: $*" >&2; exit 1; }

[ $# -ge 2 ] || die "usage: $0 up|down WORKDIR"
cmd=$1
W=$(realpath -m "$2")
self=$(realpath "$0")
root=$(cd "$(dirname "$self")/../.." && pwd)

# shellcheck source=pid.sh
. "$(dirname "$self")/pid.sh"

# alive PIDFILE: prints the recorded PID if that process still runs with WORKDIR in its
# command line (recorded_pid).
alive() { recorded_pid "$1" "$W"; }

# stop NAME: TERM the recorded process, KILL it after 10 s, wait until it is gone.
stop() {
  local p i
  if p=$(alive "$W/$1.pid"); then
    kill "$p" 2>/dev/null || true
    for i in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$p" 2>/dev/null; then
      kill -KILL "$p" 2>/dev/null || true
      for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    fi
  fi
  rm -f "$W/$1.pid"
}

down() {
  [ -n "${LAB_IN_WATCHER:-}" ] || stop watcher
  stop apiserver
  stop etcd
  rm -rf "$W/etcd" "$W/certs" "$W/sa.key" "$W/tokens.csv" "$W/admin.kubeconfig"
}

# freeport: sets PORT to a port in 20000-31999 (below Linux's ephemeral range, so it
# does not collide with kernel-chosen ports) with no listener on 127.0.0.1 and not
# handed out before by this script run.
taken=" "
freeport() {
  local i
  for i in $(seq 100); do
    PORT=$((20000 + RANDOM % 12000))
    case "$taken" in *" $PORT "*) continue ;; esac
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
      taken="$taken$PORT "
      return 0
    fi
  done
  die "no free port found on 127.0.0.1"
}

# fail MSG LOG: print MSG and LOG's tail, stop what was started, exit 1.
fail() {
  echo "control-plane: $1" >&2
  [ -f "$2" ] && { echo "--- last lines of $2:" >&2; tail -n 25 "$2" >&2; }
  down
  exit 1
}

up() {
  local start=$SECONDS bin
  command -v etcd >/dev/null || die "etcd not found: run make deps (or apt-get install etcd-server etcd-client)"
  command -v curl >/dev/null || die "curl not found: run make deps (or apt-get install curl)"
  command -v openssl >/dev/null || die "openssl not found: run make deps (or apt-get install openssl)"
  if [ -n "${KUBE_BIN:-}" ]; then
    bin=$KUBE_BIN
  elif [ "${LAB_NO_BUILD:-}" = 1 ]; then
    # Same default as hack/build-kube.sh.
    bin=${BAREMETAL_CCM_CACHE:-$HOME/.cache/baremetal-ccm}/kube/v${KUBE_VERSION:-1.37.2}
  else
    bin=$("$root/hack/build-kube.sh")
  fi
  [ -x "$bin/kube-apiserver" ] || die "no kube-apiserver in $bin: run make deps (or hack/build-kube.sh; first build ~15 min) or set KUBE_BIN"
  if alive "$W/apiserver.pid" >/dev/null || alive "$W/etcd.pid" >/dev/null; then
    die "a control plane already runs in $W; run: $0 down $W"
  fi
  mkdir -p "$W/certs"
  trap 'fail "interrupted" /dev/null' INT TERM

  freeport; local cport=$PORT
  freeport; local pport=$PORT
  freeport; local aport=$PORT
  setsid etcd --name lab --data-dir "$W/etcd" \
    --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
    --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "lab=http://127.0.0.1:$pport" --initial-cluster-state new \
    --initial-cluster-token "lab-$$" --snapshot-count 10000 --quota-backend-bytes 268435456 \
    --logger zap --log-level warn </dev/null >"$W/etcd.log" 2>&1 &
  echo $! >"$W/etcd.pid"

  local token ca
  token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  (umask 077; echo "$token,admin,admin,system:masters" >"$W/tokens.csv")
  openssl genrsa -out "$W/sa.key" 2048 2>/dev/null || fail "openssl genrsa failed" /dev/null
  # Client and front-proxy CAs (nothing uses them yet): with them the apiserver publishes
  # the kube-system/extension-apiserver-authentication ConfigMap that delegating
  # components (the CCM's --authentication-kubeconfig) read, as in a real cluster.
  for ca in client-ca front-proxy-ca; do
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "/CN=lab-$ca" \
      -keyout "$W/certs/$ca.key" -out "$W/certs/$ca.crt" 2>/dev/null || fail "openssl req failed" /dev/null
  done

  local i
  for i in $(seq 200); do
    curl -sf --max-time 1 "http://127.0.0.1:$cport/health" >/dev/null 2>&1 && break
    alive "$W/etcd.pid" >/dev/null || fail "etcd exited" "$W/etcd.log"
    [ "$i" = 200 ] && fail "etcd not healthy after 20 s" "$W/etcd.log"
    sleep 0.1
  done

  setsid "$bin/kube-apiserver" --etcd-servers="http://127.0.0.1:$cport" \
    --bind-address=127.0.0.1 --secure-port="$aport" --cert-dir="$W/certs" \
    --token-auth-file="$W/tokens.csv" --client-ca-file="$W/certs/client-ca.crt" \
    --requestheader-client-ca-file="$W/certs/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- --authorization-mode=Node,RBAC \
    --service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/112 \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$W/sa.key" --service-account-signing-key-file="$W/sa.key" \
    </dev/null >"$W/apiserver.log" 2>&1 &
  echo $! >"$W/apiserver.pid"

  (umask 077; cat >"$W/admin.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: lab, cluster: {server: "https://127.0.0.1:$aport", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: "$token"}}]
contexts: [{name: lab, context: {cluster: lab, user: admin}}]
current-context: lab
KC
  )

  if [ -n "${LAB_OWNER_PID:-}" ]; then
    setsid "$self" _watch "$W" "$LAB_OWNER_PID" </dev/null >>"$W/watcher.log" 2>&1 &
    echo $! >"$W/watcher.pid"
  fi

  local timeout=${LAB_READY_TIMEOUT:-60}
  until curl -skf --max-time 2 -H "Authorization: Bearer $token" "https://127.0.0.1:$aport/readyz" >/dev/null 2>&1; do
    alive "$W/apiserver.pid" >/dev/null || fail "kube-apiserver exited" "$W/apiserver.log"
    [ $((SECONDS - start)) -lt "$timeout" ] || fail "kube-apiserver not ready after ${timeout} s" "$W/apiserver.log"
    sleep 0.5
  done
  trap - INT TERM
  echo "control plane up in $((SECONDS - start)) s: https://127.0.0.1:$aport (etcd :$cport)"
  echo "export KUBECONFIG=$W/admin.kubeconfig"
}

case "$cmd" in
up) up ;;
down) down ;;
_watch) # _watch WORKDIR OWNER_PID: internal, started by up
  while kill -0 "$3" 2>/dev/null && [ -f "$W/apiserver.pid" ]; do sleep 1; done
  [ -f "$W/apiserver.pid" ] && { echo "owner $3 gone; stopping the control plane"; LAB_IN_WATCHER=1 down; }
  rm -f "$W/watcher.pid"
  ;;
*) die "usage: $0 up|down WORKDIR" ;;
esac
