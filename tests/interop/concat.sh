#!/usr/bin/env bash
# Interop: secure channel concatenation (TP 8018, `nvme connect --concat`) between
# the real Linux kernel host and `sluice serve`.
#
# Sluice serves one subsystem on a listener with tls = "optional"; the guest's host
# NQN has a DH-HMAC-CHAP secret (SHA-256 transform) and concat = true, no tls_key.
# `nvme connect --concat --dhchap-secret` makes the host authenticate on a plain
# admin queue with SC_C = NEWTLSPSK; both sides generate a TLS PSK from the
# DH-HMAC-CHAP session key and challenges, and the host reconnects the admin queue
# and its I/O queues over TLS 1.3 with it (identity NVMe1G01 <host> <subsystem>
# <digest>). Only Linux 6.15 and later have --concat: the guest runs Debian
# trixie-backports' 7.3 kernel, whose split packages lib/merged-kernel.sh merges
# into one for linux-nvme-peer, with Debian trixie's tlshd, nvme-cli 2.13 and keyctl
# and the kTLS modules of that kernel (lib/trixie-tls-tools.sh; what the TLS tests
# share is in lib/tls-guest.sh). One guest boot:
#   1. `nvme connect --concat --dhchap-secret WRONG`: authentication fails, no
#      controller is left;
#   2. `nvme connect --concat --dhchap-secret SECRET`: the controller goes live over
#      TLS; its sysfs tls_key names a generated PSK (`NVMe1G01 <host> <subsystem>
#      <digest>` in the keyring); 64 KiB of canary text written and read back, fio
#      writes 8 MiB (4 KiB random) and verifies it (crc32c); `nvme disconnect`;
#   3. Sluice's own host against the Linux kernel target's concatenation, in the
#      same guest: nvmet on the guest's loopback (port with addr_tsas tls1.3,
#      addr_treq "not required", the host with a dhchap_key and dhchap_dhgroup
#      ffdhe2048: nvmet's default null group refuses concatenation), `sluice write/read
#      --concat` with a data check, and a wrong secret that fails.
# On this machine, sluice.log must show: the negotiation with NewTlsPsk, the PSK
# generated for the host, the generated PSK found by the TLS handshakes (admin and
# I/O queues), queues connected over it without a second DH-HMAC-CHAP, the wrong
# secret's failed authentication, no key material; sluice stops cleanly.
# Exit 77 (skipped) when Debian's archive cannot be reached to build the tools or the
# guest image the first time.
#
# Usage: tests/interop/concat.sh
# Environment:
#   OUT=DIR           artifact root (default <repo>/target/interop); writes DIR/concat/
#   SLUICE_BIN=PATH   sluice binary (default: build target/release/sluice)
#   GUEST_TIMEOUT=S   bound for the guest run (default 400)
#   SLUICE_MERGED_KERNEL_CACHE: see lib/merged-kernel.sh; SLUICE_TLS_TOOLS_CACHE,
#   SLUICE_DEBIAN_MIRROR: see lib/trixie-tls-tools.sh
# Functions here are also called indirectly (traps, wait_for):
# shellcheck disable=SC2317
set -euo pipefail

TEST_NAME=concat
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
INTEROP_REPO=$REPO
# shellcheck source=tests/interop/lib/common.sh
. "$REPO/tests/interop/lib/common.sh"
# shellcheck source=tests/interop/lib/trixie-tls-tools.sh
. "$REPO/tests/interop/lib/trixie-tls-tools.sh"
# shellcheck source=tests/interop/lib/merged-kernel.sh
. "$REPO/tests/interop/lib/merged-kernel.sh"
# shellcheck source=tests/interop/lib/tls-guest.sh
. "$REPO/tests/interop/lib/tls-guest.sh"

OUT_ROOT=${OUT:-$REPO/target/interop}
mkdir -p "$OUT_ROOT"
OUT_DIR=$(cd "$OUT_ROOT" && pwd)/$TEST_NAME
GUEST_TIMEOUT=${GUEST_TIMEOUT:-400}
SUBNQN=nqn.2026-11.io.sluice:concat
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:6a7f0c1e-0000-4000-8000-0000000c0ca7
NS_SIZE_MIB=64
SUITE=trixie-backports

TARGET_PID='' TARGET_NAME=''
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$TARGET_PID" ] && { stop_pid "$TARGET_PID" "$TARGET_NAME" 20 TERM || true; }
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR/peer"
skip_test() { record_skip "$1" "$2"; exit "$SKIP_STATUS"; }

# ---------------------------------------------------------------------------
# prerequisites: the 7.3 guest and the trixie TLS tools (both cached)
# ---------------------------------------------------------------------------
tls_prerequisites "$SUITE" use_merged_kernel_peer "$SUITE"

