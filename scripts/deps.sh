#!/usr/bin/env bash
# The one list of what kaji needs from the machine, used by the README's two commands and by
# .ci/run (so the three never drift apart). Debian 12 / Ubuntu 24.04, as root.
#
#   scripts/deps.sh build|lab|test   install what that purpose needs (one line per package it
#                                    installs; nothing at all when everything is there)
#   scripts/deps.sh --check PURPOSE  print what is missing, install nothing (exit 1 if anything is)
#
# `kaji lab up` runs this same file (compiled into it) for `lab`, unless given --no-install.
set -euo pipefail

# package <purposes> <what it is for>. Purposes: build (compiling the workspace), lab (`kaji lab
# up`), test (`cargo test --workspace`: everything the tests drive; a superset of build and lab).
APT=(
  "pkg-config       build,test  finds libseccomp when building kaji-runtime"
  "protobuf-compiler build,test protoc: etcd-client generates its gRPC code with it at build time"
  "libprotobuf-dev  build,test  the well-known .proto files (descriptor, struct) etcd's protos import"
  "libseccomp-dev   build,test  the seccomp bindings kaji-runtime and kaji-agent link"
  "iproute2         lab,test    ip netns/link: the lab's and the tests' network namespaces"
  "util-linux       lab,test    nsenter: starts the lab's components inside their namespaces"
  "busybox-static   lab,test    the demo and test images are built from it"
  "docker-registry  lab,test    the lab's OCI registry and the image tests' registries"
  "iptables         lab,test    kaji-proxy's and the agent's rules (inside namespaces only)"
  "nftables         lab,test    nft, for kaji-proxy's nftables mode (inside namespaces only)"
  "runc             test        the reference OCI runtime of the differential tests"
  "podman           test        a container engine driving kaji-runtime and runc (runtime/tests/podman.rs)"
  "dnsmasq-base     lab,test    dnsmasq: the lab's upstream resolver (answers kaji.lab only, forwards nothing; starts no service)"
  "etcd-server      lab,test    etcd: the store of kaji lab up --ha and of the etcd backend's tests"
  "etcd-client      lab,test    etcdctl: finds the etcd leader in the HA lab and the fault tests"
  "bsdutils         test        script: a terminal for kubectl in the kubectl run -it test"
  "procps           test        ps (kaji-runtime ps runs it, as runc ps does), sysctl and kill in the tests"
  "qemu-system-x86  test        the VM test's machines (tests/vm: software CPU, systemd, cgroup v2)"
  "qemu-utils       test        qemu-img: the VM test's disk overlays"
  "debootstrap      test        the VM test's Debian image, from the mirror apt uses"
  "e2fsprogs        test        mkfs.ext4 -d: the VM test's disk without a mount or loop device"
  "openssh-client   test        ssh/scp into the VM test's machines"
  "gcc              test        the conformance images' static pause and busybox (tests/conformance/images)"
  "make             test        building busybox for the conformance busybox image"
  "libc6-dev        test        static glibc for the conformance images' pause and busybox"
  "bzip2            test        unpacks busybox's release tarball"
  "curl             test        fetches busybox's release tarball from Debian's mirror"
)
# module <purposes> <pip package> <what it is for>
PIP=(
  "kubernetes  test  kubernetes  the official Python client, a real client the tests use"
)

usage() { echo "usage: scripts/deps.sh [--check] build|lab|test" >&2; exit 2; }
check=0
[ "${1:-}" = "--check" ] && { check=1; shift; }
purpose="${1:-}"
case "$purpose" in build|lab|test) ;; *) usage ;; esac

for_purpose() { [[ ",$1," == *",$purpose,"* ]]; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

find_missing_apt() {
  missing_apt=()
  for line in "${APT[@]}"; do
    read -r pkg purposes why <<<"$line"
    for_purpose "$purposes" || continue
    installed "$pkg" || missing_apt+=("$pkg|$why")
  done
}
find_missing_apt
missing_pip=()
for line in "${PIP[@]}"; do
  read -r module purposes pkg why <<<"$line"
  for_purpose "$purposes" || continue
  python3 -c "import $module" 2>/dev/null || missing_pip+=("$pkg|$why")
done

if [ "$check" = 1 ]; then
  for m in "${missing_apt[@]}" "${missing_pip[@]}"; do [ -n "$m" ] && echo "missing: ${m%%|*} (${m#*|})"; done
  [ ${#missing_apt[@]} -eq 0 ] && [ ${#missing_pip[@]} -eq 0 ]
  exit
fi

if [ ${#missing_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "scripts/deps.sh: installing packages needs root: sudo $0 $purpose" >&2
    exit 1
  fi
  command -v apt-get >/dev/null || { echo "scripts/deps.sh: no apt-get here; install by hand:$(printf ' %s' "${missing_apt[@]%%|*}")" >&2; exit 1; }
  for m in "${missing_apt[@]}"; do echo "installing ${m%%|*}: ${m#*|}"; done
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  names=("${missing_apt[@]%%|*}")
  # All at once; if apt refuses the set ("held broken packages" has been seen here with
  # qemu-system-x86 and debootstrap together), one package per call.
  if ! apt-get install -y -qq --no-install-recommends "${names[@]}" >/dev/null 2>&1; then
    for n in "${names[@]}"; do apt-get install -y -qq --no-install-recommends "$n" >/dev/null; done
  fi
  # Installing one package can remove another the list needs: on a machine with a backported
  # qemu-utils, Debian's qemu-system-x86 conflicts with it and apt removes it, so qemu-img was
  # gone until the next run of this script. Whatever is missing now is installed again, alone.
  find_missing_apt
  for m in "${missing_apt[@]}"; do
    echo "installing ${m%%|*} again (removed by another install): ${m#*|}"
    apt-get install -y -qq --no-install-recommends "${m%%|*}" >/dev/null
  done
  find_missing_apt
  if [ ${#missing_apt[@]} -gt 0 ]; then
    echo "scripts/deps.sh: still missing after install:$(printf ' %s' "${missing_apt[@]%%|*}")" >&2
    exit 1
  fi
fi
if [ ${#missing_pip[@]} -gt 0 ] && ! python3 -m pip --version >/dev/null 2>&1; then
  echo "installing python3-pip: pip, to install the Python packages below"
  command -v apt-get >/dev/null || { echo "scripts/deps.sh: no pip and no apt-get here; install pip by hand" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
fi
for m in "${missing_pip[@]}"; do
  [ -n "$m" ] || continue
  echo "installing ${m%%|*} (pip): ${m#*|}"
  python3 -m pip install --quiet --disable-pip-version-check "${m%%|*}" 2>/dev/null \
    || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages "${m%%|*}"
done
