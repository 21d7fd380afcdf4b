#!/usr/bin/env bash
# Install everything Sluice's tests and run command need on a fresh Debian 12 machine.
#
# Idempotent and quiet: only what is missing gets installed, details go to a log
# file, and the script ends with a one-line summary. Fails with an actionable
# message (and the tail of the log) when something cannot be installed.
#
#   scripts/setup.sh            install what is missing
#   scripts/setup.sh --check    only report what is missing (exit 1 if anything is)
#
# Environment:
#   SETUP_LOG         log file (default: <repo>/target/setup/setup.log)
#   SETUP_NO_FUZZ=1   do not install cargo-fuzz / the nightly toolchain
#   SETUP_NO_PEER=1   do not build the linux-nvme-peer guest image
#   SETUP_NO_SYSTEMD_GUEST=1  do not build the systemd guest image (tests/interop/package.sh)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOG=${SETUP_LOG:-$REPO/target/setup/setup.log}
CHECK_ONLY=0
case "${1:-}" in
  --check) CHECK_ONLY=1 ;;
  -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "setup.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac

mkdir -p "$(dirname "$LOG")"
: >"$LOG"
t0=$(date +%s)

die() {
  echo "setup.sh: ERROR: $*" >&2
  if [ -s "$LOG" ]; then
    echo "setup.sh: last lines of $LOG:" >&2
    tail -n 25 "$LOG" | sed 's/^/  | /' >&2
  fi
  exit 1
}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"
  else die "need root (or passwordless sudo) to run: $*"; fi
}

