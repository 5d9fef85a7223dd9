#!/usr/bin/env bash
# A real single-node Kubernetes on this machine whose pods run: the control plane of
# scripts/kube-apiserver.sh plus a kubelet, kube-scheduler, kube-proxy, CoreDNS, containerd with
# runc, a bridge pod network (Debian's CNI plugins) and kube-router's NetworkPolicy controller.
# docs/kubernetes.md#a-cluster-on-one-machine.
#
#   scripts/cluster.sh tools           build or install what the node needs (cached, keyed by version)
#   scripts/cluster.sh up              bring the node up (idempotent: a running cluster is left as it is);
#                                      ends with the node Ready, prints each step's time and
#                                      READY kubeconfig=DIR/kubeconfig
#   scripts/cluster.sh load-image TAG  copy an image of the project's Docker engine into the node's runtime
#   scripts/cluster.sh recycle-volumes  wipe the local volumes whose claims were deleted and offer them again
#   scripts/cluster.sh env             print `export KUBECONFIG=... PATH=...` for kubectl and helm
#   scripts/cluster.sh status          exit 0 while the node is Ready
#   scripts/cluster.sh down            stop everything and leave nothing behind (processes, mounts,
#                                      network namespaces, links, rules, sysctls)
#
# DIR is ${GRIDSTAT_CLUSTER_DIR:-/tmp/gridstat-cluster}. GRIDSTAT_KUBE_PARENT_PID=PID ... up also
# runs `down` once process PID is gone (a killed test session leaves no cluster behind).
#
# Where things listen: the API server, etcd, the kubelet, kube-proxy's health and metrics on
# 127.0.0.1; CoreDNS and a TCP forwarder to the API server on the bridge's own address 10.244.0.1
# (pods reach the API server as https://kubernetes.default through it); pods on 10.244.0.0/24 inside
# network namespaces the runtime creates. A FORWARD rule drops anything from the pod bridge that is
# not for the pod bridge, so no pod traffic can leave the machine; there is no masquerade, and CoreDNS
# answers only cluster.local (NXDOMAIN for every other name).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${GRIDSTAT_CLUSTER_DIR:-/tmp/gridstat-cluster}
cache=${GRIDSTAT_CACHE:-$HOME/.cache/gridstat}
bridge=kfbr0
pod_cidr=10.244.0.0/24
gateway=10.244.0.1
service_cidr=10.96.0.0/16
pause_image=docker.io/local/pause:1
# The volumes for PersistentVolumeClaims: local PersistentVolumes of the default StorageClass.
volumes=${GRIDSTAT_CLUSTER_VOLUMES:-12}
# The sysctls the kubelet, the bridge plugin and kube-proxy may change; `down` puts them back.
sysctls="kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom kernel.keys.root_maxkeys
 kernel.keys.root_maxbytes net.ipv4.ip_forward net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables
 net.bridge.bridge-nf-call-ip6tables"
guard=(FORWARD -i "$bridge" ! -o "$bridge" -m comment --comment gridstat-cluster-guard -j DROP)

die() { echo "cluster.sh: $*" >&2; exit 1; }
log() { echo "cluster.sh: $*" >&2; }

tool_env() {
  eval "$("$root/scripts/k8s-tools.sh" env)"
  export CONTAINERD_ADDRESS=$dir/containerd/containerd.sock CONTAINERD_NAMESPACE=k8s.io
}

apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "apt-get is not available to install $*"
  log "installing $* with apt-get"
  if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]; then
    apt-get update -q >&2
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2 \
    || { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2; } \
    || die "apt-get could not install $*"
}

