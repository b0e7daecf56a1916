#!/usr/bin/env bash
# Installs kaji on this machine as systemd services (root; systemd as PID 1). One script, two
# roles, like k3s's installer but with nothing downloaded: the binaries come from --bin-dir.
# The cluster speaks TLS only, as kubeadm sets one up.
#
#   deploy/install.sh --role server [--node-ip IP] [--no-agent]
#       the control plane (kaji-apiserver on HTTPS :6443 with client certificates, bootstrap
#       tokens, ServiceAccount tokens, Node,RBAC and NodeRestriction; kaji-controller-manager,
#       which approves and signs the nodes' certificate requests with the cluster CA;
#       kaji-scheduler) and, unless --no-agent, this machine as a node too (kaji-agent,
#       kaji-proxy). The first run makes the PKI in /etc/kaji (kubeadm's layout: pki/ca.crt, ...,
#       admin.conf); later runs keep it. Prints the command that joins other machines (a
#       bootstrap token and the CA's hash) and writes /etc/kaji/admin.conf for kubectl.
#   deploy/install.sh --role agent --server https://IP:6443 --token T --ca-hash sha256:H [--node-ip IP]
#       this machine as a node of the cluster at IP (kaji-agent, kaji-proxy): the cluster CA is
#       taken from the server's TLS handshake only if its public key has hash H (kubeadm's token
#       discovery, pinned), then the agent asks for its client certificate with the token (a
#       CertificateSigningRequest the controller manager approves and signs).
#
# Options: --bin-dir DIR (default: bin/ beside this script, else ../target/release), --node-name
# NAME (default: the host name), --node-ip IP (default: the address of the default route's
# interface; pin it where the default route is a NAT interface, e.g. Vagrant's eth0),
# --port PORT (6443), --cluster-cidr CIDR (10.244.0.0/16, the same on every node),
# --service-cidr CIDR (10.96.0.0/12), --proxy-mode iptables|nftables, --agent-arg ARG (extra
# kaji-agent flag, repeatable), --san NAME|IP (server: another name or address the apiserver's
# certificate holds, e.g. a load balancer's; repeatable; first run only), --token T (server: the
# join token to make, as `kubeadm init --token`; default: a random one). A CA already in
# /etc/kaji/pki (ca.crt, ca.key) is used, as kubeadm does, so its hash can be known in advance.
#
# Idempotent: run it again (e.g. with new binaries) and it replaces only the files that differ
# and restarts only the components whose binary, unit, flags or credentials changed; the PKI and
# the join token are kept (a new token once the old one has expired). Undo: deploy/uninstall.sh.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PREFIX="${KAJI_PREFIX:-/usr/local}"
ETC=/etc/kaji
UNITS=/etc/systemd/system

die() { echo "install.sh: $*" >&2; exit 1; }
say() { echo "install.sh: $*" >&2; }

role="" bin_dir="" node_ip="" node_name="" server="" token="" ca_hash="" port=6443
cluster_cidr=10.244.0.0/16 service_cidr=10.96.0.0/12 proxy_mode=iptables no_agent=0
agent_args=() sans=()
while [ $# -gt 0 ]; do
  case "$1" in
    --role) role="$2"; shift 2 ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --node-ip) node_ip="$2"; shift 2 ;;
    --node-name) node_name="$2"; shift 2 ;;
    --server) server="$2"; shift 2 ;;
    --token) token="$2"; shift 2 ;;
    --ca-hash) ca_hash="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --cluster-cidr) cluster_cidr="$2"; shift 2 ;;
    --service-cidr) service_cidr="$2"; shift 2 ;;
    --proxy-mode) proxy_mode="$2"; shift 2 ;;
    --agent-arg) agent_args+=("$2"); shift 2 ;;
    --san) sans+=("$2"); shift 2 ;;
    --no-agent) no_agent=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

