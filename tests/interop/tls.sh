#!/usr/bin/env bash
# Interop: NVMe/TCP over TLS 1.3 with a pre-shared key (TP 8011) between the real
# Linux kernel host and `sluice serve`.
#
# Sluice serves one subsystem on a listener with tls = "required"; the guest's host
# NQN has a tls_key (a `sluice gen-tls-key` 01 / SHA-256 key) with
# tls_key_derivation = "compat" (Debian 13's libnvme 1.13 derives the TLS PSK the
# pre-1.16 way). One linux-nvme-peer guest boot (bookworm-backports' 6.12 kernel,
# use_backports_kernel_peer in lib/common.sh) with Debian trixie's tlshd, nvme-cli
# 2.13 and keyctl and the kTLS modules added (lib/trixie-tls-tools.sh; built once
# from Debian's archive and cached; what the TLS tests share is in lib/tls-guest.sh)
# runs:
#   1. `nvme connect --tls --tls-key OTHER-KEY --tls-key-identity IDENTITY`: the
#      host offers the right identity with the wrong PSK (libnvme stores OTHER-KEY
#      as is under that identity), so the PSK binder of its ClientHello does not
#      verify: the connect fails and leaves no controller behind.
#   2. `nvme connect --tls --tls-key KEY`: the kernel host shakes hands through
#      tlshd (kTLS), the namespace appears, the PSK identity in the kernel keyring
#      is the one `sluice check-tls-key --compat` predicts; a block of canary text
#      is written and read back, fio writes 16 MiB (4 KiB random) and verifies it
#      (crc32c, zero errors); `nvme disconnect`.
#   3. `nvme connect --tls --tls-key OTHER-KEY`: an identity (its digest) Sluice
#      has no key for; fails, no controller left.
#   4. a plain `nvme connect` (no TLS) to the TLS-only listener fails.
# On this machine:
#   - sluice.log shows the PSK found for the predicted identity (derivation compat),
#     "TLS established" with TLS_AES_128_GCM_SHA256 for the admin and I/O queues,
#     the failed handshakes of steps 1 and 3 (3: no key for the other identity) and
#     the refused plain connection of step 4, and never a key; sluice stops
#     cleanly on SIGTERM.
#   - a tshark capture on lo of the whole run: decoded as TLS it holds ClientHellos
#     offering the predicted identity, ServerHellos choosing TLS 1.3 with
#     TLS_AES_128_GCM_SHA256, and application data records; decoded as NVMe/TCP, no
#     TCP stream that starts with a TLS handshake holds a well-formed NVMe/TCP PDU
#     (type with its header length), while the plain attempt of step 4 shows its
#     cleartext ICReq (the dissector works) and got no ICResp; the canary text
#     appears nowhere in the capture. Without tshark these are skipped (reported).
# Exit 77 (skipped) when Debian's archive cannot be reached to build the tools or the
# guest image the first time, or with SLUICE_GUEST_KERNEL=stock (6.1 has no NVMe TLS).
#
# Usage: tests/interop/tls.sh
# Environment:
#   OUT=DIR           artifact root (default <repo>/target/interop); writes DIR/tls/
#   SLUICE_BIN=PATH   sluice binary (default: build target/release/sluice)
#   GUEST_TIMEOUT=S   bound for the guest run (default 400)
#   SLUICE_TLS_TOOLS_CACHE, SLUICE_DEBIAN_MIRROR: see lib/trixie-tls-tools.sh
# Functions here are also called indirectly (traps, wait_for):
# shellcheck disable=SC2317
set -euo pipefail

TEST_NAME=tls
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
INTEROP_REPO=$REPO
# shellcheck source=tests/interop/lib/common.sh
. "$REPO/tests/interop/lib/common.sh"
# shellcheck source=tests/interop/lib/trixie-tls-tools.sh
. "$REPO/tests/interop/lib/trixie-tls-tools.sh"
# shellcheck source=tests/interop/lib/tls-guest.sh
. "$REPO/tests/interop/lib/tls-guest.sh"