tools() {
  local need=()
  command -v containerd >/dev/null 2>&1 || need+=(containerd)
  command -v runc >/dev/null 2>&1 || need+=(runc)
  [ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
  command -v socat >/dev/null 2>&1 || need+=(socat)
  command -v iptables >/dev/null 2>&1 || need+=(iptables)
  command -v nft >/dev/null 2>&1 || need+=(nftables)
  command -v conntrack >/dev/null 2>&1 || need+=(conntrack)
  command -v ipset >/dev/null 2>&1 || need+=(ipset)
  [ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"
  "$root/scripts/k8s-tools.sh" all >/dev/null
  "$root/scripts/k8s-tools.sh" node
  "$root/scripts/k8s-tools.sh" coredns
  "$root/scripts/k8s-tools.sh" pause
  "$root/scripts/k8s-tools.sh" kube-router
}

# spawn NAME CMD...: start CMD in its own session (so `down` ends its whole group); pid in DIR/run.
spawn() {
  local name=$1
  shift
  setsid "$@" >"$dir/log/$name.log" 2>&1 </dev/null &
  echo $! >"$dir/run/$name.pid"
}

policy_synced() {
  alive kube-router || die "kube-router exited: $(tail -3 "$dir/log/kube-router.log")"
  iptables -S KUBE-ROUTER-FORWARD >/dev/null 2>&1
}

ctr_answers() { ctr -a "$CONTAINERD_ADDRESS" version >/dev/null 2>&1; }

alive() { [ -f "$dir/run/$1.pid" ] && kill -0 "$(cat "$dir/run/$1.pid")" 2>/dev/null; }

kc() { kubectl --kubeconfig "$dir/kubeconfig" "$@"; }

node_name() { hostname | tr '[:upper:]' '[:lower:]'; }

node_ready() {
  [ "$(kc get node "$(node_name)" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# wait_for WHAT SECONDS COMMAND...: poll COMMAND every 0.2 s.
wait_for() {
  local what=$1 seconds=$2 i
  shift 2
  for i in $(seq 1 $((seconds * 5))); do
    "$@" && return 0
    sleep 0.2
  done
  die "$what did not happen within $seconds s (logs: $dir/log)"
}

step_started=0
step() { step_started=$(date +%s.%N); log "$1"; }
since() { awk -v now="$(date +%s.%N)" -v t="$1" 'BEGIN { printf "%.1f", now - t }'; }
took() { printf 'cluster.sh: %-34s %6s s\n' "$1" "$(since "$step_started")" >&2; }

write_config() {
  local port=$1 node=$2
  mkdir -p "$dir/cfg/net.d" "$dir/containerd" "$dir/kubelet" "$dir/pod-logs" "$dir/volume-plugins" "$dir/cni"
  cat >"$dir/cfg/containerd.toml" <<EOF
# containerd 1.6 (Debian) for the kubelet's CRI; everything under $dir.
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "$dir/containerd/containerd.sock"
[ttrpc]
  address = "$dir/containerd/containerd.sock.ttrpc"
[debug]
  level = "warn"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  # Root here has no CAP_SYS_RESOURCE: runc cannot lower oom_score_adj below its own.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$dir/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cfg/net.d"
EOF
  cat >"$dir/cfg/net.d/10-gridstat.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "gridstat-pods",
  "plugins": [
    {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$dir/cni/ipam", "ranges": [[{"subnet": "$pod_cidr", "gateway": "$gateway"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  echo "nameserver 127.0.0.1" >"$dir/cfg/resolv.conf"
  cat >"$dir/cfg/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This kernel mounts the cgroup v1 hierarchy: kubelet 1.36 needs the explicit opt-in.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
address: 127.0.0.1
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$dir/containerd/containerd.sock
podLogsDir: $dir/pod-logs
volumePluginDir: $dir/volume-plugins
resolvConf: $dir/cfg/resolv.conf
clusterDNS: [$gateway]
clusterDomain: cluster.local
protectKernelDefaults: false
evictionHard: {memory.available: "1%", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 60
EOF
  cat >"$dir/cfg/Corefile" <<EOF
cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    bind $gateway
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $dir/kubeconfig
        pods insecure
        ttl 1
        fallthrough in-addr.arpa ip6.arpa
    }
}
.:53 {
    bind $gateway
    template ANY ANY {
        rcode NXDOMAIN
    }
}
EOF
  cat >"$dir/cfg/cluster-objects.yaml" <<EOF
# Pods reach the API server through the forwarder on the bridge's address.
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes-pods
  namespace: default
  labels: {kubernetes.io/service-name: kubernetes, endpointslice.kubernetes.io/managed-by: gridstat-cluster}
addressType: IPv4
endpoints: [{addresses: [$gateway], conditions: {ready: true}}]
ports: [{name: https, port: 6443, protocol: TCP}]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
EOF
  local i
  for i in $(seq 1 "$volumes"); do
    mkdir -p "$dir/volumes/pv$i"
    cat >>"$dir/cfg/cluster-objects.yaml" <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: gridstat-local-pv$i
  labels: {gridstat.io/cluster-volume: "true"}
spec:
  capacity: {storage: 5Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: local
  local: {path: $dir/volumes/pv$i}
  nodeAffinity:
    required:
      nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$node]}]}]
EOF
  done
}

save_sysctls() {
  [ -f "$dir/sysctls.saved" ] && return 0
  local k v
  for k in $sysctls; do
    v=$(sysctl -n "$k" 2>/dev/null) || continue
    echo "$k=$v"
  done >"$dir/sysctls.saved"
}

bridge_up() {
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
    ip addr add "$gateway/24" dev "$bridge"
  fi
  ip link set "$bridge" up
  # The guard rule goes in before the first pod (cluster recipe, section 4).
  iptables -C "${guard[@]}" 2>/dev/null || iptables -I "${guard[@]:0:1}" 1 "${guard[@]:1}"
}

images_loaded() {
  local t
  for t in "$@"; do
    ctr -a "$CONTAINERD_ADDRESS" -n k8s.io images check "name==$(full_ref "$t")" 2>/dev/null | grep -q complete || return 1
  done
}

full_ref() {  # docker.io/library/NAME:TAG for a short name, as the kubelet normalizes it
  case $1 in
    */*/*) echo "$1";;
    */*) echo "docker.io/$1";;
    *) echo "docker.io/library/$1";;
  esac
}