[ "$(id -u)" = 0 ] || die "run it as root"
[ -d /run/systemd/system ] || die "systemd is not running as PID 1 here (kaji's units need it)"
case "$role" in
  server)
    [ -z "$server$ca_hash" ] || die "--server and --ca-hash are for --role agent"
    [ -z "$token" ] || [[ "$token" =~ ^[a-z0-9]{6}\.[a-z0-9]{16}$ ]] || die "--token must be a bootstrap token, <6 of a-z0-9>.<16 of a-z0-9>"
    ;;
  agent)
    [ -n "$server" ] || die "--role agent needs --server https://IP:6443 (the server's install prints the command)"
    [ "$no_agent" = 0 ] || die "--no-agent is for --role server"
    [[ "$server" == https://* ]] || die "--server must be https://IP:$port (the API speaks TLS only)"
    [ -n "$token" ] && [ -n "$ca_hash" ] || die "--role agent needs --token and --ca-hash (the server's install prints them)"
    [[ "$token" =~ ^[a-z0-9]{6}\.[a-z0-9]{16}$ ]] || die "--token must be a bootstrap token, <6 of a-z0-9>.<16 of a-z0-9>"
    [[ "$ca_hash" =~ ^sha256:[0-9a-f]{64}$ ]] || die "--ca-hash must be sha256:<64 hex digits>"
    [ ${#sans[@]} = 0 ] || die "--san is for --role server"
    ;;
  *) die "--role server or --role agent" ;;
esac
case "$proxy_mode" in iptables|nftables) ;; *) die "--proxy-mode iptables or nftables" ;; esac

if [ -z "$bin_dir" ]; then
  for d in "$HERE/bin" "$HERE/../target/release"; do
    [ -x "$d/kaji-agent" ] && { bin_dir="$d"; break; }
  done
  [ -n "$bin_dir" ] || die "no kaji binaries beside this script: give --bin-dir (cargo build --release puts them in target/release)"
fi

# The node's address: as given, else the default route's interface's (the agent's own rule).
if [ -z "$node_ip" ]; then
  dev=$(ip -4 route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit }}')
  [ -n "$dev" ] || die "no IPv4 default route: give --node-ip"
  node_ip=$(ip -4 -o addr show dev "$dev" | awk '{split($4, a, "/"); print a[1]; exit}')
  [ -n "$node_ip" ] || die "interface $dev has no IPv4 address: give --node-ip"
fi
node_name="${node_name:-$(hostname)}"

components=()
if [ "$role" = server ]; then
  components+=(kaji-apiserver kaji-controller-manager kaji-scheduler)
  server="https://$node_ip:$port"
  [ "$no_agent" = 1 ] || components+=(kaji-agent kaji-proxy)
else
  components+=(kaji-agent kaji-proxy)
fi

# Where the credentials live. The server's own node has its client and serving certificates
# issued by the cluster CA here (`kaji pki node`) and its proxy the system:kube-proxy
# certificate (proxy.conf). A joining node bootstraps its client certificate with the token
# (kubelet.conf, the key and certificate in the agent's cert dir, as kubelet does), serves its
# port with a self-signed pair (kubelet's own default) and runs its proxy with the node's
# credentials (see the bindings below).
PKI="$ETC/pki"
AGENT_PKI=/var/lib/kaji-agent/pki
if [ "$role" = server ]; then
  node_kubeconfig="$ETC/nodes/$node_name/kubelet.conf"
  serving_cert="$ETC/nodes/$node_name/kubelet.crt" serving_key="$ETC/nodes/$node_name/kubelet.key"
  proxy_kubeconfig="$ETC/proxy.conf"
else
  node_kubeconfig="$ETC/kubelet.conf"
  serving_cert="$AGENT_PKI/kubelet.crt" serving_key="$AGENT_PKI/kubelet.key"
  proxy_kubeconfig="$ETC/kubelet.conf"
fi

