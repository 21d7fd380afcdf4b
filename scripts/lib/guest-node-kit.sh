#!/usr/bin/env bash
# Builds the files a Kubernetes node needs beyond what the linux-nvme-peer guest has,
# so the CSI node service can run inside it: the ext4 modules of the guest's own
# kernel (the guest image has no disk filesystem), and e2fsprogs' mkfs.ext4, e2fsck
# and resize2fs with util-linux's blkid, with their libraries (the guest is Debian 12
# like this machine, so the host's binaries run there).
#
#   scripts/lib/guest-node-kit.sh DIR
#
# Writes DIR/modules/*.ko (in load order, listed in DIR/modules/order), DIR/bin and
# DIR/lib, and DIR/env.sh which, sourced in the guest, loads the modules and sets PATH
# and LD_LIBRARY_PATH. Copy DIR into the guest with `linux-nvme-peer --add DIR:/root/kit`.
# The kernel package (about 70 MiB) is downloaded once per kernel release and cached
# under ${KIT_CACHE_DIR:-~/.cache/sluice-guest-kit}.
set -euo pipefail

die() { echo "guest-node-kit.sh: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: guest-node-kit.sh DIR"
kit=$1
lnp=${LNP:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)/shared/linux-nvme-peer}
[ -x "$lnp" ] || die "linux-nvme-peer not found at $lnp (set LNP)"

# The guest's kernel: the modules must be built for exactly that release.
info=$("$lnp" info 2>&1) || die "linux-nvme-peer info failed: $info"
release=$(sed -n 's/^ *KERNEL_RELEASE=//p' <<<"$info")
package=$(sed -n 's/^ *KERNEL_PKG=//p' <<<"$info")
{ [ -n "$release" ] && [ -n "$package" ]; } || die "no kernel release in linux-nvme-peer info (build its image first: $lnp build)"

cache=${KIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-guest-kit}/$release
if [ ! -f "$cache/modules/order" ]; then
  mkdir -p "$cache"
  work=$(mktemp -d "$cache/build.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && apt-get download "$package" >"$work/apt.log" 2>&1) ||
    die "cannot download $package (the guest's kernel) from the Debian mirror: $(tail -n 3 "$work/apt.log")"
  dpkg-deb -x "$work"/*.deb "$work/root"
  depmod -b "$work/root" "$release"
  mkdir -p "$work/modules"
  # The dependencies of ext4 in load order; the guest already has the crc32c ones.
  modprobe -d "$work/root" -S "$release" --show-depends ext4 | awk '$1 == "insmod" { print $2 }' |
    while read -r module; do
      name=$(basename "$module")
      case $name in crc32c*) continue ;; esac
      cp "$module" "$work/modules/$name"
      echo "$name" >>"$work/modules/order"
    done
  [ -s "$work/modules/order" ] || die "no ext4 module in $package"
  rm -rf "$cache/modules" && mv "$work/modules" "$cache/modules"
  rm -rf "$work"
  trap - EXIT
fi

mkdir -p "$kit/bin" "$kit/lib"
rm -rf "$kit/modules" && cp -r "$cache/modules" "$kit/modules"
for tool in mkfs.ext4 e2fsck resize2fs blkid; do
  path=$(PATH=/usr/sbin:/sbin:$PATH command -v "$tool") || die "$tool is missing here (Debian: e2fsprogs, util-linux)"
  cp -L "$path" "$kit/bin/$tool"
  # Every library the tool needs except those the guest has (libc, the loader).
  ldd "$path" | awk '$3 ~ /^\// { print $3 }' | while read -r library; do
    case $(basename "$library") in libc.so.* | ld-linux*) continue ;; esac
    cp -L "$library" "$kit/lib/"
  done
done

cat >"$kit/env.sh" <<'EOF'
# Sourced in the guest (busybox sh): loads the ext4 modules, puts the tools first.
kit_dir=${KIT_DIR:-/root/kit}
while read -r module; do
  insmod "$kit_dir/modules/$module" 2>/dev/null || grep -q "^${module%.ko} " /proc/modules ||
    { echo "guest kit: insmod $module failed" >&2; return 1; }
done <"$kit_dir/modules/order"
export PATH="$kit_dir/bin:$PATH" LD_LIBRARY_PATH="$kit_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
EOF
echo "guest-node-kit.sh: $kit ready (kernel $release: $(tr '\n' ' ' <"$kit/modules/order"))"