# ---------------------------------------------------------------------------
# secrets, configuration, target
# ---------------------------------------------------------------------------
# As nvme-cli makes them (transformed with SHA-256); fixed fallbacks keep the test
# runnable without nvme-cli on this machine.
SECRET=$(nvme gen-dhchap-key -m 1 -l 32 -n "$HOSTNQN" 2>/dev/null ||
  echo 'DHHC-1:01:B46EA9NPfwA9odngcp0p1uBz8sbm6jki4Bcycn2xBlah1I03:')
WRONG=$(nvme gen-dhchap-key -m 1 -l 32 -n "$HOSTNQN" 2>/dev/null ||
  echo 'DHHC-1:01:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj/jBqb2:')
[ "$SECRET" != "$WRONG" ] || die "the two DH-HMAC-CHAP secrets are the same"
CANARY="SLUICE-CONCAT-CLEARTEXT-CANARY-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"

tls_serve_sluice optional concat "dhchap_secret = \"$SECRET\"" 'concat = true'

# ---------------------------------------------------------------------------
# the guest
# ---------------------------------------------------------------------------
{
  tls_guest_sh concat host
  cat <<'EOF'

echo "kernel $(uname -r); $(nvme version | tr '\n' ' '); $(fio --version)"
check ktls-modules ok 60 sh -c 'depmod -a && modprobe -a tls gcm nvme_tcp nvme_auth'
start_tlshd

# 1. the wrong secret: DH-HMAC-CHAP on the plain admin queue fails
echo "=== 1. nvme connect --concat --dhchap-secret WRONG"
refused wrong-secret --concat --dhchap-secret "$WRONG_SECRET"

# 2. concatenation: generated PSK, TLS, canary, fio verify, disconnect
echo "=== 2. nvme connect --concat --dhchap-secret SECRET"
concat_device() {
  echo "sysfs tls_key $serial; keyring: $desc"
  case $desc in
    "NVMe1G01 $LNP_HOSTNQN $LNP_SUBNQN "?*) ok generated-psk-identity "$desc" ;;
    *) bad generated-psk-identity "key '$serial' is '$desc', expected NVMe1G01 $LNP_HOSTNQN $LNP_SUBNQN <digest>"
       grep ' psk ' /proc/keys ;;
  esac
  canary_io "$dev" 256
  fio_verify "$dev" concat-randwrite 8m
}
connected concat 120 concat_device --concat --dhchap-secret "$SECRET"

# 3. Sluice's host against nvmet's concatenation (the guest's loopback)
kernel_target_concat() {
  S=/sys/kernel/config/nvmet
  modprobe nvmet && modprobe nvmet_tcp || { bad kt-setup "nvmet modules"; return; }
  ip link set lo up 2>/dev/null
  mkdir -p /kt && mount -t tmpfs -o size=40m tmpfs /kt && dd if=/dev/zero of=/kt/ns1.img bs=1048576 count=0 seek=32 2>/dev/null
  sub=$S/subsystems/$KT_NQN h=$S/hosts/$LNP_HOSTNQN pd=$S/ports/9
  { mkdir "$sub" && echo 0 >"$sub/attr_allow_any_host" && mkdir "$sub/namespaces/1" &&
    printf /kt/ns1.img >"$sub/namespaces/1/device_path" && echo 1 >"$sub/namespaces/1/buffered_io" &&
    echo 1 >"$sub/namespaces/1/enable"; } || { bad kt-setup "subsystem"; return; }
  # nvmet uses the host's configured dhchap_dhgroup whatever the host offers, and its
  # default (null) refuses concatenation ("concatenation mismatch"): name a group.
  { mkdir "$h" && echo "$SECRET" >"$h/dhchap_key" && echo ffdhe2048 >"$h/dhchap_dhgroup" &&
    ln -s "$h" "$sub/allowed_hosts/"; } ||
    { bad kt-setup "host"; return; }
  { mkdir "$pd" && echo tcp >"$pd/addr_trtype" && echo ipv4 >"$pd/addr_adrfam" &&
    echo 127.0.0.1 >"$pd/addr_traddr" && echo 4421 >"$pd/addr_trsvcid" && echo tls1.3 >"$pd/addr_tsas" &&
    echo "not required" >"$pd/addr_treq" && ln -s "$sub" "$pd/subsystems/$KT_NQN"; } ||
    { bad kt-setup "port (addr_tsas tls1.3, addr_treq not required)"; return; }
  ok kt-setup "nvmet port 4421: tsas $(cat "$pd/addr_tsas"), treq $(cat "$pd/addr_treq")"
  K="-a 127.0.0.1 -s 4421 -n $KT_NQN -q $LNP_HOSTNQN"
  dd if=/dev/urandom of=/tmp/kt-pattern bs=4096 count=64 2>/dev/null
  check kt-sluice-concat-write ok 120 /root/sluice write $K --concat --dhchap-secret "$SECRET" -N 1 -b 8 -d /tmp/kt-pattern
  check kt-sluice-concat-read ok 120 /root/sluice read $K --concat --dhchap-secret "$SECRET" -N 1 -b 8 -z 256k -d /tmp/kt-back
  if cmp -s /tmp/kt-pattern /tmp/kt-back; then ok kt-sluice-concat-data "256 KiB read back"
  else bad kt-sluice-concat-data "read back differs"; fi
  n_tls=$(dmesg | grep -c "subsystem $KT_NQN for NQN .*, TLS\\.$")
  if [ "$n_tls" -ge 2 ]; then ok kt-nvmet-tls-controllers "$n_tls nvmet controllers over the generated PSK"
  else bad kt-nvmet-tls-controllers "$n_tls nvmet controllers over TLS, expected one per sluice run"; fi
  check kt-sluice-concat-wrong-secret fail 120 /root/sluice connect $K --concat --dhchap-secret "$WRONG_SECRET"
  dmesg | grep -i 'nvmet' | tail -n 12
}
echo "=== 3. sluice --concat against the Linux kernel target"
if [ -x /root/sluice ]; then kernel_target_concat; else bad kt-sluice "no /root/sluice in the guest"; fi

