#!/usr/bin/env bash
# Interop: Sluice's Debian package in a real Debian 12 system with systemd.
#
# On this machine: scripts/build-deb.sh makes sluice_VERSION_amd64.deb from
# $SLUICE_BIN (with lintian when it is installed: no errors) and a second package,
# VERSION+test1, to install as an upgrade; dpkg-deb --info/--contents must show the
# binary, the unit (dist/sluice.service with the package's paths, nothing else
# changed), the man pages, the default config under /usr/share/sluice and no
# conffile for /etc/sluice/sluice.toml; every dependency must be in the guest image.
# In the guest (tests/interop/lib/systemd-guest.sh: Debian 12 booted with systemd
# under QEMU, no network; tests/interop/guest/package-guest.sh): `apt install
# ./sluice_*.deb`, the system user, /etc/sluice and its config (sluice:sluice 0600 in
# 0700), the unit enabled and active as user sluice; the guest's own kernel host
# discovers and connects to 127.0.0.1:4420 (nqn.2026-11.io.sluice:default) and a
# pattern written with dd (O_DIRECT) reads back; `sluice ns add` (root, the unit's
# socket) adds a second file namespace; `systemctl restart sluice` keeps both and the
# data; the config edited by hand survives `apt install --reinstall` and the upgrade
# byte for byte, and the restarted unit serves it; `apt remove` stops the unit and
# keeps config and data; `apt purge` removes /etc/sluice and /var/lib/sluice.
#
# Usage: tests/interop/package.sh
# Environment:
#   OUT=DIR          artifact root (default <repo>/target/interop); this test writes
#                    to DIR/package/ (deb/, guest.log, guest/, vm/console.log)
#   SLUICE_BIN=PATH  the sluice binary to package (default: the checked build,
#                    target/checked/release/sluice, when it exists; else a release build)
#   GUEST_TIMEOUT=S  bound for the guest's test script (default 600)
# The guest image is built once and cached (scripts/setup.sh builds it; a few
# minutes, see lib/systemd-guest.sh); without it this test builds it first.
# Functions here are called through host_check, which ShellCheck cannot see:
# shellcheck disable=SC2317
set -euo pipefail

TEST_NAME=package
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
INTEROP_REPO=$REPO
# shellcheck source=tests/interop/lib/common.sh
. "$REPO/tests/interop/lib/common.sh"

OUT_ROOT=${OUT:-$REPO/target/interop}
mkdir -p "$OUT_ROOT"
OUT_DIR=$(cd "$OUT_ROOT" && pwd)/$TEST_NAME
GUEST_TIMEOUT=${GUEST_TIMEOUT:-600}
SG=$REPO/tests/interop/lib/systemd-guest.sh
GUEST_SCRIPT=$REPO/tests/interop/guest/package-guest.sh
NQN=nqn.2026-11.io.sluice:default

HOST_OK=0 HOST_FAILED=() failures=()
host_ok() { HOST_OK=$((HOST_OK + 1)); echo "CHECK host-$1: ok${2:+ ($2)}"; }
host_fail() { HOST_FAILED+=("host-$1"); failures+=("host check $1 failed${2:+: $2}"); echo "CHECK host-$1: FAIL${2:+ ($2)}"; }
# host_check NAME OK-DETAIL FAIL-DETAIL CMD...
host_check() {
  local name=$1 yes=$2 no=$3
  shift 3
  if "$@"; then host_ok "$name" "$yes"; else host_fail "$name" "$no"; fi
}

# The package is amd64 and the guest an x86-64 system: elsewhere there is nothing to test.
arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
case $arch in
  amd64 | x86_64) ;;
  *) log "SKIP: the package is amd64 and this machine is $arch"; exit "$SKIP_STATUS" ;;
esac
for tool in dpkg-deb dpkg-shlibdeps help2man mmdebstrap mkfs.ext4 debugfs qemu-system-x86_64; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || [ -x "/sbin/$tool" ] ||
    die "'$tool' is not installed: run scripts/setup.sh"
done

rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR/deb" "$OUT_DIR/payload"
: >"$OUT_DIR/guest.log"
log "artifacts: $OUT_DIR"

# ---------------------------------------------------------------------------
# the packages
# ---------------------------------------------------------------------------
if [ -z "${SLUICE_BIN:-}" ] && [ -x "${CARGO_TARGET_DIR:-$REPO/target}/checked/release/sluice" ]; then
  SLUICE_BIN=${CARGO_TARGET_DIR:-$REPO/target}/checked/release/sluice
fi
use_sluice_binary
lintian_opt=()
if command -v lintian >/dev/null; then lintian_opt=(--lintian); fi
t0=$SECONDS
if DEB=$("$REPO/scripts/build-deb.sh" --bin "$SLUICE" --out "$OUT_DIR/deb" "${lintian_opt[@]}" 2>"$OUT_DIR/deb/build-deb.log" | tail -n 1) &&
    [ -f "$DEB" ]; then
  host_ok build-deb "$(basename "$DEB") in $((SECONDS - t0)) s$([ ${#lintian_opt[@]} -eq 0 ] || echo ", lintian: no errors, $(grep -c '^W: ' "$OUT_DIR/deb/lintian.txt" || true) warning(s)")"
