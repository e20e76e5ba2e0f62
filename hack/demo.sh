#!/usr/bin/env bash
# demo.sh: a local "datacenter" in a few seconds, then cleaned up.
#
# Starts a real etcd + kube-apiserver on 127.0.0.1 (hack/lab/control-plane.sh), runs
# bin/baremetal-cloud-controller-manager against it with an example inventory, plays
# the kubelet by registering Nodes with the uninitialized taint, and shows what the
# CCM does: Nodes initialized from the inventory, a Node with no inventory host kept
# tainted with an event, and a host removed from the inventory whose NotReady Node is
# deleted, and a host powered off through its (emulated) Redfish BMC getting the
# shutdown taint and BMC conditions.
#
# The network part: BIRD 2 runs as the top-of-rack router in a network namespace the
# demo creates (hack/lab/bird-router.sh, behind a veth pair; nothing leaves the
# machine), and the CCM's embedded BGP speaker peers with it from the root side.
# Nodes' pod-CIDR routes land in this host's kernel and in the router's table, and a
# LoadBalancer Service gets an IP from a pool whose /32 the router learns, and loses
# when the Service is deleted. The kernel routes go to table 4242, which no policy
# rule points at: they change nothing in this host's forwarding.
#
# Everything started is stopped at the end, by recorded PID; the namespace and veth
# are deleted by their recorded names.
#
# DEMO_KEEP=1 leaves the cluster running and prints how to use it.
set -euo pipefail
started=${DEMO_STARTED:-$(date +%s)} # make demo passes when it started (deps and build count)
root=$(cd "$(dirname "$0")/.." && pwd)
KUBE_BIN=${KUBE_BIN:-$(KUBE_BINS="kube-apiserver kubectl" "$root/hack/build-kube.sh")}
export KUBE_BIN
CCM=${CCM:-$root/bin/baremetal-cloud-controller-manager}
[ -x "$CCM" ] || { echo "demo: $CCM not built; run: make build" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "demo: run as root (it creates a network namespace and a veth pair for the BGP router)" >&2; exit 1; }
W=$(mktemp -d /tmp/baremetal-ccm-demo.XXXXXX)
ccm_pid=
sim_pid=
ROUTES_TABLE=4242

bold() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
cleanup() {
  set +e
  if [ "${DEMO_KEEP:-0}" = 1 ]; then
    echo; echo "Left running (DEMO_KEEP=1): export KUBECONFIG=$W/admin.kubeconfig; birdc -s $W/router/bird.ctl show route"
    echo "stop with: kill $ccm_pid $sim_pid; $root/hack/lab/bird-router.sh down $W/router; $root/hack/lab/control-plane.sh down $W"
    return
  fi
  bold "Cleaning up"
  [ -n "$ccm_pid" ] && kill "$ccm_pid" 2>/dev/null && wait "$ccm_pid" 2>/dev/null
  [ -n "$sim_pid" ] && kill "$sim_pid" 2>/dev/null && wait "$sim_pid" 2>/dev/null
  "$root/hack/lab/bird-router.sh" down "$W/router" >/dev/null 2>&1
  "$root/hack/lab/control-plane.sh" down "$W" >/dev/null 2>&1
  rm -rf "$W"
  echo "stopped the CCM, the BMC emulator, BIRD, kube-apiserver and etcd; deleted namespace ${NS:-(none)} and veth ${VETH:-(none)}"
  echo "(with the veth went the routes via it in table $ROUTES_TABLE); removed $W"
}
trap cleanup EXIT