load_image() {
  tool_env
  "$root/scripts/docker.sh" start >/dev/null
  eval "$("$root/scripts/docker.sh" env)"
  local t
  for t in "$@"; do
    docker image inspect "$t" >/dev/null 2>&1 || die "image $t is not in the project's Docker engine (scripts/build-image.sh builds gridstat:dev)"
  done
  docker save "$@" | ctr -a "$CONTAINERD_ADDRESS" -n k8s.io images import - >/dev/null \
    || die "ctr could not import $*"
  log "loaded $* into the node's containerd"
}

pause_image_built() {
  "$root/scripts/docker.sh" start >/dev/null
  eval "$("$root/scripts/docker.sh" env)"
  docker image inspect local/pause:1 >/dev/null 2>&1 && return 0
  local tmp
  tmp=$(mktemp -d)
  cp "$GRIDSTAT_PAUSE" "$tmp/pause"
  tar -C "$tmp" -c pause | docker import --change 'ENTRYPOINT ["/pause"]' - local/pause:1 >/dev/null
  rm -rf "$tmp"
}

up() {
  [ "$(id -u)" = 0 ] || die "the node needs root (containerd, network namespaces, iptables)"
  local t0 node port
  t0=$(date +%s.%N)
  node=$(node_name)
  case $(getent hosts "$node" | awk '{print $1}' | head -1) in
    127.*) ;;
    *) die "the host name $node must resolve to a 127.x address in /etc/hosts (the API server reaches the kubelet by it)";;
  esac
  mkdir -p "$dir/run" "$dir/log"
  if alive kubelet && [ -f "$dir/kubeconfig" ] && node_ready; then
    log "already up in $dir"
    echo "READY kubeconfig=$dir/kubeconfig"
    return 0
  fi
  alive kubelet && die "a node is half up in $dir: run scripts/cluster.sh down first"
  # Leftovers of a node that was not taken down (a crash, a reboot): clear them, start afresh.
  if [ -n "$(ls -A "$dir/run" 2>/dev/null)" ] || [ -d "$dir/control" ]; then
    log "clearing what an earlier node left in $dir"
    down
    mkdir -p "$dir/run" "$dir/log"
  fi

  step "tools (cached in $cache)"
  tools
  tool_env
  took "tools"

  step "control plane"
  save_sysctls
  local controllers=namespace,garbagecollector,serviceaccount,serviceaccount-token,deployment,replicaset,statefulset
  controllers=$controllers,disruption,root-ca-cert-publisher,endpointslice,daemonset,job,nodelifecycle,podgc
  controllers=$controllers,persistentvolume-binder,pv-protection,pvc-protection,ttl-after-finished
  GRIDSTAT_KUBE_CONTROLLERS=$controllers "$root/scripts/kube-apiserver.sh" start "$dir/control" >/dev/null
  ln -sf "$dir/control/kubeconfig" "$dir/kubeconfig"
  port=$(cat "$dir/control/port")
  took "control plane ready"

  step "containerd, pod network"
  write_config "$port" "$node"
  bridge_up
  spawn containerd containerd --config "$dir/cfg/containerd.toml"
  wait_for "containerd" 30 ctr_answers
  took "containerd"

  step "images (pause, gridstat:dev)"
  pause_image_built
  local images=(local/pause:1)
  docker image inspect gridstat:dev >/dev/null 2>&1 && images+=(gridstat:dev) \
    || log "gridstat:dev is not built yet: scripts/build-image.sh, then scripts/cluster.sh load-image gridstat:dev"
  images_loaded "${images[@]}" || load_image "${images[@]}"
  took "images"

  step "forwarder, CoreDNS, scheduler, kube-proxy, kubelet"
  spawn forwarder socat "TCP-LISTEN:6443,bind=$gateway,reuseaddr,fork" "TCP:127.0.0.1:$port"
  spawn coredns "$GRIDSTAT_COREDNS" -conf "$dir/cfg/Corefile"
  spawn scheduler "$GRIDSTAT_K8S_BIN/kube-scheduler" --kubeconfig "$dir/kubeconfig" --leader-elect=false \
    --bind-address 127.0.0.1 --secure-port 0 --v=1
  spawn kube-proxy "$GRIDSTAT_K8S_BIN/kube-proxy" --kubeconfig "$dir/kubeconfig" --proxy-mode nftables \
    --hostname-override "$node" --cluster-cidr "$pod_cidr" --conntrack-max-per-core 0 \
    --conntrack-tcp-timeout-established 0 --conntrack-tcp-timeout-close-wait 0 \
    --healthz-bind-address 127.0.0.1:10256 --metrics-bind-address 127.0.0.1:10249 --nodeport-addresses 127.0.0.0/8 --v=1
  spawn kubelet "$GRIDSTAT_K8S_BIN/kubelet" --config "$dir/cfg/kubelet.yaml" --kubeconfig "$dir/kubeconfig" \
    --root-dir "$dir/kubelet" --hostname-override "$node" --v=1
  kc apply --server-side --force-conflicts -f "$dir/cfg/cluster-objects.yaml" >/dev/null
  wait_for "node $node Ready" 120 node_ready
  took "node Ready"

  step "NetworkPolicy controller"
  # kube-router's policy controller only (no routing, no service proxy, no CNI of its own); it needs
  # the Node object, so it starts once the kubelet has registered it.
  spawn kube-router "$GRIDSTAT_KUBE_ROUTER" --kubeconfig "$dir/kubeconfig" --hostname-override "$node" \
    --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false --enable-pod-egress=false \
    --health-port=0 --metrics-port=0 -v=1
  wait_for "kube-router's first policy sync" 60 policy_synced
  took "NetworkPolicy controller"

  if [ -n "${GRIDSTAT_KUBE_PARENT_PID:-}" ]; then
    setsid bash -c 'while kill -0 "$1" 2>/dev/null && [ -f "$2/run/kubelet.pid" ]; do sleep 1; done
                    [ -f "$2/run/kubelet.pid" ] && GRIDSTAT_CLUSTER_DIR=$2 exec "$3" down' watcher \
      "$GRIDSTAT_KUBE_PARENT_PID" "$dir" "$root/scripts/cluster.sh" >/dev/null 2>&1 </dev/null &
  fi
  printf 'cluster.sh: %-34s %6s s\n' "up in all" "$(since "$t0")" >&2
  echo "READY kubeconfig=$dir/kubeconfig"
}