else
  host_fail build-deb "scripts/build-deb.sh failed"
  tail_file "$OUT_DIR/deb/build-deb.log"
  finish_with_verdict "$TEST_NAME" "" "deb/build-deb.log"
fi
VERSION=$(dpkg-deb -f "$DEB" Version)
UPGRADE_VERSION=$VERSION+test1
if DEB_UP=$("$REPO/scripts/build-deb.sh" --bin "$SLUICE" --out "$OUT_DIR/deb" --version "$UPGRADE_VERSION" 2>"$OUT_DIR/deb/build-deb-upgrade.log" | tail -n 1) &&
    [ -f "$DEB_UP" ] && dpkg --compare-versions "$UPGRADE_VERSION" gt "$VERSION"; then
  host_ok build-deb-upgrade "$(basename "$DEB_UP"), a higher version than $VERSION"
else
  host_fail build-deb-upgrade "scripts/build-deb.sh --version $UPGRADE_VERSION failed"
  tail_file "$OUT_DIR/deb/build-deb-upgrade.log"
fi

bin_version=$("$SLUICE" --version | sed -n 's/^sluice //p')
host_check deb-name "$(basename "$DEB")" "$(basename "$DEB"), the binary says $bin_version" \
  [ "$(basename "$DEB")" = "sluice_${bin_version}_amd64.deb" ]
dpkg-deb --info "$DEB" >"$OUT_DIR/deb/info.txt"
dpkg-deb --contents "$DEB" >"$OUT_DIR/deb/contents.txt"
depends=$(dpkg-deb -f "$DEB" Depends)
suggests=$(dpkg-deb -f "$DEB" Suggests)
has_fields() {
  [ "$(dpkg-deb -f "$DEB" Package)" = sluice ] && [ "$(dpkg-deb -f "$DEB" Architecture)" = amd64 ] || return 1
  local p
  for p in libc6 libssl3 libgcc-s1 adduser; do grep -Eq "(^|, )$p( |,|$)" <<<"$depends" || return 1; done
  for p in librbd1 nvme-cli; do grep -Eq "(^|, )$p( |,|$)" <<<"$suggests" || return 1; done
}
host_check deb-control "Depends: $depends; Suggests: $suggests" "Depends: $depends; Suggests: $suggests" has_fields
in_contents() {  # in_contents MODE PATH: the package holds PATH with that mode, owned by root
  grep -Eq "^$1 root/root +[0-9]+ [0-9-]+ [0-9:]+ \\./${2#/}\$" "$OUT_DIR/deb/contents.txt"
}
missing=()
for entry in -rwxr-xr-x:/usr/bin/sluice -rw-r--r--:/lib/systemd/system/sluice.service \
    -rw-r--r--:/usr/share/sluice/sluice.toml -rw-r--r--:/usr/share/man/man1/sluice.1.gz \
    -rw-r--r--:/usr/share/man/man1/sluice-serve.1.gz -rw-r--r--:/usr/share/man/man1/sluice-ns.1.gz \
    -rw-r--r--:/usr/share/doc/sluice/copyright -rw-r--r--:/usr/share/doc/sluice/operations.md; do
  in_contents "${entry%%:*}" "${entry#*:}" || missing+=("${entry#*:}")