tlshd_handshakes 'NVMe1G01 ' '' "TLS 1.3, generated identity"
guest_exit 'nvme|tls|handshake|concat' 25
EOF
} >"$OUT_DIR/guest.sh"

guest_env="SECRET='$SECRET' WRONG_SECRET='$WRONG' CANARY='$CANARY' KT_NQN=nqn.2026-11.io.sluice:kernel-target-concat"
# Sluice's host runs in the guest too (against nvmet there): a stripped copy, with
# the libraries the guest image lacks (this machine's: the same Debian release).
strip -o "$OUT_DIR/sluice-guest" "$SLUICE" 2>/dev/null || cp "$SLUICE" "$OUT_DIR/sluice-guest"
guest_adds=(--add "$OUT_DIR/guest.sh:/root/concat-guest.sh" --add "$OUT_DIR/sluice-guest:/root/sluice")
for lib in libgcc_s.so.1 libssl.so.3 libcrypto.so.3; do
  path=$(ldd "$SLUICE" | sed -n "s/.*$lib => \([^ ]*\).*/\1/p")
  [ -z "$path" ] || guest_adds+=(--add "$path:/usr/lib/x86_64-linux-gnu/$lib")
done
run_host_guest "$guest_env sh /root/concat-guest.sh" "${guest_adds[@]}"

stop_target

# ---------------------------------------------------------------------------
# checks on this machine: sluice's log
# ---------------------------------------------------------------------------
slog=$OUT_DIR/sluice.log
n_neg=$(grep 'DH-HMAC-CHAP authentication succeeded' "$slog" | grep -c 'NewTlsPsk' || true)
host_check sluice-concat-authenticated "$n_neg DH-HMAC-CHAP transaction(s) with SC_C NEWTLSPSK" 'n_neg >= 1'
n_gen=$(grep -c 'TLS PSK generated' "$slog" || true)
host_check sluice-psk-generated "$n_gen generated PSK(s) filed" 'n_gen >= 1'
n_found=$(grep -c 'TLS: generated PSK found' "$slog" || true)
host_check sluice-generated-psk-found "$n_found TLS handshake(s) with the generated PSK (admin + I/O queues)" 'n_found >= 2'
n_tls_queues=$(grep 'queue connected' "$slog" | grep -c 'generated_psk=true' || true)
n_tls_auth=$(grep 'queue connected' "$slog" | grep 'generated_psk=true' | grep -c 'authentication=true' || true)
host_check sluice-queues-over-generated-psk "$n_tls_queues queue(s) over the generated PSK, $n_tls_auth asked to authenticate again" \
  'n_tls_queues >= 2 && n_tls_auth == 0'
n_fail=$(grep -c 'DH-HMAC-CHAP authentication failed' "$slog" || true)
host_check sluice-wrong-secret-refused "$n_fail failed transaction(s)" 'n_fail >= 1'
n_leak=$(cat "$slog" "$OUT_DIR/sluice.stdout" | grep -cF -e "${SECRET:10:24}" -e "${WRONG:10:24}" || true)
host_check no-secret-in-log "$n_leak line(s) with secret material" 'n_leak == 0'
grep -E 'concatenation|generated|DH-HMAC-CHAP|TLS established' "$slog" | head -n 14 | sed 's/^/  | /'

finish_with_verdict "$TEST_NAME" ", secure channel concatenation with the Linux host verified" "guest.log, sluice.log"