OUT_ROOT=${OUT:-$REPO/target/interop}
mkdir -p "$OUT_ROOT"
OUT_DIR=$(cd "$OUT_ROOT" && pwd)/$TEST_NAME
GUEST_TIMEOUT=${GUEST_TIMEOUT:-400}
SUBNQN=nqn.2026-11.io.sluice:tls
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:6a7f0c1e-0000-4000-8000-0000000071a5
NS_SIZE_MIB=64

TARGET_PID='' TARGET_NAME=''
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$TSHARK_PID" ] && stop_pid "$TSHARK_PID" tshark 10 TERM >/dev/null 2>&1
  [ -n "$TARGET_PID" ] && { stop_pid "$TARGET_PID" "$TARGET_NAME" 20 TERM || true; }
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR/peer"

skip_test() { record_skip "$1" "$2"; exit "$SKIP_STATUS"; }

# ---------------------------------------------------------------------------
# prerequisites: the 6.12 guest and the trixie TLS tools (both cached)
# ---------------------------------------------------------------------------
[ "${SLUICE_GUEST_KERNEL:-${SLUICE_AUTH_KERNEL:-backports}}" = stock ] &&
  skip_test "the whole test" "SLUICE_GUEST_KERNEL=stock: Debian bookworm's 6.1 kernel has no NVMe/TCP TLS (CONFIG_NVME_TCP_TLS)"
tls_prerequisites bookworm-backports use_backports_kernel_peer

# ---------------------------------------------------------------------------
# keys, identity, configuration, target
# ---------------------------------------------------------------------------
KEY=$("$SLUICE" gen-tls-key --hmac 1) || die "sluice gen-tls-key failed"
OTHER_KEY=$("$SLUICE" gen-tls-key --hmac 1) || die "sluice gen-tls-key failed"
# The identity the guest's libnvme 1.13 inserts for KEY (format 1, compat digest)
# and, for the record, the one libnvme >= 1.16 would (RFC 8446 digest).
identity_of() { # KEY [--compat]
  SLUICE_TLS_KEY=$1 "$SLUICE" check-tls-key -n "$HOSTNQN" -c "$SUBNQN" "${@:2}" | sed -n 's/^PSK identity: //p'
}
IDENTITY=$(identity_of "$KEY" --compat)
IDENTITY_RFC=$(identity_of "$KEY")
OTHER_IDENTITY=$(identity_of "$OTHER_KEY" --compat)
if [ -z "$IDENTITY" ] || [ -z "$OTHER_IDENTITY" ] || [ "$IDENTITY" = "$IDENTITY_RFC" ]; then
  die "sluice check-tls-key gave no usable identity"
fi
log "PSK identity expected from the guest: $IDENTITY"
CANARY="SLUICE-TLS-CLEARTEXT-CANARY-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"

tls_serve_sluice required '' "tls_key = \"$KEY\"" 'tls_key_derivation = "compat"'

if [ "$HAVE_TSHARK" = 1 ]; then
  capture_start "$OUT_DIR/capture.pcap" "$OUT_DIR/tshark-capture.log" "$IO_PORT" || die "tshark could not start capturing on lo"
fi

