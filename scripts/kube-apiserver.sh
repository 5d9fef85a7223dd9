#!/usr/bin/env bash
# A real Kubernetes control plane on 127.0.0.1 for the operator's and the chart's tests: etcd,
# kube-apiserver and kube-controller-manager (namespace deletion, garbage collection, Deployments
# -> ReplicaSets). No kubelet, no scheduler: objects are created and reconciled, pods never run.
#
#   scripts/kube-apiserver.sh start DIR [PORT]   start all three in the background; prints
#                                                 READY kubeconfig=DIR/kubeconfig port=PORT once /readyz answers
#   scripts/kube-apiserver.sh stop DIR           stop what `start DIR` started (and nothing else)
#   scripts/kube-apiserver.sh status DIR         exit 0 while the API server answers /readyz
#   GRIDSTAT_KUBE_PARENT_PID=PID ... start DIR   also stop everything once process PID is gone
#   GRIDSTAT_KUBE_CONTROLLERS=a,b,... start DIR  kube-controller-manager's controllers (scripts/cluster.sh
#                                                 adds those a node needs: nodelifecycle, endpointslice, ...)
#
# Security as on a real cluster, scaled down: the API server listens on 127.0.0.1 only (HTTPS,
# self-signed serving certificate in DIR/pki), authenticates static bearer tokens (DIR/tokens.csv:
# an admin in system:masters, and `gridstat-operator`, a plain user with no rights of its own, so
# tests can check the chart's RBAC), authorizes with RBAC, and signs service-account tokens with a
# key pair made here. --endpoint-reconciler-type=none: there is no node to advertise.
# PORT defaults to a free port. The binaries come from scripts/k8s-tools.sh (cached by version).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "kube-apiserver.sh: $*" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

bins() {
  eval "$("$root/scripts/k8s-tools.sh" env)"
  [ -x "$GRIDSTAT_K8S_BIN/kube-apiserver" ] || die "kube-apiserver is not built: run scripts/k8s-tools.sh apiserver"
  command -v etcd >/dev/null 2>&1 || die "etcd is missing: run scripts/k8s-tools.sh etcd"
}

# spawn NAME LOG CMD...: start CMD in its own session (so `stop` can end its whole group), record the pid.
spawn() {
  local name=$1 log=$2
  shift 2
  setsid "$@" >"$log" 2>&1 < /dev/null &
  echo $! > "$dir/$name.pid"
}

readyz() {
  curl -sfk --max-time 2 -H "Authorization: Bearer $(cat "$dir/admin.token")" \
    "https://127.0.0.1:$(cat "$dir/port")/readyz" >/dev/null 2>&1
}

