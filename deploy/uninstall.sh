#!/usr/bin/env bash
# Removes what deploy/install.sh installed and everything kaji made while it ran, then checks
# that nothing is left and lists what is (exit status 1 then).
#
#   deploy/uninstall.sh [--keep-data]
#
# Stops and disables the kaji units; removes every pod (containers, mounts, cgroups, the pod
# network: bridge kaji0, veths, routes, masquerade and hostPort rules) with `kaji-agent cleanup`,
# the proxy's iptables and nftables rules with `kaji-proxy --cleanup`; then the units, binaries,
# the components' flags (/etc/kaji/*.env) and, unless --keep-data, the cluster's PKI, kubeconfigs
# and join token (the rest of /etc/kaji), /var/lib/kaji (the API's store, bootstrap tokens
# included) and /var/lib/kaji-agent (images, pod state, the node's certificates).
set -uo pipefail

PREFIX="${KAJI_PREFIX:-/usr/local}"
UNITS=/etc/systemd/system
COMPONENTS=(kaji-proxy kaji-agent kaji-scheduler kaji-controller-manager kaji-apiserver)
keep_data=0
case "${1:-}" in
  --keep-data) keep_data=1 ;;
  "") ;;
  -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "uninstall.sh: unknown argument $1" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "uninstall.sh: run it as root" >&2; exit 1; }

say() { echo "uninstall.sh: $*" >&2; }
failed=()

for c in "${COMPONENTS[@]}"; do
  if [ -f "$UNITS/$c.service" ]; then
    systemctl disable -q --now "$c.service" 2>/dev/null || failed+=("stop $c.service")
  fi
done

# The agent left its pods running (KillMode=process): remove them while its binary is here.
if [ -x "$PREFIX/bin/kaji-agent" ] && [ -d /var/lib/kaji-agent ]; then
  say "removing every pod and the pod network"
  "$PREFIX/bin/kaji-agent" --root-dir /var/lib/kaji-agent cleanup >/dev/null 2>&1 || failed+=("kaji-agent cleanup")
fi
if [ -x "$PREFIX/bin/kaji-proxy" ]; then
  "$PREFIX/bin/kaji-proxy" --cleanup >/dev/null 2>&1 || failed+=("kaji-proxy --cleanup")
fi

for c in "${COMPONENTS[@]}"; do
  rm -f "$UNITS/$c.service" "$PREFIX/bin/$c"
done
rm -f "$PREFIX/bin/kaji"
systemctl daemon-reload
rm -f /etc/kaji/kaji-*.env
if [ "$keep_data" = 0 ]; then
  # The PKI goes with the data: a store kept without its CA and ServiceAccount key is of no use.
  rm -rf /etc/kaji
  # Never below a live mount (a pod volume the cleanup could not unmount stays, and is listed).
  if ! grep -q " /var/lib/kaji-agent/" /proc/self/mounts; then
    rm -rf /var/lib/kaji-agent
  fi
  rm -rf /var/lib/kaji
fi

# What is left, if anything.
left=()
for c in "${COMPONENTS[@]}"; do
  [ -e "$UNITS/$c.service" ] && left+=("unit file $UNITS/$c.service")
  [ -e "$PREFIX/bin/$c" ] && left+=("binary $PREFIX/bin/$c")
  systemctl is-active -q "$c.service" 2>/dev/null && left+=("running unit $c.service")
done
for f in /etc/kaji/kaji-*.env; do [ -e "$f" ] && left+=("file $f"); done
if [ "$keep_data" = 0 ]; then
  [ -e /etc/kaji ] && left+=("directory /etc/kaji")
  [ -e /var/lib/kaji ] && left+=("directory /var/lib/kaji")
  [ -e /var/lib/kaji-agent ] && left+=("directory /var/lib/kaji-agent")
fi
while read -r _ mnt _; do
  case "$mnt" in /var/lib/kaji-agent/*|/var/lib/kaji/*) left+=("mount $mnt") ;; esac
done </proc/self/mounts
for p in /proc/[0-9]*; do
  exe=$(readlink "$p/exe" 2>/dev/null) || continue
  case "$exe" in "$PREFIX"/bin/kaji*) left+=("process ${p#/proc/} ($exe)") ;; esac
done
for cg in /sys/fs/cgroup/kubepods.slice/kaji-pods.scope /sys/fs/cgroup/kaji /sys/fs/cgroup/*/kaji; do
  [ -d "$cg" ] && left+=("cgroup $cg")
done
ip link show kaji0 >/dev/null 2>&1 && left+=("bridge kaji0")
for l in $(ip -o link show | awk -F': ' '$2 ~ /^veth/ {sub(/@.*/, "", $2); print $2}'); do left+=("link $l"); done
while read -r r; do [ -n "$r" ] && left+=("route $r"); done < <(ip route show proto 0x4b 2>/dev/null)
if command -v iptables-save >/dev/null; then
  n=$(iptables-save 2>/dev/null | grep -cE '^:(KAJI|KUBE)-' || true)
  [ "$n" -gt 0 ] && left+=("$n iptables chains KAJI-*/KUBE-*")
fi
if command -v nft >/dev/null; then
  nft list tables 2>/dev/null | grep -q kaji && left+=("nftables table(s): $(nft list tables | grep kaji | tr '\n' ' ')")
fi

if [ ${#failed[@]} -gt 0 ] || [ ${#left[@]} -gt 0 ]; then
  for f in "${failed[@]}"; do echo "could not: $f"; done
  for l in "${left[@]}"; do echo "left behind: $l"; done
  exit 1
fi
echo "kaji is uninstalled; nothing is left$([ "$keep_data" = 1 ] && echo " but its data (/etc/kaji: PKI and kubeconfigs; /var/lib/kaji, /var/lib/kaji-agent)")"