have_cmd() {  # like command -v, but also looks in the sbin directories; /path: a file
  case $1 in /*) [ -e "$1" ]; return ;; esac
  command -v "$1" >/dev/null 2>&1 && return 0
  local d
  for d in /usr/sbin /sbin /usr/local/sbin; do [ -x "$d/$1" ] && return 0; done
  return 1
}

installed=()   # what this run installed
missing=()     # (--check) what is missing

# ---------------------------------------------------------------------------
# Debian packages: "command:package" (the command proves the package is there).
#   qemu-system-x86, cpio, kmod, xz-utils, zstd, gzip, util-linux, coreutils,
#   dpkg and libc-bin are what ../shared/linux-nvme-peer needs on the host (it
#   would install them itself; pre-installing keeps the test output quiet).
#   fio, nvme-cli: copied into the peer's guest from the host.
#   tshark: capture + NVMe/TCP dissection in the interop tests.
#   jq: JSON in scripts; iproute2 (ss): waiting for listening ports;
#   ShellCheck and python3: harness stage of scripts/test.sh (lint, capture
#   self-test); g++ / make: libFuzzer (cargo-fuzz); gcc: the C smoke test of the
#   host C ABI; dpkg-dev (dpkg-source): `apt-get source fio` for the fio engine's
#   headers; chromium: headless rendering check of the benchmark HTML report.
#   tgt (tgtd, tgtadm), libiscsi-bin and libiscsi-dev: `sluice bench --compare iscsi`
#   (Debian's userspace iSCSI target, and the libiscsi initiator that fio's libiscsi
#   engine is built against; an entry that starts with / is a file, not a command).
#   ceph-mon, ceph-osd, ceph-common, librbd-dev, librados-dev: the one-node Ceph
#   cluster (../shared/ceph-single-node.sh) behind the RBD backend's tests and the
#   librbd/librados the `rbd` backend loads at run time (fio's rbd engine comes with fio).
#   libssl-dev, pkg-config: OpenSSL 3 for NVMe/TCP's TLS (the openssl crates link the
#   system's libssl3); gnutls-bin (gnutls-cli): the TLS peer of the TLS tests, from the
#   library Linux's tlshd handshakes with.
#   e2fsprogs (mkfs.ext4, e2fsck, resize2fs) and util-linux (blkid): what the CSI node
#   service runs; scripts/lib/guest-node-kit.sh copies them into the peer's guest.
#   help2man (man pages from --help), lintian and dpkg-dev (dpkg-shlibdeps):
#   scripts/build-deb.sh, the Debian package; mmdebstrap, e2fsprogs (mkfs.ext4 -d,
#   debugfs): the systemd guest image tests/interop/package.sh installs it in
#   (tests/interop/lib/systemd-guest.sh).
#   prometheus (prometheus, promtool) and python3-yaml: the alert rules' checks and
#   unit tests (scripts/test-alert-rules.sh) and the real Prometheus of
#   tests/interop/monitoring.sh.
# ---------------------------------------------------------------------------
APT_TOOLS="qemu-system-x86_64:qemu-system-x86 fio:fio nvme:nvme-cli tshark:tshark
  cpio:cpio kmod:kmod depmod:kmod xz:xz-utils zstd:zstd gzip:gzip jq:jq ss:iproute2
  flock:util-linux timeout:coreutils dpkg-deb:dpkg ldd:libc-bin shellcheck:shellcheck
  g++:g++ make:make cc:gcc python3:python3 dpkg-source:dpkg-dev chromium:chromium
  tgtd:tgt tgtadm:tgt iscsi-inq:libiscsi-bin /usr/include/iscsi/iscsi.h:libiscsi-dev
  ceph-mon:ceph-mon ceph-osd:ceph-osd ceph:ceph-common rbd:ceph-common
  /usr/include/rbd/librbd.h:librbd-dev /usr/include/rados/librados.h:librados-dev
  /usr/include/openssl/ssl.h:libssl-dev pkg-config:pkg-config gnutls-cli:gnutls-bin
  mkfs.ext4:e2fsprogs resize2fs:e2fsprogs blkid:util-linux debugfs:e2fsprogs
  help2man:help2man lintian:lintian dpkg-shlibdeps:dpkg-dev mmdebstrap:mmdebstrap
  prometheus:prometheus promtool:prometheus /usr/lib/python3/dist-packages/yaml/__init__.py:python3-yaml"

apt_missing=()
for entry in $APT_TOOLS; do
  cmd=${entry%%:*} pkg=${entry#*:}
  if ! have_cmd "$cmd"; then
    case " ${apt_missing[*]-} " in *" $pkg "*) ;; *) apt_missing+=("$pkg") ;; esac
  fi
done

if [ ${#apt_missing[@]} -gt 0 ]; then
  if [ "$CHECK_ONLY" = 1 ]; then
    missing+=("${apt_missing[@]}")
  else
    have_cmd apt-get || die "missing packages and no apt-get on this machine: ${apt_missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # tshark's wireshark-common asks whether non-root users may capture; answer
    # "no" up front (the tests run as root) so the install never prompts.
    echo "wireshark-common wireshark-common/install-setuid boolean false" |
      as_root debconf-set-selections >>"$LOG" 2>&1 || true
    apt_install() {
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends -o Dpkg::Options::=--force-confdef \
        -o Dpkg::Options::=--force-confold "${apt_missing[@]}" >>"$LOG" 2>&1
    }
    # Refresh the package lists first when they are missing or older than a day.
    newest_list=$(stat -c %Y /var/lib/apt/lists/*_InRelease 2>/dev/null | sort -n | tail -n 1)
    if [ -z "$newest_list" ] || [ $(( $(date +%s) - newest_list )) -gt 86400 ]; then
      echo "+ apt-get update" >>"$LOG"
      as_root apt-get update -q >>"$LOG" 2>&1 || die "apt-get update failed: check the network / apt sources"
    fi
    echo "+ apt-get install ${apt_missing[*]}" >>"$LOG"
    if ! apt_install; then
      # stale lists are the usual cause: update once and retry
      echo "+ apt-get update (retry)" >>"$LOG"
      as_root apt-get update -q >>"$LOG" 2>&1 || die "apt-get update failed: check the network / apt sources"
      apt_install || die "apt-get install ${apt_missing[*]} failed; run it by hand to see why"
    fi
    for entry in $APT_TOOLS; do
      cmd=${entry%%:*}
      have_cmd "$cmd" || die "'$cmd' is still missing after installing ${apt_missing[*]}"
    done
    installed+=("apt: ${apt_missing[*]}")
  fi
fi

# ---------------------------------------------------------------------------
# Rust: stable with rustfmt (fmt stage) and clippy (clippy stage), nightly + cargo-fuzz (fuzz stage).
# ---------------------------------------------------------------------------
if [ -d "$HOME/.cargo/bin" ] && [[ ":$PATH:" != *":$HOME/.cargo/bin:"* ]]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
have_cmd cargo || die "cargo not found: install Rust with rustup (https://rustup.rs) and re-run"
have_cmd rustup || die "rustup not found: the fuzz stage needs rustup to manage the nightly toolchain"

if ! cargo fmt --version >/dev/null 2>&1; then
  if [ "$CHECK_ONLY" = 1 ]; then missing+=("rustup component rustfmt")
  else
    echo "+ rustup component add rustfmt" >>"$LOG"
    rustup component add rustfmt >>"$LOG" 2>&1 || die "rustup component add rustfmt failed"
    installed+=("rustfmt")
  fi
fi

if ! cargo clippy --version >/dev/null 2>&1; then
  if [ "$CHECK_ONLY" = 1 ]; then missing+=("rustup component clippy")
  else
    echo "+ rustup component add clippy" >>"$LOG"
    rustup component add clippy >>"$LOG" 2>&1 || die "rustup component add clippy failed"
    installed+=("clippy")
  fi
fi

if [ "${SETUP_NO_FUZZ:-0}" != 1 ]; then
  if ! rustup toolchain list | grep '^nightly' >/dev/null; then
    if [ "$CHECK_ONLY" = 1 ]; then missing+=("nightly toolchain")
    else
      echo "+ rustup toolchain install nightly --profile minimal" >>"$LOG"
      rustup toolchain install nightly --profile minimal >>"$LOG" 2>&1 ||
        die "rustup toolchain install nightly failed (needed by cargo-fuzz)"
      installed+=("nightly")
    fi
  fi
  if ! cargo fuzz --version >/dev/null 2>&1; then
    if [ "$CHECK_ONLY" = 1 ]; then missing+=("cargo-fuzz")
    else
      echo "+ cargo install cargo-fuzz --locked" >>"$LOG"
      # built in its own target dir so it never races the workspace build
      CARGO_TARGET_DIR="${TMPDIR:-/tmp}/cargo-fuzz-install" \
        cargo install cargo-fuzz --locked >>"$LOG" 2>&1 ||
        die "cargo install cargo-fuzz --locked failed (needs crates.io access and a C compiler)"
      rm -rf "${TMPDIR:-/tmp}/cargo-fuzz-install"
      installed+=("cargo-fuzz")
    fi
  fi
fi

# ---------------------------------------------------------------------------
# csi-sanity (kubernetes-csi/csi-test), the CSI conformance suite scripts/csi-sanity.sh
# and the csi-node interop test run against sluice-csi. It comes from the Go module
# proxy with `go install` (about 30 s once; a static binary). The pinned version is the
# one the tests were written against (scripts/lib/csi-sanity.sh).
# ---------------------------------------------------------------------------
# shellcheck source=scripts/lib/csi-sanity.sh
. "$REPO/scripts/lib/csi-sanity.sh"
CSI_SANITY=${CSI_SANITY:-$REPO/target/csi-tools/csi-sanity}
if [ ! -x "$CSI_SANITY" ]; then
  if [ "$CHECK_ONLY" = 1 ]; then missing+=("csi-sanity")
  else
    echo "+ go install github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@$CSI_SANITY_VERSION" >>"$LOG"
    install_csi_sanity "$CSI_SANITY" >>"$LOG" 2>&1 ||
      die "installing csi-sanity $CSI_SANITY_VERSION failed (needs Go 1.22+ and the Go module proxy)"
    installed+=("csi-sanity")
  fi
fi

# ---------------------------------------------------------------------------
# The linux-nvme-peer guest image (kernel + initramfs, cached; ~40 s to build on a
# fresh machine, a no-op afterwards). The script lives next to the repository.
# ---------------------------------------------------------------------------
LNP=${LNP:-$REPO/../shared/linux-nvme-peer}
if [ "${SETUP_NO_PEER:-0}" != 1 ]; then
  if [ ! -x "$LNP" ]; then
    if [ "$CHECK_ONLY" = 1 ]; then missing+=("linux-nvme-peer ($LNP)")
    else die "linux-nvme-peer not found at $LNP: the interop tests expect ../shared/ next to the repository"; fi
  elif ! { "$LNP" info 2>/dev/null || true; } | grep '^ *BUILT=' >/dev/null; then
    if [ "$CHECK_ONLY" = 1 ]; then missing+=("linux-nvme-peer guest image")
    else
      echo "+ $LNP build" >>"$LOG"
      "$LNP" build >>"$LOG" 2>&1 || die "building the linux-nvme-peer guest image failed ($LNP build)"
      installed+=("linux-nvme-peer guest image")
    fi
  fi
fi

# ---------------------------------------------------------------------------
# The systemd guest image of tests/interop/package.sh (Debian 12 with systemd and apt,
# made with mmdebstrap and cached under ~/.cache/sluice-systemd-guest; about 2 min and
# 120 MB of packages from deb.debian.org on a fresh machine, a no-op afterwards).
# ---------------------------------------------------------------------------
SYSTEMD_GUEST=$REPO/tests/interop/lib/systemd-guest.sh
if [ "${SETUP_NO_SYSTEMD_GUEST:-0}" != 1 ] && [ "$(id -u)" != 0 ]; then
  echo "systemd guest image: not built (building it needs root; tests/interop/package.sh needs it)" >>"$LOG"
elif [ "${SETUP_NO_SYSTEMD_GUEST:-0}" != 1 ]; then
  if ! "$SYSTEMD_GUEST" info 2>/dev/null | grep '^ *BUILT=' >/dev/null; then
    if [ "$CHECK_ONLY" = 1 ]; then missing+=("systemd guest image")
    else
      echo "+ $SYSTEMD_GUEST build" >>"$LOG"
      "$SYSTEMD_GUEST" build >>"$LOG" 2>&1 || die "building the systemd guest image failed ($SYSTEMD_GUEST build)"
      installed+=("systemd guest image")
    fi
  fi
fi

# ---------------------------------------------------------------------------
elapsed=$(( $(date +%s) - t0 ))
if [ "$CHECK_ONLY" = 1 ]; then
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: missing: ${missing[*]} (run scripts/setup.sh)"
    exit 1
  fi
  echo "setup: everything is installed"
  exit 0
fi
if [ ${#installed[@]} -gt 0 ]; then
  summary=$(printf '%s; ' "${installed[@]}")
  summary=${summary%; }
  echo "setup: installed ${summary} in ${elapsed}s (log: $LOG)"
else
  echo "setup: all tools present (qemu, fio, nvme-cli, tshark, tgt, libiscsi, ceph, shellcheck, rustfmt, clippy, nightly, cargo-fuzz, csi-sanity, peer image, systemd guest image) in ${elapsed}s"
fi