stop_pid() {  # stop_pid NAME: SIGTERM its process group, SIGKILL after 10 s
  local pid i
  [ -f "$dir/run/$1.pid" ] || return 0
  pid=$(cat "$dir/run/$1.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; }
  fi
  rm -f "$dir/run/$1.pid"
}

down() {
  [ -d "$dir" ] || { log "nothing in $dir"; return 0; }
  local t0
  t0=$(date +%s.%N)
  tool_env 2>/dev/null || true
  # Pods first, while the kubelet runs, so their sandboxes and network namespaces go the normal way.
  if alive kubelet && [ -f "$dir/kubeconfig" ]; then
    kc delete namespaces -l '!kubernetes.io/metadata.name' --wait=false >/dev/null 2>&1 || true
    { kc get ns -o name 2>/dev/null | grep -vE '/(default|kube-system|kube-public|kube-node-lease)$' || true; } \
      | xargs -r kubectl --kubeconfig "$dir/kubeconfig" delete --wait=false >/dev/null 2>&1 || true
    kc delete pods --all -A --grace-period=1 --timeout=30s >/dev/null 2>&1 || true
  fi
  local name
  for name in kubelet kube-router kube-proxy scheduler coredns forwarder; do stop_pid "$name"; done
  "$root/scripts/kube-apiserver.sh" stop "$dir/control" >/dev/null 2>&1 || true
  if alive containerd; then
    local id
    for id in $(ctr -a "$CONTAINERD_ADDRESS" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$CONTAINERD_ADDRESS" -n k8s.io tasks kill -s KILL "$id" >/dev/null 2>&1 || true
    done
    sleep 1
  fi
  stop_pid containerd
  # Shims outlive containerd: end those of this node (their command line names this directory).
  pkill -KILL -f "containerd-shim.*$dir/containerd" 2>/dev/null || true
  # kube-proxy's nftables tables (and iptables leftovers of either mode), the guard rule.
  [ -n "${GRIDSTAT_K8S_BIN:-}" ] && [ -x "$GRIDSTAT_K8S_BIN/kube-proxy" ] && {
    "$GRIDSTAT_K8S_BIN/kube-proxy" --cleanup --proxy-mode nftables >/dev/null 2>&1 || true
    "$GRIDSTAT_K8S_BIN/kube-proxy" --cleanup --proxy-mode iptables >/dev/null 2>&1 || true; }
  # kube-router's own --cleanup-config (v2.1.0) crashes in its service-proxy part here: its chains
  # (KUBE-ROUTER-*, KUBE-NWPLCY-*, KUBE-POD-FW-*) and ipsets (KUBE-*) go with kube-proxy's leftovers.
  clean_kube_chains iptables
  clean_kube_chains ip6tables
  local set
  for set in $(ipset list -n 2>/dev/null | grep -E '^(KUBE-|kube-router)' || true); do ipset destroy "$set" 2>/dev/null || true; done
  while iptables -C "${guard[@]}" 2>/dev/null; do iptables -D "${guard[@]}"; done
  # Mounts, network namespaces, the bridge, cgroups.
  local m
  for m in $(awk -v d="$dir" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  local n
  for n in $(ip netns list 2>/dev/null | awk '/^cni-/{print $1}'); do ip netns delete "$n" 2>/dev/null || true; done
  ip link show "$bridge" >/dev/null 2>&1 && ip link delete "$bridge"
  local c
  for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/kubepods.slice; do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  if [ -f "$dir/sysctls.saved" ]; then
    sysctl -q -p "$dir/sysctls.saved" >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
  printf 'cluster.sh: %-34s %6s s\n' "down" "$(since "$t0")" >&2
}

# clean_kube_chains CMD: remove the KUBE-* chains the kubelet and kube-proxy left (and the jumps to them).
clean_kube_chains() {
  local cmd=$1 table rule chain
  command -v "$cmd" >/dev/null 2>&1 || return 0
  for table in filter nat mangle; do
    { "$cmd" -t "$table" -S 2>/dev/null | grep -E '^-A .* -j KUBE-' || true; } | while read -r rule; do
      # shellcheck disable=SC2086
      eval "$cmd -t $table -D ${rule#-A }" 2>/dev/null || true
    done
    for chain in $("$cmd" -t "$table" -S 2>/dev/null | awk '/^-N KUBE-/{print $2}'); do
      "$cmd" -t "$table" -F "$chain" 2>/dev/null || true
    done
    for chain in $("$cmd" -t "$table" -S 2>/dev/null | awk '/^-N KUBE-/{print $2}'); do
      "$cmd" -t "$table" -X "$chain" 2>/dev/null || true
    done
  done
}

# The StorageClass has no provisioner, so a volume whose claim was deleted stays Released: wipe its
# directory and drop the claim reference, and it is Available to the next claim.
recycle_volumes() {
  tool_env
  local pv path n=0
  for pv in $(kc get pv -l gridstat.io/cluster-volume=true -o jsonpath='{range .items[?(@.status.phase=="Released")]}{.metadata.name}{"\n"}{end}'); do
    path=$(kc get pv "$pv" -o jsonpath='{.spec.local.path}')
    case $path in "$dir"/volumes/*) find "$path" -mindepth 1 -delete;; *) continue;; esac
    kc patch pv "$pv" --type json -p '[{"op": "remove", "path": "/spec/claimRef"}]' >/dev/null
    n=$((n + 1))
  done
  log "$n volume(s) recycled"
}

status() {
  alive kubelet && [ -f "$dir/kubeconfig" ] && node_ready
}

print_env() {
  tool_env
  echo "export KUBECONFIG=$dir/kubeconfig"
  echo "export GRIDSTAT_CLUSTER_DIR=$dir"
  echo "export CONTAINERD_ADDRESS=$CONTAINERD_ADDRESS CONTAINERD_NAMESPACE=k8s.io"
  echo "export PATH=$GRIDSTAT_K8S_BIN:$(dirname "$(command -v helm)"):\$PATH"
}

case ${1:-} in
  tools) tools;;
  up) up;;
  down) down;;
  status) status;;
  env) print_env;;
  recycle-volumes) recycle_volumes;;
  load-image) shift; [ $# -ge 1 ] || die "usage: $0 load-image TAG..."; load_image "$@";;
  *) die "usage: $0 tools|up|down|status|env|recycle-volumes|load-image TAG...";;
esac