start() {
  bins
  mkdir -p "$dir/pki"
  [ -f "$dir/apiserver.pid" ] && kill -0 "$(cat "$dir/apiserver.pid")" 2>/dev/null \
    && die "already running in $dir (stop it first)"
  local port=${1:-$(free_port)} etcd_port etcd_peer
  etcd_port=$(free_port)
  etcd_peer=$(free_port)
  echo "$port" > "$dir/port"

  # Credentials: two bearer tokens and the service-account signing key pair.
  [ -f "$dir/admin.token" ] || python3 -c 'import secrets; print(secrets.token_hex(16))' > "$dir/admin.token"
  [ -f "$dir/operator.token" ] || python3 -c 'import secrets; print(secrets.token_hex(16))' > "$dir/operator.token"
  {
    echo "$(cat "$dir/admin.token"),admin,admin,system:masters"
    echo "$(cat "$dir/operator.token"),gridstat-operator,gridstat-operator"
  } > "$dir/tokens.csv"
  if [ ! -f "$dir/pki/sa.key" ]; then
    openssl genrsa -out "$dir/pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "$dir/pki/sa.key" -pubout -out "$dir/pki/sa.pub" 2>/dev/null
  fi

  spawn etcd "$dir/etcd.log" etcd --name gridstat-test --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "gridstat-test=http://127.0.0.1:$etcd_peer" --log-level warn --logger zap \
    --quota-backend-bytes 2147483648 --snapshot-count 10000
  local i
  for i in $(seq 1 100); do
    curl -sf --max-time 1 "http://127.0.0.1:$etcd_port/health" >/dev/null 2>&1 && break
    kill -0 "$(cat "$dir/etcd.pid")" 2>/dev/null || { tail -20 "$dir/etcd.log" >&2; die "etcd exited"; }
    sleep 0.1
  done

  spawn apiserver "$dir/kube-apiserver.log" "$GRIDSTAT_K8S_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port" \
    --cert-dir "$dir/pki" \
    --token-auth-file "$dir/tokens.csv" \
    --authorization-mode RBAC \
    --service-account-key-file "$dir/pki/sa.pub" \
    --service-account-signing-key-file "$dir/pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range 10.96.0.0/16 \
    --endpoint-reconciler-type none \
    --allow-privileged=true \
    --kubelet-preferred-address-types Hostname,InternalIP \
    --profiling=false \
    --v=1

  # The kubeconfigs: the admin's (tests, kubectl, helm) and the unprivileged operator user's.
  local user
  for user in admin operator; do
    cat > "$dir/$([ $user = admin ] && echo kubeconfig || echo operator.kubeconfig)" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: gridstat-test
  cluster:
    server: https://127.0.0.1:$port
    insecure-skip-tls-verify: true
users:
- name: $user
  user:
    token: $(cat "$dir/$user.token")
contexts:
- name: gridstat-test
  context: {cluster: gridstat-test, user: $user, namespace: default}
current-context: gridstat-test
KUBECONFIG
  done

  for i in $(seq 1 600); do
    readyz && break
    kill -0 "$(cat "$dir/apiserver.pid")" 2>/dev/null || { tail -30 "$dir/kube-apiserver.log" >&2; die "kube-apiserver exited"; }
    sleep 0.1
  done
  readyz || { tail -30 "$dir/kube-apiserver.log" >&2; die "kube-apiserver did not become ready in 60 s"; }

  spawn controller-manager "$dir/kube-controller-manager.log" "$GRIDSTAT_K8S_BIN/kube-controller-manager" \
    --kubeconfig "$dir/kubeconfig" \
    --secure-port 0 \
    --leader-elect=false \
    --controllers "${GRIDSTAT_KUBE_CONTROLLERS:-namespace,garbagecollector,serviceaccount,serviceaccount-token,deployment,replicaset,statefulset,disruption}" \
    --service-account-private-key-file "$dir/pki/sa.key" \
    --root-ca-file "$dir/pki/apiserver.crt" \
    --v=1
  # With GRIDSTAT_KUBE_PARENT_PID (the test session), a watcher stops everything when that process
  # dies without calling `stop` (a killed pytest leaves no control plane behind).
  if [ -n "${GRIDSTAT_KUBE_PARENT_PID:-}" ]; then
    setsid bash -c 'while kill -0 "$1" 2>/dev/null && [ -f "$2/apiserver.pid" ]; do sleep 1; done
                    [ -f "$2/apiserver.pid" ] && exec "$3" stop "$2"' watcher \
      "$GRIDSTAT_KUBE_PARENT_PID" "$dir" "$root/scripts/kube-apiserver.sh" >/dev/null 2>&1 </dev/null &
  fi
  echo "READY kubeconfig=$dir/kubeconfig port=$port"
}

stop() {
  local name pid i
  for name in controller-manager apiserver etcd; do
    [ -f "$dir/$name.pid" ] || continue
    pid=$(cat "$dir/$name.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
      for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && { kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; }
    fi
    rm -f "$dir/$name.pid"
  done
}

cmd=${1:-}
[ $# -ge 2 ] || die "usage: $0 start|stop|status DIR [PORT]"
dir=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
case $cmd in
  start) start "$@";;
  stop) stop;;
  status) readyz;;
  *) die "unknown command $cmd (start|stop|status)";;
esac
