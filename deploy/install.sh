#!/usr/bin/env bash
# Installs kaji on this machine as systemd services (root; systemd as PID 1). One script, two
# roles, like k3s's installer but with nothing downloaded: the binaries come from --bin-dir.
#
#   deploy/install.sh --role server [--node-ip IP] [--no-agent]
#       the control plane (kaji-apiserver, kaji-controller-manager, kaji-scheduler) and, unless
#       --no-agent, this machine as a node too (kaji-agent, kaji-proxy); prints the command that
#       joins other machines, and writes /etc/kaji/admin.kubeconfig for kubectl.
#   deploy/install.sh --role agent --server URL [--token T --ca-hash sha256:H] [--node-ip IP]
#       this machine as a node of the cluster at URL (kaji-agent, kaji-proxy).
#
# Options: --bin-dir DIR (default: bin/ beside this script, else ../target/release), --node-name
# NAME (default: the host name), --node-ip IP (default: the address of the default route's
# interface; pin it where the default route is a NAT interface, e.g. Vagrant's eth0),
# --port PORT (6443), --cluster-cidr CIDR (10.244.0.0/16, the same on every node),
# --service-cidr CIDR (10.96.0.0/12), --proxy-mode iptables|nftables, --agent-arg ARG (extra
# kaji-agent flag, repeatable).
#
# Idempotent: run it again (e.g. with new binaries) and it replaces only the files that differ
# and restarts only the components whose binary, unit or flags changed. Undo: deploy/uninstall.sh.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PREFIX="${KAJI_PREFIX:-/usr/local}"
ETC=/etc/kaji
UNITS=/etc/systemd/system

die() { echo "install.sh: $*" >&2; exit 1; }
say() { echo "install.sh: $*" >&2; }

role="" bin_dir="" node_ip="" node_name="" server="" token="" ca_hash="" port=6443
cluster_cidr=10.244.0.0/16 service_cidr=10.96.0.0/12 proxy_mode=iptables no_agent=0
agent_args=()
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
    --no-agent) no_agent=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

[ "$(id -u)" = 0 ] || die "run it as root"
[ -d /run/systemd/system ] || die "systemd is not running as PID 1 here (kaji's units need it)"
case "$role" in
  server) [ -z "$server" ] || die "--server is for --role agent" ;;
  agent)
    [ -n "$server" ] || die "--role agent needs --server https://IP:6443 (the server's install prints the command)"
    [ "$no_agent" = 0 ] || die "--no-agent is for --role server"
    ;;
  *) die "--role server or --role agent" ;;
esac
case "$proxy_mode" in iptables|nftables) ;; *) die "--proxy-mode iptables or nftables" ;; esac
if [ -n "$token$ca_hash" ]; then
  [[ "$ca_hash" =~ ^sha256:[0-9a-f]{64}$ ]] || die "--ca-hash must be sha256:<64 hex digits>"
  [ -n "$token" ] || die "--ca-hash goes with --token"
fi
if [[ "$server" == https://* ]]; then
  # The node's TLS bootstrap (bootstrap token, CSR, a CA pinned by its hash) comes with the
  # apiserver's TLS; until then the API is plain HTTP on a private network.
  die "this kaji has no TLS yet: give --server http://IP:$port"
fi

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
  server="http://$node_ip:$port"
  [ "$no_agent" = 1 ] || components+=(kaji-agent kaji-proxy)
else
  components+=(kaji-agent kaji-proxy)
fi

# Each component's flags, in its environment file (the unit runs `<binary> $KAJI_ARGS`).
args_of() {
  case "$1" in
    kaji-apiserver) echo "--insecure-bind-address 0.0.0.0 --insecure-port $port --data-dir /var/lib/kaji/apiserver --service-cluster-ip-range $service_cidr" ;;
    kaji-controller-manager) echo "--master http://127.0.0.1:$port --allocate-node-cidrs true --cluster-cidr $cluster_cidr" ;;
    kaji-scheduler) echo "--master http://127.0.0.1:$port" ;;
    kaji-agent) echo "--master $server --node-name $node_name --node-ip $node_ip --root-dir /var/lib/kaji-agent --cluster-cidr $cluster_cidr ${agent_args[*]}" ;;
    kaji-proxy) echo "--master $server --hostname-override $node_name --cluster-cidr $cluster_cidr --proxy-mode $proxy_mode" ;;
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

mkdir -p "$ETC"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
units_changed=0
for c in "${components[@]}"; do
  [ -x "$bin_dir/$c" ] || die "$bin_dir/$c is missing"
  put "$bin_dir/$c" "$PREFIX/bin/$c" 755 "$c"
  printf 'KAJI_ARGS="%s"\n' "$(args_of "$c")" >"$tmp/$c.env"
  put "$tmp/$c.env" "$ETC/$c.env" 644 "$c"
  before=${#changed[@]}
  put "$HERE/systemd/$c.service" "$UNITS/$c.service" 644 "$c"
  [ ${#changed[@]} -gt "$before" ] && units_changed=1
done
# The CLI for people without kubectl (and the agent's images: `kaji-agent image import`).
[ -x "$bin_dir/kaji" ] && put "$bin_dir/kaji" "$PREFIX/bin/kaji" 755 kaji

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
done

if [ "$role" = server ]; then
  cat >"$tmp/admin.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kaji
  cluster:
    server: $server
contexts:
- name: kaji
  context:
    cluster: kaji
    user: admin
users:
- name: admin
  user: {}
current-context: kaji
EOF
  put "$tmp/admin.kubeconfig" "$ETC/admin.kubeconfig" 600 kubeconfig
  echo "kaji server is up at $server. kubectl: export KUBECONFIG=$ETC/admin.kubeconfig"
  echo "Join a machine as a node (run there, with the same binaries):"
  echo "  deploy/install.sh --role agent --server $server"
else
  echo "kaji agent $node_name ($node_ip) joins $server"
fi