# Each component's flags, in its environment file (the unit runs `<binary> $KAJI_ARGS`).
args_of() {
  case "$1" in
    kaji-apiserver)
      echo "--bind-address 0.0.0.0 --secure-port $port --advertise-address $node_ip" \
        "--tls-cert-file $PKI/apiserver.crt --tls-private-key-file $PKI/apiserver.key --client-ca-file $PKI/ca.crt" \
        "--kubelet-client-certificate $PKI/apiserver-kubelet-client.crt --kubelet-client-key $PKI/apiserver-kubelet-client.key" \
        "--enable-bootstrap-token-auth --service-account-signing-key-file $PKI/sa.key --service-account-key-file $PKI/sa.pub" \
        "--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction,ServiceAccount" \
        "--admission-control-config-file $ETC/admission.yaml" \
        "--data-dir /var/lib/kaji/apiserver --service-cluster-ip-range $service_cidr" ;;
    kaji-controller-manager)
      echo "--kubeconfig $ETC/controller-manager.conf --allocate-node-cidrs true --cluster-cidr $cluster_cidr" \
        "--cluster-signing-cert-file $PKI/ca.crt --cluster-signing-key-file $PKI/ca.key --root-ca-file $PKI/ca.crt" ;;
    kaji-scheduler) echo "--kubeconfig $ETC/scheduler.conf" ;;
    kaji-agent)
      local join=""
      [ "$role" = agent ] && join="--bootstrap-kubeconfig $ETC/bootstrap-kubelet.conf --cert-dir $AGENT_PKI "
      echo "--kubeconfig $node_kubeconfig ${join}--tls-cert-file $serving_cert --tls-private-key-file $serving_key" \
        "--client-ca-file $PKI/ca.crt --node-name $node_name --node-ip $node_ip --root-dir /var/lib/kaji-agent" \
        "--cluster-cidr $cluster_cidr ${agent_args[*]}" ;;
    kaji-proxy)
      echo "--kubeconfig $proxy_kubeconfig --hostname-override $node_name --cluster-cidr $cluster_cidr" \
        "--proxy-mode $proxy_mode" ;;
  esac
}