k() { "$KUBE_BIN/kubectl" --kubeconfig "$W/admin.kubeconfig" "$@"; }
wait_until() { # wait_until SECONDS DESCRIPTION COMMAND...
  local t=$1 what=$2; shift 2
  for _ in $(seq $((t * 4))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  echo "demo: timed out waiting for $what; CCM log: $W/ccm.log" >&2; tail -20 "$W/ccm.log" >&2; exit 1
}

bold "Starting etcd and kube-apiserver $("$KUBE_BIN/kube-apiserver" --version | awk '{print $2}') on 127.0.0.1"
"$root/hack/lab/control-plane.sh" up "$W"

bold "Starting BIRD 2 as the top-of-rack router (hack/lab/bird-router.sh)"
"$root/hack/lab/bird-router.sh" up "$W/router"
# shellcheck disable=SC1091
. "$W/router/router.env"
birdc() { command birdc -s "$BIRD_CTL" "$@"; }
echo "  namespace $NS, BIRD pid $BIRD_PID, AS $ROUTER_ASN at $ROUTER_V4"
echo "  this host (cp-1) is $SPEAKER_V4 on veth $VETH, AS $SPEAKER_ASN; nodes sit on $NODE_PREFIX.0/24"

bold "Starting an emulated Redfish BMC for worker-1 (test/bmcsim; TLS from its own CA)"
mkdir -p "$W/bin" "$W/bmc"
(cd "$root" && go build -o "$W/bin/redfish-sim" ./test/bmcsim/cmd/redfish-sim && go build -o "$W/bin/baremetal-ccmctl" ./cmd/baremetal-ccmctl)
bmc_pass=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
"$W/bin/redfish-sim" -n 1 -user admin -pass "$bmc_pass" -ca-out "$W" >"$W/redfish-sim.log" 2>&1 &
sim_pid=$!
wait_until 20 "the BMC emulator" grep -q '^bmc-0 ' "$W/redfish-sim.log"
read -r _ bmc_url bmc_system < <(grep '^bmc-0 ' "$W/redfish-sim.log")
bmc_port=${bmc_url##*:}; bmc_port=${bmc_port%%/*}
printf 'username: admin\npassword: %s\n' "$bmc_pass" > "$W/bmc/worker-1"; chmod 600 "$W/bmc/worker-1"
echo "  $bmc_url$bmc_system (credentials in $W/bmc/worker-1, mode 0600)"

cat > "$W/inventory.yaml" <<INV
apiVersion: baremetal-ccm.io/v1alpha1
kind: Inventory
hosts:
- name: cp-1
  systemUUID: 4c4c4544-0042-3510-8052-b4c04f4e4d31
  addresses: [{type: InternalIP, address: $SPEAKER_V4}, {type: Hostname, address: cp-1}]
  instanceType: r650
  region: dc1
  zone: dc1-row1
  rack: r1
  labels: {role: control-plane}
- name: worker-1
  hostnames: [worker-1.dc1.example]
  addresses: [{type: InternalIP, address: $NODE_PREFIX.21}, {type: InternalIP, address: "fd00:10::21"}]
  instanceType: r750-gpu
  region: dc1
  zone: dc1-row1
  rack: r1
  labels: {gpu: a100}
  bmc: {protocol: redfish, address: "https://127.0.0.1", port: $bmc_port, credentialsFile: $W/bmc/worker-1, caFile: $W/ca.pem}
- name: worker-2
  addresses: [{type: InternalIP, address: $NODE_PREFIX.22}]
  instanceType: r750
  region: dc1
  zone: dc1-row2
  rack: r2
INV
cat > "$W/cloud-config.yaml" <<CFG
apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  file: {path: $W/inventory.yaml, pollInterval: 1s}
  credentialsDir: $W/bmc
  deletionGuard: {maxRemovedHosts: 1, maxRemovedPercent: 50, settleTime: 2s, acknowledgeFile: $W/inventory-ack}
bmc: {cacheTTL: 2s, notReadyInterval: 2s}
loadBalancer:
  pools:
  - name: public
    addresses: [203.0.113.0/28]
    avoidBuggyIPs: true
    communities: ["65000:100"]
bgp:
  localASN: $SPEAKER_ASN
  routerID: $SPEAKER_V4
  announcePodCIDRs: true
  peers:
  - {address: $ROUTER_V4, asn: $ROUTER_ASN, sourceAddress: $SPEAKER_V4, holdTime: 9s, keepaliveTime: 3s, connectRetry: 1s}
routes:
  table: $ROUTES_TABLE
  resyncInterval: 5s
CFG

bold "Inventory ($W/inventory.yaml): 3 hosts"
grep -E '^- name:|systemUUID|instanceType|zone' "$W/inventory.yaml" | sed 's/^/  /'
bold "CloudConfig ($W/cloud-config.yaml): pools, BGP and routes"
sed -n '/^loadBalancer:/,$p' "$W/cloud-config.yaml" | sed 's/^/  /'

bold "Installing the CCM's CRDs, namespace and RBAC, as an operator does: baremetal-ccmctl manifests crds (then rbac) | kubectl apply -f -"
"$W/bin/baremetal-ccmctl" manifests crds | k apply -f - | sed 's/^/  /'
"$W/bin/baremetal-ccmctl" manifests rbac | k apply -f - | sed 's/^/  /'
echo "  (the CCM keeps the deletion guard's state and the pools' use in namespace baremetal-ccm;"
echo "   without it the CCM is not ready and says so: baremetal-ccmctl explain ccm)"

bold "Starting baremetal-cloud-controller-manager ($("$CCM" --version))"
port=$(awk -v min=20000 -v max=40000 'BEGIN{srand(); print int(min+rand()*(max-min))}')
"$CCM" --cloud-config="$W/cloud-config.yaml" --kubeconfig="$W/admin.kubeconfig" \
  --authentication-kubeconfig="$W/admin.kubeconfig" --authorization-kubeconfig="$W/admin.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$port" --leader-elect=false --node-name=cp-1.k8s.local \
  --controllers=cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller,node-route-controller \
  --configure-cloud-routes=true --cluster-cidr=10.244.0.0/16 --route-reconciliation-period=2s --node-monitor-period=1s \
  >"$W/ccm.log" 2>&1 &
ccm_pid=$!
wait_until 30 "the CCM's /healthz" curl -skf "https://127.0.0.1:$port/healthz"
echo "  healthy on https://127.0.0.1:$port/healthz (log: $W/ccm.log)"
preflight_ok() { curl -sk "https://127.0.0.1:$port/readyz" | grep -qv 'namespace\|may not'; }
wait_until 30 "the CCM's preflight (its namespace and permissions; see curl -sk https://127.0.0.1:$port/readyz)" preflight_ok
established() { birdc show protocols ccm | grep -q Established; }
wait_until 30 "the BGP session with the router" established
echo "  its embedded BGP speaker peers with the router: \$ birdc show protocols ccm"
birdc show protocols ccm | grep -v '^BIRD ' | sed 's/^/    /'

bold "Registering 4 Nodes as kubelet --cloud-provider=external does (uninitialized taint)"
node() { # node NAME [POD-CIDR]
  cat <<N
apiVersion: v1
kind: Node
metadata: {name: $1}
spec:
  taints: [{key: node.cloudprovider.kubernetes.io/uninitialized, value: "true", effect: NoSchedule}]
N
  [ -z "${2:-}" ] || printf '  podCIDR: %s\n  podCIDRs: [%s]\n' "$2" "$2"
}
{ node cp-1.k8s.local 10.244.0.0/24; echo ---; node worker-1.dc1.example 10.244.1.0/24; echo ---
  node worker-2 10.244.2.0/24; echo ---; node stranger; } | k apply -f - >/dev/null
# kubelet reports the system UUID and its IP in the status.
k patch node cp-1.k8s.local --subresource=status --type=merge -p '{"status":{"nodeInfo":{"systemUUID":"4C4C4544-0042-3510-8052-B4C04F4E4D31"}}}' >/dev/null
k patch node worker-2 --subresource=status --type=merge -p "{\"status\":{\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"$NODE_PREFIX.22\"}]}}" >/dev/null
k patch node stranger --subresource=status --type=merge -p '{"status":{"addresses":[{"type":"InternalIP","address":"10.9.9.9"}]}}' >/dev/null
ready() { k patch node "$1" --subresource=status --type=merge -p "{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"$2\",\"reason\":\"Demo\",\"lastHeartbeatTime\":\"$(date -u +%FT%TZ)\",\"lastTransitionTime\":\"$(date -u +%FT%TZ)\"}]}}" >/dev/null; }
for n in cp-1.k8s.local worker-1.dc1.example worker-2 stranger; do ready "$n" True; done
echo "  cp-1.k8s.local       matched by systemUUID"
echo "  worker-1.dc1.example matched by a hostname alias"
echo "  worker-2             matched by name and InternalIP"
echo "  stranger             in no inventory"

initialized() { [ "$(k get node "$1" -o jsonpath='{.spec.providerID}')" != "" ]; }
for n in cp-1.k8s.local worker-1.dc1.example worker-2; do wait_until 30 "$n to be initialized" initialized "$n"; done

bold "Nodes after initialization"
k get nodes -o custom-columns='NAME:.metadata.name,PROVIDER-ID:.spec.providerID,TYPE:.metadata.labels.node\.kubernetes\.io/instance-type,REGION:.metadata.labels.topology\.kubernetes\.io/region,ZONE:.metadata.labels.topology\.kubernetes\.io/zone,RACK:.metadata.labels.baremetal-ccm\.io/rack,UNINITIALIZED-TAINT:.spec.taints[?(@.key=="node.cloudprovider.kubernetes.io/uninitialized")].effect'
echo
k get nodes -o custom-columns='NAME:.metadata.name,ADDRESSES:.status.addresses[*].address'
echo
k get node cp-1.k8s.local worker-1.dc1.example -L baremetal-ccm.io/role,baremetal-ccm.io/gpu | sed 's/^/  /'

bold "Why 'stranger' keeps its taint (kubectl get events)"
wait_until 20 "the HostNotFound event" bash -c "'$KUBE_BIN/kubectl' --kubeconfig '$W/admin.kubeconfig' get events --field-selector involvedObject.name=stranger,reason=HostNotFound -o name | grep -q ."
k get events --field-selector involvedObject.name=stranger,reason=HostNotFound --sort-by=.lastTimestamp -o custom-columns='REASON:.reason,MESSAGE:.message' | sed -n '1p;$p' | fold -w 160 -s

bold "Pod-CIDR routes (node-route-controller, --cluster-cidr=10.244.0.0/16)"
kroutes() { ip route show table "$ROUTES_TABLE" proto 196; }
has_kroutes() { [ "$(kroutes | grep -c '^10\.244\.')" = "$1" ]; }
bird_has() { birdc show route "$1" 2>/dev/null | grep -q "^$1"; }
bird_lacks() { ! bird_has "$1"; }
wait_until 60 "2 pod-CIDR routes in table $ROUTES_TABLE" has_kroutes 2
for c in 10.244.0.0/24 10.244.1.0/24 10.244.2.0/24; do wait_until 60 "$c in BIRD's table" bird_has "$c"; done
echo "this host's kernel: \$ ip route show table $ROUTES_TABLE proto 196"
kroutes | sed 's/^/  /'
echo "  (no route to cp-1's own pod CIDR: this host is cp-1. Table $ROUTES_TABLE is the demo's own:"
echo "   no ip rule points at it, so these routes change nothing in this host's forwarding;"
echo "   the default table is main, where they would carry pod traffic.)"
echo
echo "the router: \$ birdc show route   (each pod CIDR via its node, announced by cp-1's speaker)"
birdc show route | grep -v '^BIRD ' | sed 's/^/  /'
echo
k get nodes -o custom-columns='NAME:.metadata.name,POD-CIDR:.spec.podCIDR,NETWORK-UNAVAILABLE:.status.conditions[?(@.type=="NetworkUnavailable")].status'

bold "A LoadBalancer Service gets an IP from pool 'public' (203.0.113.0/28)"
svc() { # svc NAME [ANNOTATION]
  printf 'apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n' "$1"
  [ -z "${2:-}" ] || printf '  annotations: {%s}\n' "$2"
  printf 'spec:\n  type: LoadBalancer\n  selector: {app: %s}\n  ports: [{name: http, port: 80, protocol: TCP}]\n' "$1"
}
{ svc web; echo ---; svc dns 'baremetal-ccm.io/load-balancer-ips: "203.0.113.10"'; } | k apply -f - >/dev/null
echo "  web: any address; dns: asks for 203.0.113.10 (baremetal-ccm.io/load-balancer-ips)"
lbip() { k get svc "$1" -o jsonpath='{.status.loadBalancer.ingress[0].ip}'; }
has_lbip() { [ -n "$(lbip "$1")" ]; }
wait_until 60 "web's IP" has_lbip web
wait_until 60 "dns's IP" has_lbip dns
web_ip=$(lbip web); dns_ip=$(lbip dns)
wait_until 60 "$web_ip/32 in BIRD's table" bird_has "$web_ip/32"
wait_until 60 "$dns_ip/32 in BIRD's table" bird_has "$dns_ip/32"
echo "\$ kubectl get svc"
k get svc web dns | sed 's/^/  /'
echo
echo "the router: \$ birdc show route $web_ip/32 all   (next hop: cp-1, the pool's community)"
birdc show route "$web_ip/32" all | grep -vE '^BIRD |BGP\.(origin|local_pref)|Type:' | sed 's/^/  /'
echo
echo "the router's kernel: \$ ip -n $NS route show proto bird"
ip -n "$NS" route show proto bird | sed 's/^/  /'
echo
echo "the speaker's sessions, as every replica and agent publishes them: \$ kubectl get bgpsessionstates"
sessions_up() { k get bgpsessionstates -o jsonpath='{.items[*].status.bgpState}' 2>/dev/null | grep -q established; }
wait_until 30 "the replica's BGPSessionState" sessions_up
k get bgpsessionstates | sed 's/^/  /'

bold "Deleting Service web: its /32 is withdrawn"
k delete svc web >/dev/null
t0=$(date +%s%N)
wait_until 30 "$web_ip/32 to be withdrawn" bird_lacks "$web_ip/32"
echo "  $web_ip/32 gone from BIRD's table $(( ($(date +%s%N) - t0) / 1000000 )) ms after the delete returned"
echo "\$ birdc show route"
birdc show route | grep -v '^BIRD ' | sed 's/^/  /'

bold "worker-2 is retired: removed from the inventory, its Node goes NotReady"
sed -i '/^- name: worker-2/,$d' "$W/inventory.yaml"
ready worker-2 Unknown
gone() { ! k get node worker-2 >/dev/null 2>&1; }
wait_until 30 "worker-2 to be deleted" gone
k get events --field-selector involvedObject.name=worker-2 -o custom-columns='REASON:.reason,MESSAGE:.message' | grep -E 'REASON|HostGone|Deleting' | fold -w 160 -s
echo
k get nodes
wait_until 60 "worker-2's pod-CIDR route to go" has_kroutes 1
wait_until 60 "10.244.2.0/24 to be withdrawn" bird_lacks 10.244.2.0/24
echo
echo "worker-2's pod CIDR 10.244.2.0/24 is gone from this host's table $ROUTES_TABLE and from the router:"
kroutes | sed 's/^/  /'
birdc show route | grep -E '^[0-9]' | sed 's/^/  /'

bold "worker-1 loses power: its BMC is told to power off (a real Redfish Reset, TLS verified)"
curl -sf --cacert "$W/ca.pem" -u "admin:$bmc_pass" -H 'Content-Type: application/json' \
  -d '{"ResetType":"ForceOff"}' "$bmc_url$bmc_system/Actions/ComputerSystem.Reset" >/dev/null
ready worker-1.dc1.example Unknown
tainted() { k get node worker-1.dc1.example -o jsonpath='{.spec.taints[*].key}' | grep -q node.cloudprovider.kubernetes.io/shutdown; }
wait_until 60 "the shutdown taint on worker-1" tainted
k get node worker-1.dc1.example -o custom-columns='NAME:.metadata.name,TAINTS:.spec.taints[*].key,POWERED-OFF-SINCE:.metadata.annotations.baremetal-ccm\.io/powered-off-since'
echo
k get node worker-1.dc1.example -o jsonpath='{range .status.conditions[?(@.type!="Ready")]}{.type}={.status} ({.message}){"\n"}{end}' | sed 's/^/  /'
k get events --field-selector involvedObject.name=worker-1.dc1.example -o custom-columns='REASON:.reason,MESSAGE:.message' | grep -E 'REASON|Powered' | fold -w 160 -s
echo
echo "$ baremetal-ccmctl bmc check --inventory $W/inventory.yaml worker-1"
"$W/bin/baremetal-ccmctl" bmc check --inventory "$W/inventory.yaml" worker-1 | sed 's/^/  /' || true

bold "worker-1 powered on and Ready again: the taint goes"
curl -sf --cacert "$W/ca.pem" -u "admin:$bmc_pass" -H 'Content-Type: application/json' \
  -d '{"ResetType":"On"}' "$bmc_url$bmc_system/Actions/ComputerSystem.Reset" >/dev/null
ready worker-1.dc1.example True
untainted() { ! tainted; }
wait_until 60 "the shutdown taint to go" untainted
k get node worker-1.dc1.example -o custom-columns='NAME:.metadata.name,SHUTDOWN-TAINT:.spec.taints[?(@.key=="node.cloudprovider.kubernetes.io/shutdown")].effect,POWERED-OFF-SINCE:.metadata.annotations.baremetal-ccm\.io/powered-off-since'

bold "A broken inventory deletes nothing: the last good one keeps serving"
echo 'hosts: [this is not an inventory' > "$W/inventory.yaml"
wait_until 20 "the InventoryReloadFailed event" bash -c "'$KUBE_BIN/kubectl' --kubeconfig '$W/admin.kubeconfig' -n kube-system get events --field-selector reason=InventoryReloadFailed -o name | grep -q ."
k -n kube-system get events --field-selector involvedObject.kind=Inventory -o custom-columns='REASON:.reason,MESSAGE:.message' | fold -w 160 -s
echo
token=$(k config view --raw -o jsonpath='{.users[0].user.token}')
echo "/metrics of the CCM:"
curl -sk -H "Authorization: Bearer $token" "https://127.0.0.1:$port/metrics" | grep -E '^baremetal_ccm_(inventory_(last_reload_failed|hosts|deletion_guard_tripped)|bmc_requests_total|build_info)' | sed 's/^/  /'
k get nodes

elapsed=$(( $(date +%s) - started ))
bold "Demo passed in $((elapsed / 60)) min $((elapsed % 60)) s (make demo: dependencies, build and the demo)"
