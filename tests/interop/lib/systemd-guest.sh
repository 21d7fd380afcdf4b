#!/usr/bin/env bash
# systemd-guest: a whole Debian 12 system (systemd, udev, apt, dpkg, the kernel's
# nvme-tcp, nvme-cli) booted under QEMU, for tests that need what linux-nvme-peer's
# busybox initramfs has not: installing a .deb with apt, a systemd unit, a system
# user. tests/interop/package.sh installs Sluice's package in it.
#
#   systemd-guest.sh build        build the image unless it is cached (prints its dir)
#   systemd-guest.sh info         cache key, directory, whether it is built
#   systemd-guest.sh run [--timeout S] [--mem MiB] [--cpus N] [--out DIR] [--verbose] PAYLOAD_DIR
#       boots the image with PAYLOAD_DIR on a second disk and runs PAYLOAD_DIR/run.sh
#       (bash, as root, after the system has booted; $PAYLOAD is where the disk is
#       mounted, $GUEST_OUT a directory on it for artifacts). run.sh's output is
#       streamed on stdout; the exit status is run.sh's (124 timeout, 125 harness
#       error: the guest did not boot or report). With --out DIR: DIR/console.log (the
#       guest's serial console: kernel and systemd), DIR/test.log (run.sh's output),
#       DIR/guest-out/ (what run.sh wrote to $GUEST_OUT), DIR/qemu.log.
#   systemd-guest.sh shell        boots the image with the serial console on this
#                                 terminal (log in as root, no password; Ctrl-A X quits)
#   systemd-guest.sh clean        removes the cache
#
# The image: mmdebstrap (variant apt) of Debian bookworm with the packages in
# GUEST_PACKAGES, made into an ext4 disk image with mkfs.ext4 -d (no loop mount; the
# build runs as root, as the interop tests do: mmdebstrap's root mode, so that the
# files mkfs.ext4 copies are owned by root; booting needs no root), booted with its own kernel and
# initramfs (initramfs-tools with only virtio and ext4 modules: a small initramfs
# boots faster under software emulation). The guest has no network: what a test
# installs must already be there (the package's dependencies are in GUEST_PACKAGES),
# so an apt install works offline and proves it does. Every boot starts from the
# cached image (QEMU's snapshot=on; writes go to a throw-away overlay).
#
# A oneshot unit baked into the image (sluice-guest-run.service) mounts the payload
# disk (/dev/vdb) at /mnt/payload, runs run.sh with the output on the second serial
# port (ttyS1), prints "SLUICE-GUEST-EXIT: <status>" there and powers the guest off.
# The guest's own timeout is sluice.timeout= on the kernel command line.
#
# Cache: ${SLUICE_SYSTEMD_GUEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-systemd-guest}/<key>/,
# the key a hash of everything that goes into the image (suite, mirrors, packages, the
# files baked in); older keys are removed when a new one is built. About 1 GiB on disk
# (the image is sparse). Mirror: SLUICE_DEBIAN_MIRROR (default http://deb.debian.org/debian),
# SLUICE_DEBIAN_SECURITY_MIRROR (default http://deb.debian.org/debian-security).
# QEMU: SLUICE_QEMU (default qemu-system-x86_64); always TCG with -cpu max (this
# machine kind has no usable KVM; SLUICE_GUEST_ACCEL=kvm to try KVM elsewhere).
set -euo pipefail

