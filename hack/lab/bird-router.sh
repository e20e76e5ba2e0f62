#!/usr/bin/env bash
# bird-router.sh up|down|env WORKDIR
#
# A BIRD 2 "top-of-rack router" for demos: a network namespace of its own, a veth
# pair to the root namespace, and BIRD inside the namespace accepting eBGP from the
# root side (passive: the speaker under test connects). Nothing leaves the machine:
# the addresses exist only on this veth pair.
#
#   root namespace                      namespace bmccm-demo-<random>
#   veth bmdemo<idx>h  10.255.<idx>.1/24  <->  eth0  10.255.<idx>.254/24 (BIRD, AS 65001)
#
# idx is the first of 250..254 whose subnet no interface uses (test/bird takes 100..249);
# creating the veth is the atomic claim. Further addresses of the /24 (e.g. .21) are
# free for "nodes": BIRD accepts them as BGP next hops (on-link, next hop keep) and
# the root namespace reaches them on-link through the veth.
#
#   up    creates all of it, starts BIRD, waits for its control socket, and writes
#         WORKDIR/router.env (shell variables: NS VETH IDX ROUTER_V4 SPEAKER_V4
#         NODE_PREFIX ROUTER_ASN SPEAKER_ASN BIRD_CTL BIRD_PID).
#   down  kills only the recorded BIRD PID (checked against its command line), deletes
#         only the recorded veth and namespace, removes router.env. Idempotent.
#   env   prints router.env.
#
# Needs root, bird2 and iproute2 (hack/deps.sh installs them).
set -euo pipefail

die() { echo "bird-router: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: $0 up|down|env WORKDIR"
op=$1
W=$(realpath -m "$2")
ROUTER_ASN=65001
SPEAKER_ASN=65000

# shellcheck source=pid.sh
. "$(dirname "$(realpath "$0")")/pid.sh"

# birdpid: the recorded BIRD PID if that process still runs with our config.
birdpid() { recorded_pid "$W/bird.pid" "$W/bird.conf"; }

down() {
  local p
  if p=$(birdpid); then
    kill "$p" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
  fi
  rm -f "$W/bird.pid"
  if [ -f "$W/router.env" ]; then
    # shellcheck disable=SC1091
    . "$W/router.env"
    ip link del "$VETH" 2>/dev/null || true   # its routes (ours in any table) go with it
    ip netns del "$NS" 2>/dev/null || true
    rm -f "$W/router.env"
  fi
}

up() {
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces, veth pairs)"
  local b
  for b in bird birdc ip; do command -v "$b" >/dev/null || die "$b not found: run hack/deps.sh (apt-get install bird2 iproute2)"; done
  [ ! -f "$W/router.env" ] || die "a router already runs for $W; run: $0 down $W"
  mkdir -p "$W"
  NS=bmccm-demo-$(head -c 3 /dev/urandom | od -An -tx1 | tr -d ' \n')
  ip netns add "$NS"
  local idx
  IDX=
  for idx in 250 251 252 253 254; do
    ip -o -4 addr show | grep -qF " 10.255.$idx." && continue
    if ip link add "bmdemo${idx}h" type veth peer name eth0 netns "$NS" 2>/dev/null; then
      IDX=$idx
      break
    fi
  done
  VETH=bmdemo${IDX}h
  ROUTER_V4=10.255.$IDX.254
  SPEAKER_V4=10.255.$IDX.1
  NODE_PREFIX=10.255.$IDX
  BIRD_CTL=$W/bird.ctl
  BIRD_PID=
  # Record at once, so down cleans up whatever up got to.
  declare -p NS VETH IDX ROUTER_V4 SPEAKER_V4 NODE_PREFIX ROUTER_ASN SPEAKER_ASN BIRD_CTL BIRD_PID | sed 's/^declare -- //' >"$W/router.env"
  if [ -z "$IDX" ]; then
    ip netns del "$NS"; rm -f "$W/router.env"
    die "no free subnet among 10.255.250-254.0/24"
  fi
  trap 'down; exit 1' ERR INT TERM
  ip -n "$NS" link set lo up
  ip -n "$NS" addr add "$ROUTER_V4/24" dev eth0
  ip -n "$NS" link set eth0 up
  ip addr add "$SPEAKER_V4/24" dev "$VETH"
  ip link set "$VETH" up

  cat >"$W/bird.conf" <<CONF
router id $ROUTER_V4;
log "$W/bird.log" all;
protocol device { scan time 1; }
# What BGP taught the router goes into the namespace's kernel (ECMP if several paths).
protocol kernel { ipv4 { import none; export filter { if source = RTS_BGP then accept; reject; }; }; merge paths on; }
protocol bgp ccm {
  local $ROUTER_V4 as $ROUTER_ASN;
  neighbor $SPEAKER_V4 as $SPEAKER_ASN;
  passive on;
  hold time 9; keepalive time 3;
  connect delay time 1; connect retry time 1; error wait time 1, 5;
  ipv4 { import all; export none; add paths rx; next hop keep; };
}
CONF
  ip netns exec "$NS" bird -f -c "$W/bird.conf" -s "$BIRD_CTL" </dev/null >"$W/bird.out" 2>&1 &
  BIRD_PID=$!   # ip netns exec execs bird: this is BIRD's PID
  echo "$BIRD_PID" >"$W/bird.pid"
  sed -i "s/^BIRD_PID=.*/BIRD_PID=$BIRD_PID/" "$W/router.env"
  for _ in $(seq 100); do
    birdc -s "$BIRD_CTL" show status >/dev/null 2>&1 && { trap - ERR INT TERM; return 0; }
    kill -0 "$BIRD_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "bird-router: BIRD did not start; $W/bird.out:" >&2
  cat "$W/bird.out" >&2
  down
  exit 1
}

case $op in
up) up ;;
down) down ;;
env) cat "$W/router.env" ;;
*) die "usage: $0 up|down|env WORKDIR" ;;
esac