# ---------------------------------------------------------------------------
# the guest
# ---------------------------------------------------------------------------
{
  tls_guest_sh tls host
  cat <<'EOF'

echo "kernel $(uname -r); $(nvme version | tr '\n' ' '); $(fio --version)"
check ktls-modules ok 60 sh -c 'depmod -a && modprobe -a tls gcm ghash-generic nvme_tcp'
start_tlshd

# 1. the right identity with the wrong PSK: libnvme 1.13 looks the identity up
# (in .nvme, which it links into the session keyring), finds no key, and stores
# OTHER_KEY's bytes as they are under that identity; the kernel offers it and the
# PSK binder of the ClientHello cannot verify. (Run first: with the right key in
# .nvme already, the lookup would find and use it. Step 2 replaces this key with
# the one derived from KEY.)
echo "=== 1. nvme connect --tls --tls-key OTHER-KEY --tls-key-identity IDENTITY"
refused wrong-psk --tls --tls-key "$OTHER_KEY" --tls-key-identity "$EXPECT_IDENTITY"

# 2. TLS connect, identity, canary, fio verify, disconnect
echo "=== 2. nvme connect --tls --tls-key KEY"
tls_device() {
  echo "sysfs tls_key $serial, tls_configured_key $(cat "/sys/class/nvme/$ctrl/tls_configured_key" 2>/dev/null)," \
    "tls_keyring $(cat "/sys/class/nvme/$ctrl/tls_keyring" 2>/dev/null); keyring: $desc"
  if [ -n "$serial" ] && [ "$desc" = "$EXPECT_IDENTITY" ]; then ok tls-identity "$desc"
  else bad tls-identity "key '$serial' is '$desc', expected '$EXPECT_IDENTITY'"; grep ' psk ' /proc/keys; fi
  canary_io "$dev" 768
  fio_verify "$dev" tls-randwrite 16m
}
connected tls 90 tls_device --tls --tls-key "$TLS_KEY"

# 3. a key the target does not know (its identity carries another digest)
echo "=== 3. nvme connect --tls --tls-key OTHER-KEY"
refused wrong-key --tls --tls-key "$OTHER_KEY"

# 4. no TLS at all
echo "=== 4. plain nvme connect to the TLS-only listener"
refused plain

tlshd_handshakes "$EXPECT_IDENTITY" '.*(AES-128-GCM)' "TLS 1.3, AES-128-GCM, identity as expected"
guest_exit 'nvme|tls|handshake' 20
EOF
} >"$OUT_DIR/guest.sh"

guest_env="TLS_KEY='$KEY' OTHER_KEY='$OTHER_KEY' EXPECT_IDENTITY='$IDENTITY' CANARY='$CANARY'"
run_host_guest "$guest_env sh /root/tls-guest.sh" --add "$OUT_DIR/guest.sh:/root/tls-guest.sh"

stop_target
[ "$HAVE_TSHARK" = 1 ] && capture_stop "$OUT_DIR/tshark-capture.log"

# ---------------------------------------------------------------------------
# checks on this machine: sluice's log
# ---------------------------------------------------------------------------
slog=$OUT_DIR/sluice.log
n_found=$(grep 'TLS: PSK found' "$slog" | grep -F "$IDENTITY" | grep -c -i 'compat' || true)
host_check sluice-psk-found "$n_found handshake(s) for the expected identity, derivation compat" 'n_found >= 2'
n_est=$(grep 'TLS established' "$slog" | grep -c 'TLS_AES_128_GCM_SHA256' || true)
host_check sluice-tls-established "$n_est connection(s) with TLS_AES_128_GCM_SHA256 (admin + I/O queues)" 'n_est >= 2'
n_refused=$(grep -c 'TLS: closing the connection' "$slog" || true)
n_unknown=$(grep 'TLS: closing the connection' "$slog" | grep -cF "$OTHER_IDENTITY" || true)
host_check sluice-bad-handshakes-refused "$n_refused failed handshake(s) logged, $n_unknown naming the unknown identity" \
  'n_refused >= 2 && n_unknown >= 1'
n_plain=$(grep -c 'TLS is required on this listener' "$slog" || true)
host_check sluice-plain-refused "$n_plain plain connection(s) refused" 'n_plain >= 1'
n_leak=$(cat "$slog" "$OUT_DIR/sluice.stdout" | grep -cF -e "${KEY:16:24}" -e "${OTHER_KEY:16:24}" || true)
host_check no-key-in-log "$n_leak line(s) with key material" 'n_leak == 0'
grep -E 'TLS|PSK' "$slog" | head -n 12 | sed 's/^/  | /'

# ---------------------------------------------------------------------------
# checks on this machine: the capture
# ---------------------------------------------------------------------------
if [ "$HAVE_TSHARK" = 0 ]; then
  record_skip capture "tshark is not installed: the capture checks (TLS records, no cleartext NVMe/TCP) did not run"