done
host_check deb-contents "binary, unit, default config, $(grep -c 'man1/.*\.1\.gz$' "$OUT_DIR/deb/contents.txt") man pages, docs" \
  "missing or wrong mode: ${missing[*]}" [ ${#missing[@]} -eq 0 ]
no_conffile() {
  ! grep -q '\./etc/' "$OUT_DIR/deb/contents.txt" || return 1
  ! dpkg-deb --ctrl-tarfile "$DEB" | tar -t | grep -qx './conffiles'
}
host_check deb-no-conffile "nothing under /etc, no conffiles" "$(grep '\./etc/' "$OUT_DIR/deb/contents.txt" | head -n 3)" no_conffile
scripts_there() {
  local s
  for s in postinst prerm postrm; do grep -Eq "^ +[0-9]+ bytes, +[0-9]+ lines +\\* +$s +#!/bin/sh" "$OUT_DIR/deb/info.txt" || return 1; done
}
host_check deb-maintainer-scripts "postinst, prerm, postrm" "$(grep -E 'post|pre' "$OUT_DIR/deb/info.txt")" scripts_there

# The unit is dist/sluice.service: every setting line the same, the paths the package's.
mkdir -p "$OUT_DIR/deb/root"
dpkg-deb -x "$DEB" "$OUT_DIR/deb/root"
unit_settings() { grep -v '^#' "$1" | grep -v '^$'; }
unit_diff=$(diff <(unit_settings "$REPO/dist/sluice.service" | sed 's|/usr/local/|/usr/|g') \
  <(unit_settings "$OUT_DIR/deb/root/lib/systemd/system/sluice.service") || true)
host_check unit-from-dist "$(grep '^ExecStart=' "$OUT_DIR/deb/root/lib/systemd/system/sluice.service" | cut -c1-60)..." \
  "differs: $(head -n 4 <<<"$unit_diff" | tr '\n' ' ')" [ -z "$unit_diff" ]
host_check default-config "/usr/share/sluice/sluice.toml is dist/sluice.toml" "differs from dist/sluice.toml" \
  cmp -s "$REPO/dist/sluice.toml" "$OUT_DIR/deb/root/usr/share/sluice/sluice.toml"
man_ok() { zcat "$OUT_DIR/deb/root/usr/share/man/man1/sluice.1.gz" | grep -q '^\.TH SLUICE "\{0,1\}1'; }
host_check man-page "sluice(1) from help2man" "sluice.1.gz is not a man page" man_ok
rm -rf "$OUT_DIR/deb/root"

# ---------------------------------------------------------------------------
# the guest image (cached; scripts/setup.sh builds it)
# ---------------------------------------------------------------------------
t0=$SECONDS
if ! "$SG" info | grep -q '^  BUILT='; then
  log "the systemd guest image is not built yet: building it (a few minutes, once; scripts/setup.sh does this)"
fi
if ! IMG_DIR=$("$SG" build 2>"$OUT_DIR/image-build.log" | tail -n 1); then
  tail_file "$OUT_DIR/image-build.log"
  die "building the systemd guest image failed ($SG build)"
fi
log "guest image: $IMG_DIR ($(sed -n 's/^KERNEL=//p' "$IMG_DIR/image.env"), $(sed -n 's/^PACKAGES=//p' "$IMG_DIR/image.env") packages; built in $(sed -n 's/^BUILD_SECONDS=//p' "$IMG_DIR/image.env") s; this step took $((SECONDS - t0)) s)"
# apt in the guest has no network: every dependency must be installed there already.
absent=()
dep_names=$(tr ',|' '\n' <<<"$depends" | sed 's/(.*//; s/ //g' | paste -sd' ')
for dep in $dep_names; do
  grep -q "^$dep " "$IMG_DIR/packages.txt" || absent+=("$dep")
done
host_check guest-has-deps "$dep_names" \
  "not in the guest image: ${absent[*]} (add them to GUEST_PACKAGES in $SG)" [ ${#absent[@]} -eq 0 ]

# ---------------------------------------------------------------------------
# the guest
# ---------------------------------------------------------------------------
payload=$OUT_DIR/payload
cp "$GUEST_SCRIPT" "$payload/run.sh"
cp "$REPO/tests/interop/guest/checks.sh" "$payload/checks.sh"
cp "$DEB" "$DEB_UP" "$payload/"
printf 'PKG_VERSION=%q\nUPGRADE_VERSION=%q\nNQN=%q\n' "$VERSION" "$UPGRADE_VERSION" "$NQN" >"$payload/env"
guest_rc=125
for attempt in 1 2; do
  log "booting the systemd guest (attempt $attempt; timeout ${GUEST_TIMEOUT}s; output: guest.log, details: guest/)"
  t_guest=$SECONDS
  set +e
  "$SG" run --timeout "$GUEST_TIMEOUT" --out "$OUT_DIR/vm" "$payload" </dev/null 2>&1 | tee "$OUT_DIR/guest.log"
  guest_rc=${PIPESTATUS[0]}
  set -e
  log "guest finished with status $guest_rc after $((SECONDS - t_guest))s"
  # A guest that died before the test script began (software emulation now and then
  # kills a kernel while it boots) is booted once more; one that ran checks is not.
  if [ "$guest_rc" -eq 125 ] && [ "$attempt" -eq 1 ] && ! grep -q '^CHECK ' "$OUT_DIR/guest.log"; then
    log "the guest never ran the test script: booting it once more"
    cp "$OUT_DIR/vm/console.log" "$OUT_DIR/console-attempt1.log" 2>/dev/null || true
    continue
  fi
  break
done
[ ! -d "$OUT_DIR/vm/guest-out" ] || mv "$OUT_DIR/vm/guest-out" "$OUT_DIR/guest"
rm -rf "$payload"

case $guest_rc in
  0) ;;
  124) failures+=("guest run timed out after ${GUEST_TIMEOUT}s") ;;
  125) failures+=("systemd guest harness/boot error (status 125; see vm/console.log)") ;;
  *) failures+=("guest checks failed (status $guest_rc)") ;;
esac
finish_with_verdict "$TEST_NAME" ", the package installed, restarted, reinstalled, upgraded, removed and purged in the systemd guest" \
  "guest.log, guest/*.txt, vm/console.log, deb/"