SG_FORMAT=1   # bump when the image layout changes without the inputs below changing
SUITE=bookworm
MIRROR=${SLUICE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${SLUICE_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
CACHE_ROOT=${SLUICE_SYSTEMD_GUEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-systemd-guest}
QEMU=${SLUICE_QEMU:-qemu-system-x86_64}
ACCEL=${SLUICE_GUEST_ACCEL:-tcg}

# What the guest holds. Besides the system itself:
#   libc6, libgcc-s1, libssl3, adduser: what sluice_*.deb depends on (scripts/build-deb.sh's
#     Depends), so that `apt install ./sluice_*.deb` needs no network;
#     tests/interop/package.sh checks the package's Depends against the image;
#     init-system-helpers: the maintainer scripts' deb-systemd-helper (Essential anyway).
#   nvme-cli, kmod, linux-image-amd64 (nvme-tcp): the kernel's NVMe/TCP host.
#   jq: JSON answers of `sluice ... -o json` in the test scripts.
#   zstd: initramfs-tools' compressor.
GUEST_PACKAGES="systemd systemd-sysv udev dbus kmod linux-image-amd64 initramfs-tools zstd
  nvme-cli jq e2fsprogs
  libc6 libgcc-s1 libssl3 adduser init-system-helpers"

# --- files baked into the image -------------------------------------------------
# initramfs-tools: only the modules the root disk needs (MODULES=list and a hook).
read -r -d '' INITRAMFS_CONF <<'EOF' || true
# sluice systemd-guest: a small initramfs (virtio disk and ext4 only)
MODULES=list
COMPRESS=zstd
EOF
read -r -d '' INITRAMFS_HOOK <<'EOF' || true
#!/bin/sh
# sluice systemd-guest: the modules the root disk (/dev/vda, ext4 on virtio) needs
PREREQ=""
prereqs() { echo "$PREREQ"; }
case $1 in prereqs) prereqs; exit 0 ;; esac
. /usr/share/initramfs-tools/hook-functions
manual_add_modules virtio_pci virtio_blk ext4 crc32c_generic
EOF
# The runner: payload disk, run.sh, exit status, power off.
read -r -d '' GUEST_RUNNER <<'EOF' || true
#!/bin/sh
# sluice systemd-guest: run /mnt/payload/run.sh (the second disk), output and exit
# status on ttyS1, then power off. Started once at boot by sluice-guest-run.service.
exec >/dev/ttyS1 2>&1
stty -F /dev/ttyS1 -onlcr 2>/dev/null || true
limit=$(sed -n 's/.*sluice\.timeout=\([0-9][0-9]*\).*/\1/p' /proc/cmdline)
echo "sluice-guest: booted in $(cut -d' ' -f1 /proc/uptime) s ($(uname -r)); running run.sh (timeout ${limit:-600} s)"
rc=125
mkdir -p /mnt/payload
if mount -t ext4 /dev/vdb /mnt/payload; then
  mkdir -p /mnt/payload/out
  cd /mnt/payload || exit 125
  PAYLOAD=/mnt/payload GUEST_OUT=/mnt/payload/out timeout -k 10 "${limit:-600}" bash ./run.sh </dev/null
  rc=$?
  cd /
  sync
  umount /mnt/payload || { sleep 1; umount /mnt/payload; } || sync
else
  echo "sluice-guest: cannot mount the payload disk /dev/vdb"
fi
echo "SLUICE-GUEST-EXIT: $rc"
systemctl --no-block poweroff
EOF
read -r -d '' GUEST_UNIT <<'EOF' || true
[Unit]
Description=Sluice systemd-guest: run the test payload (/dev/vdb) and power off
ConditionPathExists=/dev/vdb

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/sluice-guest-run
TimeoutStartSec=infinity
StandardInput=null

[Install]
WantedBy=multi-user.target
EOF

# Units that only cost boot time in a guest that lives a minute or two.
MASKED_UNITS="apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service
  fstrim.timer systemd-timesyncd.service getty@tty1.service"

cache_key() {
  {
    echo "format=$SG_FORMAT suite=$SUITE mirror=$MIRROR security=$SECURITY_MIRROR"
    echo "packages=$(echo "$GUEST_PACKAGES" | tr -s '[:space:]' '\n' | LC_ALL=C sort -u | paste -sd' ')"
    echo "masked=$MASKED_UNITS"
    printf '%s\n' "$INITRAMFS_CONF" "$INITRAMFS_HOOK" "$GUEST_RUNNER" "$GUEST_UNIT"
  } | sha256sum | cut -c1-16
}
KEY=$(cache_key)
IMG_DIR=$CACHE_ROOT/$KEY

say() { echo "systemd-guest: $*" >&2; }
die() { say "ERROR: $*"; exit 125; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

need() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || [ -x "/usr/sbin/$c" ] || [ -x "/sbin/$c" ] ||
      die "'$c' is not installed (scripts/setup.sh installs it)"
  done
}

built() { [ -s "$IMG_DIR/image.env" ] && [ -s "$IMG_DIR/root.ext4" ] && [ -s "$IMG_DIR/vmlinuz" ]; }

# remove_tree DIR: rm -rf, but never into something mounted below DIR (a build that was
# killed may leave mmdebstrap's /proc, /sys or /dev mounts in its root filesystem)
remove_tree() {
  [ -e "$1" ] || return 0
  local mounts
  mounts=$(awk -v d="$1/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo)
  if [ -n "$mounts" ]; then
    echo "$mounts" | sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
    mounts=$(awk -v d="$1/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo)
    [ -z "$mounts" ] || die "cannot remove $1: still mounted below it: $mounts"
  fi
  rm -rf --one-file-system "$1"
}

# --- build ---------------------------------------------------------------------------
build() {
  need mmdebstrap mkfs.ext4 flock sha256sum
  mkdir -p "$CACHE_ROOT"
  exec 8>"$CACHE_ROOT/lock"
  flock -w 3600 8 || die "timed out waiting for the lock on $CACHE_ROOT"
  if built; then echo "$IMG_DIR"; return 0; fi
  local t0=$SECONDS work logf pkgs
  [ "$(id -u)" = 0 ] || die "building the image needs root (mmdebstrap --mode=root, so that the image's files belong to root)"
  work=$CACHE_ROOT/build.$KEY
  logf=$CACHE_ROOT/build.log
  remove_tree "$work"
  mkdir -p "$work/hooks"
  : >"$logf"
  say "building the Debian $SUITE systemd guest image (one-time, a few minutes; log: $logf)"
  printf '%s\n' "$INITRAMFS_CONF" >"$work/hooks/initramfs.conf"
  printf '%s\n' "$INITRAMFS_HOOK" >"$work/hooks/initramfs-hook"
  printf '%s\n' "$GUEST_RUNNER" >"$work/hooks/runner"
  printf '%s\n' "$GUEST_UNIT" >"$work/hooks/unit"
  # Before the kernel is installed (its postinst makes the initramfs): the small
  # initramfs configuration. After everything: runner, unit, masks, root without a
  # password (for `shell`), the installed package list.
  cat >"$work/hooks/essential.sh" <<EOF
set -e
mkdir -p "\$1/etc/initramfs-tools/conf.d" "\$1/etc/initramfs-tools/hooks"
cp "$work/hooks/initramfs.conf" "\$1/etc/initramfs-tools/conf.d/sluice-guest.conf"
install -m 0755 "$work/hooks/initramfs-hook" "\$1/etc/initramfs-tools/hooks/sluice-guest"
EOF
  cat >"$work/hooks/customize.sh" <<EOF
set -e
install -m 0755 "$work/hooks/runner" "\$1/usr/local/sbin/sluice-guest-run"
install -m 0644 "$work/hooks/unit" "\$1/etc/systemd/system/sluice-guest-run.service"
mkdir -p "\$1/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/sluice-guest-run.service "\$1/etc/systemd/system/multi-user.target.wants/"
for u in $(tr -s '[:space:]' ' ' <<<"$MASKED_UNITS"); do ln -sf /dev/null "\$1/etc/systemd/system/\$u"; done
echo sluice-guest >"\$1/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 sluice-guest\n::1 localhost ip6-localhost ip6-loopback\n' >"\$1/etc/hosts"
chroot "\$1" passwd --delete root >/dev/null
: >"\$1/etc/machine-id"
chroot "\$1" dpkg-query -W -f '\${Package} \${Version}\n' >"$work/packages.txt"
EOF
  pkgs=$(tr -s '[:space:]' ',' <<<"$GUEST_PACKAGES" | sed 's/^,//; s/,$//')
  # APT_CONFIG of a test (a private apt view) must not leak into mmdebstrap's apt.
  if ! env -u APT_CONFIG mmdebstrap --mode=root --variant=apt --include="$pkgs" \
      --essential-hook="sh $work/hooks/essential.sh \"\$1\"" \
      --customize-hook="sh $work/hooks/customize.sh \"\$1\"" \
      "$SUITE" "$work/rootfs" \
      "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
      "deb $SECURITY_MIRROR $SUITE-security main" >>"$logf" 2>&1; then
    tail -n 30 "$logf" | sed 's/^/  | /' >&2
    die "mmdebstrap failed (log: $logf)"
  fi
  local t_strap=$((SECONDS - t0)) kver vmlinuz initrd size_mib
  vmlinuz=$(find "$work/rootfs/boot" -maxdepth 1 -name 'vmlinuz-*' | LC_ALL=C sort | tail -n 1)
  [ -n "$vmlinuz" ] || die "no kernel in the image's /boot"
  kver=${vmlinuz##*/vmlinuz-}
  initrd=$work/rootfs/boot/initrd.img-$kver
  [ -s "$initrd" ] || die "no initramfs for $kver in the image's /boot"
  cp "$vmlinuz" "$work/vmlinuz"
  cp "$initrd" "$work/initrd.img"
  [ -d "$work/rootfs/lib/modules/$kver/kernel/drivers/nvme/host" ] ||
    die "the image's kernel $kver has no nvme host modules"
  # Room for what the tests install and write (namespaces on sparse files).
  size_mib=$(( $(du -sm "$work/rootfs" | cut -f1) + 1024 ))
  if ! mkfs.ext4 -q -F -L sluice-root -d "$work/rootfs" "$work/root.ext4" "${size_mib}M" >>"$logf" 2>&1; then
    tail -n 20 "$logf" | sed 's/^/  | /' >&2
    die "mkfs.ext4 -d failed (log: $logf)"
  fi
  remove_tree "$work/rootfs"
  rm -rf "$work/hooks"
  {
    echo "KEY=$KEY"
    echo "SUITE=$SUITE"
    echo "KERNEL=$kver"
    echo "PACKAGES=$(wc -l <"$work/packages.txt")"
    echo "IMAGE_MIB=$size_mib"
    echo "BUILD_SECONDS=$((SECONDS - t0))"
    echo "MMDEBSTRAP_SECONDS=$t_strap"
    echo "BUILT=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  } >"$work/image.env"
  # Only one image is kept: the new one replaces every older key.
  find "$CACHE_ROOT" -mindepth 1 -maxdepth 1 -type d ! -name "build.$KEY" -exec rm -rf {} +
  mv "$work" "$IMG_DIR"
  say "image ready in $((SECONDS - t0)) s (mmdebstrap ${t_strap} s): $IMG_DIR (kernel $kver, $(du -sm "$IMG_DIR" | cut -f1) MiB on disk)"
  echo "$IMG_DIR"
}

info() {
  echo "KEY=$KEY"
  echo "DIR=$IMG_DIR"
  if built; then sed 's/^/  /' "$IMG_DIR/image.env"; else echo "  (not built: systemd-guest.sh build)"; fi
}

# --- run -------------------------------------------------------------------------------
QEMU_PID='' RUN_DIR='' TAIL_PIDS=() KEEP_RUN=0
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$QEMU_PID" ] && kill -0 "$QEMU_PID" 2>/dev/null; then
    kill -TERM "$QEMU_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$QEMU_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$QEMU_PID" 2>/dev/null || true
  fi
  local p
  for p in "${TAIL_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -z "$RUN_DIR" ] || [ "$KEEP_RUN" = 1 ] || rm -rf "$RUN_DIR"
  exit "$rc"
}

qemu_base() {
  # shellcheck disable=SC2054  # the commas are QEMU's option syntax
  Q=("$QEMU" -name sluice-systemd-guest -machine pc -m "$MEM" -smp "$CPUS"
    -nodefaults -no-user-config -display none -vga none -no-reboot -nic none
    -kernel "$IMG_DIR/vmlinuz" -initrd "$IMG_DIR/initrd.img"
    -drive "file=$IMG_DIR/root.ext4,if=virtio,format=raw,snapshot=on")
  if [ "$ACCEL" = kvm ]; then Q+=(-accel kvm -cpu host); else Q+=(-accel tcg -cpu max); fi
}
APPEND_BASE="root=/dev/vda rw rootfstype=ext4 console=ttyS0 panic=1 systemd.firstboot=off fsck.mode=skip"

run() {
  local timeout=600 out='' verbose=0 payload
  MEM=1536 CPUS=2
  while [ $# -gt 0 ]; do
    case $1 in
      --timeout) timeout=$2; shift 2 ;;
      --mem) MEM=$2; shift 2 ;;
      --cpus) CPUS=$2; shift 2 ;;
      --out) out=$2; shift 2 ;;
      --verbose) verbose=1; shift ;;
      -*) die "run: unknown option $1" ;;
      *) break ;;
    esac
  done
  [ $# -eq 1 ] || die "run needs one PAYLOAD_DIR (try --help)"
  payload=$1
  [ -f "$payload/run.sh" ] || die "$payload/run.sh does not exist"
  need "$QEMU" mkfs.ext4 debugfs flock timeout
  built || die "the guest image is not built (key $KEY): run $0 build (scripts/setup.sh does)"
  trap cleanup EXIT
  trap 'say "interrupted"; exit 130' INT TERM
  RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sluice-systemd-guest.XXXXXX")
  if [ -n "$out" ]; then mkdir -p "$out"; out=$(cd "$out" && pwd); fi
  # the payload disk: run.sh and whatever the test brings, and room for its artifacts
  local size_mib
  size_mib=$(( $(du -sm "$payload" | cut -f1) + 128 ))
  mkfs.ext4 -q -F -L sluice-payload -d "$payload" "$RUN_DIR/payload.ext4" "${size_mib}M" >"$RUN_DIR/mkfs.log" 2>&1 ||
    die "mkfs.ext4 -d $payload failed: $(cat "$RUN_DIR/mkfs.log")"
  : >"$RUN_DIR/console.log"; : >"$RUN_DIR/test.log"
  exec 8>"$CACHE_ROOT/lock"
  flock -s -w 3600 8 || die "the image is locked by a build"
  qemu_base
  Q+=(-append "$APPEND_BASE sluice.timeout=$timeout"
    -drive "file=$RUN_DIR/payload.ext4,if=virtio,format=raw"
    -serial "file:$RUN_DIR/console.log" -serial "file:$RUN_DIR/test.log")
  printf '%q ' "${Q[@]}" >"$RUN_DIR/qemu.cmd"; echo >>"$RUN_DIR/qemu.cmd"
  local pre=()
  if setpriv --help 2>/dev/null | grep -q pdeathsig; then pre=(setpriv --pdeathsig TERM); fi
  local t0=$SECONDS
  # snapshot=on puts its overlay in TMPDIR
  TMPDIR=$RUN_DIR "${pre[@]}" "${Q[@]}" </dev/null >"$RUN_DIR/qemu.log" 2>&1 &
  QEMU_PID=$!
  tail -c +1 -s 0.2 -F --pid="$QEMU_PID" "$RUN_DIR/test.log" 2>/dev/null | tr -d '\r' &
  TAIL_PIDS+=($!)
  if [ "$verbose" = 1 ]; then
    tail -c +1 -s 0.2 -F --pid="$QEMU_PID" "$RUN_DIR/console.log" 2>/dev/null | tr -d '\r' | sed -u 's/^/[console] /' >&2 &
    TAIL_PIDS+=($!)
  fi
  # Bounded from outside too: boot, run.sh's own bound, power-off.
  local deadline=$((SECONDS + timeout + 180)) rc=''
  while kill -0 "$QEMU_PID" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      say "the guest did not finish within $((timeout + 180)) s: stopping QEMU"
      kill -TERM "$QEMU_PID" 2>/dev/null || true
      rc=124
      break
    fi
    sleep 0.5
  done
  wait "$QEMU_PID" 2>/dev/null || true
  QEMU_PID=''
  sleep 0.3  # let the tails print the last lines
  local took=$((SECONDS - t0)) status
  status=$(tr -d '\r' <"$RUN_DIR/test.log" | sed -n 's/^SLUICE-GUEST-EXIT: \([0-9][0-9]*\)$/\1/p' | tail -n 1)
  if [ -z "$rc" ]; then
    if [ -n "$status" ]; then rc=$status
    else
      rc=125
      say "the guest ended without reporting an exit status after $took s"
      say "---- qemu.log:"; sed 's/^/  /' "$RUN_DIR/qemu.log" >&2 || true
      say "---- last lines of the guest console:"
      tail -n 30 "$RUN_DIR/console.log" | tr -d '\r' | sed 's/^/  /' >&2 || true
    fi
  fi
  say "guest finished with status $rc after $took s (boot to run.sh: $(tr -d '\r' <"$RUN_DIR/test.log" | sed -n 's/^sluice-guest: booted in \([0-9.]*\) s.*/\1/p' | head -n 1) s of guest uptime)"
  if [ -n "$out" ]; then
    tr -d '\r' <"$RUN_DIR/console.log" >"$out/console.log"
    tr -d '\r' <"$RUN_DIR/test.log" >"$out/test.log"
    cp "$RUN_DIR/qemu.log" "$RUN_DIR/qemu.cmd" "$out/"
    rm -rf "$out/guest-out"
    if debugfs -R "rdump /out $RUN_DIR" "$RUN_DIR/payload.ext4" >"$RUN_DIR/debugfs.log" 2>&1 && [ -d "$RUN_DIR/out" ]; then
      mv "$RUN_DIR/out" "$out/guest-out"
    else
      say "no artifacts could be read from the payload disk (debugfs: $(tail -n 1 "$RUN_DIR/debugfs.log"))"
    fi
  fi
  return "$rc"
}

shell() {
  need "$QEMU"
  built || die "the guest image is not built: run $0 build"
  MEM=1536 CPUS=2
  exec 8>"$CACHE_ROOT/lock"
  flock -s -w 3600 8 || die "the image is locked by a build"
  qemu_base
  Q+=(-append "$APPEND_BASE" -serial mon:stdio)
  RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sluice-systemd-guest.XXXXXX")
  trap 'rm -rf "$RUN_DIR"' EXIT
  TMPDIR=$RUN_DIR "${Q[@]}"
}

case ${1:-} in
  build) build ;;
  info) info ;;
  run) shift; run "$@" ;;
  shell) shell ;;
  clean) remove_tree "$CACHE_ROOT"; say "removed $CACHE_ROOT" ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