else
  pcap=$OUT_DIR/capture.pcap
  [ -s "$pcap" ] || failures+=("the capture $pcap is missing or empty")
  tls_opt=(-n -r "$pcap" -d "tcp.port==$IO_PORT,tls")
  nvme_opt=(-n -r "$pcap" -d "tcp.port==$IO_PORT,nvme-tcp")
  summary=$OUT_DIR/capture-summary.txt
  # streams that open with a ClientHello, their offered identities, the ServerHellos
  tls_capture_hellos "$pcap" "$IO_PORT"
  # TLS 1.3 records carry their (outer) type as opaque_type
  tshark_fields "$OUT_DIR/capture-appdata.txt" "${tls_opt[@]}" \
    -Y 'tls.record.opaque_type == 23 || tls.record.content_type == 23' -T fields -e frame.number
  n_appdata=$(wc -l <"$OUT_DIR/capture-appdata.txt")
  # well-formed NVMe/TCP PDUs
  tshark_fields "$OUT_DIR/capture-nvme-tcp.txt" "${nvme_opt[@]}" -Y "$NVME_TCP_WELL_FORMED" -T fields \
    -e tcp.stream -e nvme-tcp.type -e frame.number
  n_ch_id=$(offered_count "$IDENTITY")
  n_ch_other=$(offered_count "$OTHER_IDENTITY")
  in_tls=$(awk -v s=" $tls_streams " 'index(s, " " $1 " ")' "$OUT_DIR/capture-nvme-tcp.txt" | wc -l)
  plain_icreq=$(awk -v s=" $tls_streams " '!index(s, " " $1 " ") && $2 == 0' "$OUT_DIR/capture-nvme-tcp.txt" | wc -l)
  any_icresp=$(awk '$2 == 1' "$OUT_DIR/capture-nvme-tcp.txt" | wc -l)
  {
    echo "capture $pcap, port $IO_PORT"
    echo "TLS streams (ClientHello): $tls_streams"
    echo "ClientHellos: $n_ch, offering the expected identity: $n_ch_id ($IDENTITY), the unknown one: $n_ch_other"
    echo "ServerHellos: $n_sh, TLS 1.3 + TLS_AES_128_GCM_SHA256: $n_sh_ok"
    echo "frames with application data records: $n_appdata"
    echo "well-formed NVMe/TCP PDUs (stream, type, frame) when decoded as nvme-tcp:"
    sed 's/^/  /' "$OUT_DIR/capture-nvme-tcp.txt"
  } >"$summary"
  # steps 1 and 2 (admin and I/O queues) offer the expected identity, step 3 the other
  host_check capture-tls-handshakes "$n_ch ClientHello(s): $n_ch_id with the expected identity, $n_ch_other with the unknown one" \
    'n_ch_id >= 3 && n_ch_other >= 1'
  host_check capture-tls13-aes128gcm "$n_sh_ok of $n_sh ServerHello(s) chose TLS 1.3, TLS_AES_128_GCM_SHA256" \
    'n_sh_ok >= 2 && n_sh_ok == n_sh'
  host_check capture-tls-appdata "$n_appdata frame(s) with application data records" 'n_appdata >= 100'
  host_check capture-no-cleartext-pdu "$in_tls well-formed NVMe/TCP PDU(s) in the TLS streams" 'in_tls == 0'
  host_check capture-plain-icreq-seen "the plain attempt's cleartext ICReq: $plain_icreq; ICResps: $any_icresp" \
    'plain_icreq >= 1 && any_icresp == 0'
  n_canary=$(grep -caF "$CANARY" "$pcap" || true)
  host_check capture-no-canary "$n_canary capture line(s) with the canary text written through TLS" 'n_canary == 0'
fi

finish_with_verdict "$TEST_NAME" ", TLS 1.3 PSK from the Linux host verified" "guest.log, sluice.log, capture.pcap, capture-summary.txt"
