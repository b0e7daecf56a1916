#!/usr/bin/env bash
# Reproduces docs/benchmarks.md's "from nothing" figures: the README's two commands, copied
# verbatim, in a fresh Debian 12 chroot (debootstrap minbase plus what "only Rust, kubectl and
# root" means: the Rust toolchain with a C linker, git, kubectl). Run as root on the host:
#
#   scripts/from-nothing.sh <empty dir> [lab|test|both]
#
# It makes the chroot, copies this checkout's HEAD into it (git clone), the host's rustup
# toolchain and kubectl, then times: 1) the README's first command and `kaji lab down`, 2) the
# README's test command. Everything networked happens inside namespaces the lab and the tests
# create; the chroot's mounts are removed at the end. Nothing is installed on the host.
set -euo pipefail
dir="${1:?usage: scripts/from-nothing.sh <empty dir> [lab|test|both]}"
what="${2:-both}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
root="$dir/root"
mirror="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)"
mirror="${mirror:-http://deb.debian.org/debian}"

mounted=()
cleanup() {
  for ((i=${#mounted[@]}-1; i>=0; i--)); do umount -R "${mounted[$i]}" 2>/dev/null || umount -Rl "${mounted[$i]}" || true; done
}
trap cleanup EXIT

if [ ! -x "$root/usr/bin/apt-get" ]; then
  command -v debootstrap >/dev/null || { echo "needs debootstrap on the host (apt-get install debootstrap)"; exit 1; }
  echo "--- debootstrap bookworm (minbase + ca-certificates git gcc libc6-dev) into $root"
  debootstrap --variant=minbase --include=ca-certificates,git,gcc,libc6-dev bookworm "$root" "$mirror" >"$dir/debootstrap.log"
fi
echo "--- the Rust toolchain, kubectl and a clone of $(git -C "$repo" rev-parse --short HEAD)"
mkdir -p "$root/root/.cargo" "$root/root/.rustup" "$root/usr/local/bin"
cp -a "$HOME/.cargo/bin" "$root/root/.cargo/"
tc="$(rustup show active-toolchain | cut -d' ' -f1)"
mkdir -p "$root/root/.rustup/toolchains"
cp -a "$HOME/.rustup/toolchains/$tc" "$root/root/.rustup/toolchains/"
cp -a "$HOME/.rustup/settings.toml" "$root/root/.rustup/" 2>/dev/null || true
cp -L "$(command -v kubectl)" "$root/usr/local/bin/kubectl"
# The tests also drive older and newer clients, installed beside kubectl (kubectl.1.27 ... 1.33).
for k in "$(dirname "$(readlink -f "$(command -v kubectl)")")"/kubectl.1.*; do
  if [ -e "$k" ]; then cp -L "$k" "$root/usr/local/bin/"; fi
done
cp /etc/resolv.conf "$root/etc/resolv.conf"
# A machine on this network trusts the CAs its administrator added (here: the egress proxy's);
# the chroot gets the same ones, nothing else.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null
fi
rm -rf "$root/src/kaji"; git clone -q "$repo" "$root/src/kaji"

# "/" inside the chroot must be a mount point of its own (ip netns makes it a slave mount), as on
# any real machine.
mount --bind "$root" "$root"; mounted+=("$root")
for m in proc sys dev; do
  mkdir -p "$root/$m"
done
mount -t proc proc "$root/proc"; mounted+=("$root/proc")
mount --rbind /sys "$root/sys"; mount --make-rslave "$root/sys"; mounted+=("$root/sys")
mount --rbind /dev "$root/dev"; mount --make-rslave "$root/dev"; mounted+=("$root/dev")
mount -t tmpfs tmpfs "$root/run"; mounted+=("$root/run")

# Each command runs as on a machine of its own: a private mount namespace whose root is the new
# root, entered with pivot_root (not chroot: in a chroot runc's pivot_root, user namespaces and
# podman --uidmap are refused, so tests of them failed only here). The old root is detached.
in_root() {
  unshare --mount --propagation private -- /bin/bash -c '
    set -e; cd "$1"; mkdir -p .oldroot; pivot_root . .oldroot; cd /
    exec /usr/bin/env -i HOME=/root PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      TERM="$2" RUSTUP_TOOLCHAIN="$3" /bin/bash -c "umount -l /.oldroot && rmdir /.oldroot && cd /src/kaji && $4"
  ' in_root "$root" "${TERM:-dumb}" "$tc" "$1"
}
if [ "$what" = lab ] || [ "$what" = both ]; then
  echo "--- README command 1"
  # The lab lives in the mount namespace it was started in: bring it down from the same one.
  in_root 'start=$(date +%s)
    scripts/deps.sh build && cargo build --release && ./target/release/kaji lab up && KUBECONFIG=/tmp/kaji-lab/kubeconfig kubectl get pods -n demo -o wide
    echo "=== README command 1: $(( $(date +%s) - start )) s"
    ./target/release/kaji lab down --purge'
fi
if [ "$what" = test ] || [ "$what" = both ]; then
  echo "--- README command 2"
  start=$(date +%s)
  in_root 'scripts/test'
  echo "=== README command 2: $(( $(date +%s) - start )) s"
fi