changed=()
# put SRC DEST MODE COMPONENT: installs SRC as DEST (atomically) unless identical; records the
# component as changed when it was not.
put() {
  local src="$1" dest="$2" mode="$3" component="$4"
  if [ -f "$dest" ] && cmp -s "$src" "$dest"; then
    return
  fi
  install -D -m "$mode" "$src" "$dest.kaji-new"
  mv -f "$dest.kaji-new" "$dest"
  changed+=("$component")
}
is_changed() { local c; for c in "${changed[@]}"; do [ "$c" = "$1" ] && return 0; done; return 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
units_changed=0
# The CLI makes the PKI, joins, creates the token and applies the bindings below (and is the
# users' kubectl-like client).
kaji="$bin_dir/kaji"
[ -x "$kaji" ] || die "$kaji is missing"
if [ "$role" = agent ]; then
  # Join discovery first, so a wrong hash or server installs nothing: the CA only if its public
  # key has the pinned hash (over TLS; nothing is sent but the handshake), and the bootstrap
  # kubeconfig with the token.
  "$kaji" pki join --dir "$tmp/join" --server "$server" --token "$token" --ca-hash "$ca_hash" >/dev/null \
    || die "could not get the cluster CA from $server (is the server up, is --ca-hash right?)"
fi
mkdir -p "$ETC"
put "$kaji" "$PREFIX/bin/kaji" 755 kaji
for c in "${components[@]}"; do
  [ -x "$bin_dir/$c" ] || die "$bin_dir/$c is missing"
  put "$bin_dir/$c" "$PREFIX/bin/$c" 755 "$c"
  printf 'KAJI_ARGS="%s"\n' "$(args_of "$c")" >"$tmp/$c.env"
  put "$tmp/$c.env" "$ETC/$c.env" 644 "$c"
  before=${#changed[@]}
  put "$HERE/systemd/$c.service" "$UNITS/$c.service" 644 "$c"
  [ ${#changed[@]} -gt "$before" ] && units_changed=1
done

# PodSecurity: baseline enforced in every namespace without its own labels, kube-system exempt.
[ "$role" = server ] && put "$HERE/admission.yaml" "$ETC/admission.yaml" 644 kaji-apiserver

# --- credentials --------------------------------------------------------------------------------
if [ "$role" = server ]; then
  # The PKI, made once: a re-run keeps every key and certificate (uninstall.sh removes them).
  if [ ! -f "$PKI/apiserver.crt" ] || [ ! -f "$ETC/admin.conf" ]; then
    say "making the cluster's certificates in $ETC"
    extra=()
    for n in "${sans[@]}"; do
      if [[ "$n" =~ ^[0-9.]+$|: ]]; then extra+=(--ip "$n"); else extra+=(--dns "$n"); fi
    done
    "$kaji" pki init --dir "$ETC" --server "$server" --ip "$node_ip" "${extra[@]}" \
      --service-cluster-ip-range "$service_cidr" >/dev/null
    changed+=(kaji-apiserver kaji-controller-manager kaji-scheduler kaji-proxy)
  fi
  if [ "$no_agent" = 0 ] && [ ! -f "$node_kubeconfig" ]; then
    "$kaji" pki node --dir "$ETC" --name "$node_name" --ip "$node_ip" --server "$server" >/dev/null
    changed+=(kaji-agent)
  fi
else
  put "$tmp/join/pki/ca.crt" "$PKI/ca.crt" 644 kaji-agent
  put "$tmp/join/bootstrap-kubelet.conf" "$ETC/bootstrap-kubelet.conf" 600 kaji-agent
  if [ ! -f "$serving_cert" ]; then
    "$kaji" pki self-signed --cert-dir "$AGENT_PKI" --name "$node_name" --ip "$node_ip" >/dev/null
    changed+=(kaji-agent)
  fi
fi

# Bindings beyond Kubernetes' defaults, applied once the API serves:
# - kaji's controller manager runs all its controllers under its own user (it has no
#   --use-service-account-credentials yet), so that user holds cluster-admin;
# - a joining node's proxy speaks with the node's credentials: system:node-proxier for nodes.
bindings() {
  "$kaji" --kubeconfig "$ETC/admin.conf" apply -f - >/dev/null <<'YAML'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "kaji:controller-manager"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:kube-controller-manager"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "kaji:node-proxier"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:node-proxier"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:nodes"}]
YAML
}

[ "$units_changed" = 1 ] && systemctl daemon-reload
for c in "${components[@]}"; do
  systemctl enable -q "$c.service"
  if is_changed "$c"; then
    say "starting $c"
    systemctl restart "$c.service"
  elif ! systemctl is-active -q "$c.service"; then
    say "starting $c (it was not running)"
    systemctl start "$c.service"
  else
    say "$c is up to date"
  fi
  if [ "$c" = kaji-apiserver ]; then
    n=0
    until bindings 2>"$tmp/bindings.err"; do
      n=$((n + 1))
      [ $n -lt 30 ] || die "could not apply the control plane's bindings: $(cat "$tmp/bindings.err")"
      sleep 2
    done
  fi
done

if [ "$role" = server ]; then
  # The join token: kept while its Secret lasts (bootstrap tokens expire after 24 h and the
  # apiserver stops accepting them), else a new one.
  # The file holds the token and when it was made; one made over 23 h ago is replaced. A token
  # given with --token (kubeadm init --token) is made unless its Secret is there.
  given="$token" made=0
  [ -z "$given" ] && [ -f "$ETC/join-token" ] && read -r token made <"$ETC/join-token"
  [ -n "$given" ] && made=$(date +%s)
  if [ -n "$token" ] && { [ $(($(date +%s) - ${made:-0})) -gt 82800 ] \
    || ! "$kaji" --kubeconfig "$ETC/admin.conf" get secret -n kube-system "bootstrap-token-${token%%.*}" >/dev/null 2>&1; }; then
    token=""
  fi
  if [ -z "$token" ]; then
    token=$("$kaji" --kubeconfig "$ETC/admin.conf" token create $given --ttl 24h --description "made by deploy/install.sh") \
      || die "could not create a join token"
    (umask 077 && echo "$token $(date +%s)" >"$ETC/join-token")
  fi
  ca_hash=$("$kaji" pki ca-hash --dir "$ETC")
  echo "kaji server is up at $server. kubectl: export KUBECONFIG=$ETC/admin.conf"
  echo "Join a machine as a node (run there, with the same binaries; the token lasts 24 h):"
  echo "  deploy/install.sh --role agent --server $server --token $token --ca-hash $ca_hash"
else
  echo "kaji agent $node_name ($node_ip) joined $server"
fi
