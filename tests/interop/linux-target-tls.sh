#!/usr/bin/env bash
# Interop: Sluice's host against the Linux kernel target (nvmet-tcp) over NVMe/TCP
# TLS 1.3 with a pre-shared key, and through a plain port of the same target
# (issue 31; tls.sh tests the other direction, the Linux host against sluice serve).
#
# One linux-nvme-peer guest boot (bookworm-backports' 6.12 kernel, as tls.sh; with
# Debian trixie's tlshd, nvme-cli 2.13 and keyctl and the kTLS modules from
# lib/trixie-tls-tools.sh; what the TLS tests share is in lib/tls-guest.sh) in
# `initiator` mode, whose guest commands set up the target themselves:
# linux-nvme-peer's `target` mode configures nvmet without TLS and its `initiator`
# mode forwards no port, so QEMU is started through tools/qemu-hostfwd.sh
# (LNP_QEMU), which adds the two host forwards. In the guest:
#   - nvmet, nvmet-tcp, the kTLS modules and a brd RAM disk; tlshd (the handshake
#     daemon; nvmet-tcp hands each TLS connection to it as the server side);
#   - the key inserted into the .nvme keyring by `nvme check-tls-key --insert`, with
#     PSK identity format 1 (TP 8018: `NVMe1R01 <hostnqn> <subnqn> <digest>`) and
#     format 0 (TP 8011: `NVMe0R01 <hostnqn> <subnqn>`). Linux 6.12's nvmet-tcp does
#     not look the key up itself: it passes the port's keyring (.nvme) to tlshd,
#     which searches it for a "psk" key described by the identity the host's
#     ClientHello offers. The descriptions must equal what `sluice check-tls-key
#     --compat` predicts (Debian 13's libnvme 1.13 derives the pre-1.16 way, so
#     Sluice's host runs with --tls-compat);
#   - one subsystem (allowed host: ours only) with one namespace, exported on two
#     nvmet-tcp ports: one with addr_tsas tls1.3 (treq: required), one plain;
#   - a ready file in the 9p share (--share), then a wait (bounded) for the host's
#     done file; tlshd's log, the psk keys and the kernel log go back through the
#     share.
# From this machine, Sluice's host (`sluice` CLI, SLUICE_TLS_KEY) against both ports:
#   TLS: id-ctrl with the default --tls-identity auto (format 1 accepted at once, no
#     fall-back) and with --tls-identity 0; `sluice connect` three times (timed); a
#     16 MiB pattern written and read back (2 I/O queues, timed) and compared, twice;
#     the plain port's region read back over TLS (same namespace);
#   plain: id-ctrl, the same connects, writes and reads (another region);
#   refused, each failing with a TLS error and within 60 s (no hang): a wrong key
#     (format 1: identity unknown to the keyring; then format 0: known identity,
#     wrong PSK), the right key derived the RFC 8446 way (no --tls-compat), no TLS to
#     the TLS port, TLS to the plain port.
# Then tlshd's log (handshakes that succeeded, TLS 1.3 with AES-128-GCM, and the
# failures) and, with tshark, a capture on lo: ClientHellos offering the predicted
# identities, ServerHellos choosing TLS 1.3 / TLS_AES_128_GCM_SHA256, no well-formed
# NVMe/TCP PDU in a TLS stream, and the TLS region's canary text nowhere while the
# plain region's shows (the capture sees payloads).
# Then the same timed steps against `sluice serve` (a tls = "required" listener and a
# plain one; sluice.log must show the TLS connections): TLS against plain for both
# targets with the same initiator, in DIR/linux-target-tls/results.tsv and
# results-summary.txt. The guest runs under TCG software emulation here: its numbers
# show correctness, not speed (docs/results/tls.md).
# Exit 77 (skipped) when Debian's archive cannot be reached to build the tools or the
# guest image the first time, or with SLUICE_GUEST_KERNEL=stock (6.1 has no NVMe TLS).
#
# Usage: tests/interop/linux-target-tls.sh
# Environment:
#   OUT=DIR           artifact root (default <repo>/target/interop); writes DIR/linux-target-tls/
#   SLUICE_BIN=PATH   sluice binary (default: build target/release/sluice)
#   GUEST_TIMEOUT=S   bound for the guest run (default 480)
#   SLUICE_TLS_TOOLS_CACHE, SLUICE_DEBIAN_MIRROR: see lib/trixie-tls-tools.sh
# Functions here are also called indirectly (traps, wait_for):
# shellcheck disable=SC2317
set -euo pipefail

TEST_NAME=linux-target-tls
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
GUEST_TIMEOUT=${GUEST_TIMEOUT:-480}
SUBNQN=nqn.2026-11.io.sluice:linux-target-tls
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:6a7f0c1e-0000-4000-8000-0000000071b5
NS_SIZE_MIB=64
DATA_MIB=16
# 512-byte blocks: the TLS region from LBA 0, the plain region from 32 MiB
PLAIN_LBA=$((32 * 2048))
SHARE=$OUT_DIR/share

GUEST_PID='' TARGET_PID='' TARGET_NAME=''
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$TSHARK_PID" ] && stop_pid "$TSHARK_PID" tshark 10 TERM >/dev/null 2>&1
  [ -n "$TARGET_PID" ] && { stop_pid "$TARGET_PID" "$TARGET_NAME" 20 TERM || true; }
  if [ -n "$GUEST_PID" ]; then
    # the guest leaves by itself once it sees the done file
    [ -d "$SHARE" ] && : >"$SHARE/done"
    stop_pid "$GUEST_PID" "the guest" 60 TERM || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR/peer" "$SHARE"

skip_test() { record_skip "$1" "$2"; exit "$SKIP_STATUS"; }

# ---------------------------------------------------------------------------
# prerequisites: the 6.12 guest and the trixie TLS tools (both cached)
# ---------------------------------------------------------------------------
[ "${SLUICE_GUEST_KERNEL:-${SLUICE_AUTH_KERNEL:-backports}}" = stock ] &&
  skip_test "the whole test" "SLUICE_GUEST_KERNEL=stock: Debian bookworm's 6.1 kernel has no NVMe/TCP TLS (CONFIG_NVME_TARGET_TCP_TLS)"
command -v python3 >/dev/null || die "python3 is not installed: run scripts/setup.sh"
tls_prerequisites bookworm-backports use_backports_kernel_peer

# ---------------------------------------------------------------------------
# keys, identities, ports, data
# ---------------------------------------------------------------------------
KEY=$("$SLUICE" gen-tls-key --hmac 1) || die "sluice gen-tls-key failed"
OTHER_KEY=$("$SLUICE" gen-tls-key --hmac 1) || die "sluice gen-tls-key failed"
identity_of() { # KEY VERSION [--compat]
  SLUICE_TLS_KEY=$1 "$SLUICE" check-tls-key -n "$HOSTNQN" -c "$SUBNQN" -I "$2" "${@:3}" | sed -n 's/^PSK identity: //p'
}
ID1=$(identity_of "$KEY" 1 --compat)
ID0=$(identity_of "$KEY" 0 --compat)
ID1_RFC=$(identity_of "$KEY" 1)
OTHER_ID1=$(identity_of "$OTHER_KEY" 1 --compat)
if [ -z "$ID1" ] || [ -z "$ID0" ] || [ -z "$OTHER_ID1" ] || [ "$ID1" = "$ID1_RFC" ]; then
  die "sluice check-tls-key gave no usable identity"
fi
log "PSK identities the guest's nvme-cli must insert: '$ID1' and '$ID0'"

# Below the kernel's ephemeral range (see host-cli.sh); QEMU listens on both.
TLS_PORT=$(( 20000 + RANDOM % 12000 ))
while port_listening "$TLS_PORT" || port_listening "$((TLS_PORT + 1))"; do TLS_PORT=$((TLS_PORT + 2)); done
PLAIN_PORT=$((TLS_PORT + 1))

# Patterns: every 512-byte block carries its LBA, a seed and a canary text, so a
# block from the wrong place is caught by cmp and the capture can look for the text.
TLS_CANARY="SLUICE-TLS-REGION-CANARY-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
PLAIN_CANARY="SLUICE-PLAIN-REGION-CANARY-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
make_pattern() { # FILE FIRST-LBA SEED CANARY
  python3 - "$1" "$DATA_MIB" "$2" "$3" "$4" <<'PY'
import struct, sys
path, mib, first, seed, canary = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4], 0), sys.argv[5].encode()
with open(path, "wb") as out:
    for lba in range(first, first + mib * 2048):
        block = struct.pack("<QQ", lba, seed) + b" " + canary + b" "
        out.write((block * (512 // len(block) + 1))[:512])
PY
}
make_pattern "$OUT_DIR/tls-pattern.bin" 0 0x7150 "$TLS_CANARY"
make_pattern "$OUT_DIR/plain-pattern.bin" "$PLAIN_LBA" 0x91a1 "$PLAIN_CANARY"

# ---------------------------------------------------------------------------
# the guest: the Linux kernel target with a TLS port and a plain port
# ---------------------------------------------------------------------------
{
  tls_guest_sh linux-target-tls
  cat <<'EOF'
wait_listen() { # PORT: a socket listening on PORT within 10 s
  hex=$(printf '%04X' "$1") i=0
  while [ $i -lt 100 ]; do
    grep -q ":$hex [0-9A-F:]* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
    sleep 0.1; i=$((i + 1))
  done
  return 1
}
finish() {
  cp /tmp/tlshd.log /host/tlshd.log 2>/dev/null
  grep ' psk ' /proc/keys >/host/keys.txt 2>/dev/null
  dmesg >/host/dmesg.txt 2>/dev/null
  echo "=== kernel log"
  dmesg | grep -iE 'nvme|tls|handshake' | tail -n 25
  exit $fail
}

echo "kernel $(uname -r); $(nvme version | tr '\n' ' ')"
check modules ok 90 sh -c "depmod -a && modprobe -a tls gcm ghash-generic nvmet nvmet_tcp &&
  modprobe brd rd_nr=1 rd_size=$((NS_SIZE_MIB * 1024)) max_part=0" || finish
start_tlshd || finish

# the key, as nvme-cli derives and inserts it, under both identity formats
for v in 1 0; do
  check "insert-identity-$v" ok 30 nvme check-tls-key -n "$LNP_HOSTNQN" -c "$LNP_SUBNQN" -d "$TLS_KEY" -I $v --insert &&
    sed 's/^/  | /' "/tmp/insert-identity-$v.out"
done
grep ' psk ' /proc/keys | sed -e 's/^.* psk  *//' -e 's/: [0-9]*$//' >/tmp/psk-descriptions
for pair in "1:$EXPECT_ID1" "0:$EXPECT_ID0"; do
  v=${pair%%:*} id=${pair#*:}
  if grep -qxF "$id" /tmp/psk-descriptions; then ok "keyring-identity-$v" "$id"
  else bad "keyring-identity-$v" "no psk key '$id' in the keyring"; sed 's/^/  | /' /tmp/psk-descriptions; fi
done

# nvmet: one subsystem (our host only), one namespace, a TLS port and a plain port
S=/sys/kernel/config/nvmet
setup_nvmet() {
  sub=$S/subsystems/$LNP_SUBNQN
  mkdir "$sub" && echo 0 >"$sub/attr_allow_any_host" || return 1
  mkdir "$S/hosts/$LNP_HOSTNQN" && ln -s "$S/hosts/$LNP_HOSTNQN" "$sub/allowed_hosts/$LNP_HOSTNQN" || return 1
  mkdir "$sub/namespaces/1" && printf /dev/ram0 >"$sub/namespaces/1/device_path" &&
    echo 1 >"$sub/namespaces/1/enable" || return 1
  for p in 1:$TLS_PORT 2:$PLAIN_PORT; do
    id=${p%%:*} port=${p#*:} pd=$S/ports/${p%%:*}
    mkdir "$pd" && echo tcp >"$pd/addr_trtype" && echo ipv4 >"$pd/addr_adrfam" &&
      echo 0.0.0.0 >"$pd/addr_traddr" && echo "$port" >"$pd/addr_trsvcid" || return 1
    if [ "$id" = 1 ]; then
      echo tls1.3 >"$pd/addr_tsas" && echo required >"$pd/addr_treq" || return 1
    fi
    ln -s "$sub" "$pd/subsystems/$LNP_SUBNQN" || return 1
    wait_listen "$port" || { echo "nvmet-tcp does not listen on port $port"; return 1; }
  done
}
if setup_nvmet >/tmp/nvmet.out 2>&1; then
  ok nvmet-setup "TLS port $TLS_PORT: tsas $(cat $S/ports/1/addr_tsas), treq $(cat $S/ports/1/addr_treq); plain port $PLAIN_PORT: treq $(cat $S/ports/2/addr_treq)"
else
  bad nvmet-setup; cat /tmp/nvmet.out; dmesg | tail -n 10; finish
fi

echo "READY $(cut -d' ' -f1 /proc/uptime)" >/host/ready.tmp && mv /host/ready.tmp /host/ready
echo "=== ready; waiting for the host's checks (at most ${HOLD_S}s)"
i=0; while [ ! -e /host/done ] && [ $i -lt $((HOLD_S * 5)) ]; do sleep 0.2; i=$((i + 1)); done
if [ -e /host/done ]; then ok host-done; else bad host-done "no done file after ${HOLD_S}s"; fi
if kill -0 $tlshd_pid 2>/dev/null; then ok tlshd-alive; else bad tlshd-alive "tlshd exited"; fi
echo "=== tlshd"
tlshd_log 40
kill $tlshd_pid 2>/dev/null
finish
EOF
} >"$OUT_DIR/guest.sh"

HOLD_S=$((GUEST_TIMEOUT - 120))
guest_env="TLS_KEY='$KEY' EXPECT_ID1='$ID1' EXPECT_ID0='$ID0' TLS_PORT=$TLS_PORT PLAIN_PORT=$PLAIN_PORT"
guest_env+=" NS_SIZE_MIB=$NS_SIZE_MIB HOLD_S=$HOLD_S"
export SLUICE_QEMU_REAL=${LNP_QEMU:-qemu-system-x86_64}
export SLUICE_QEMU_HOSTFWD="hostfwd=tcp:127.0.0.1:$TLS_PORT-:$TLS_PORT,hostfwd=tcp:127.0.0.1:$PLAIN_PORT-:$PLAIN_PORT"
export LNP_QEMU=$REPO/tests/interop/tools/qemu-hostfwd.sh
log "booting the Linux target guest (TLS port $TLS_PORT, plain port $PLAIN_PORT; timeout ${GUEST_TIMEOUT}s; output: guest.log)"
t_guest=$SECONDS
TMPDIR=$OUT_DIR/peer "$LNP" initiator --keep --timeout "$GUEST_TIMEOUT" --subnqn "$SUBNQN" --hostnqn "$HOSTNQN" \
  --share "$SHARE" "${TLS_TOOLS_ADD[@]}" --add "$OUT_DIR/guest.sh:/root/target-tls-guest.sh" \
  -- "$guest_env sh /root/target-tls-guest.sh" </dev/null >"$OUT_DIR/guest.log" 2>&1 &
GUEST_PID=$!
_guest_ready() {
  [ -s "$SHARE/ready" ] && return 0
  kill -0 "$GUEST_PID" 2>/dev/null || return 2
  return 1
}
if ! wait_for 300 "the guest's nvmet to be ready" _guest_ready; then
  tail_file "$OUT_DIR/guest.log" 40
  die "the Linux kernel target did not come up in the guest"
fi
log "the guest's nvmet is ready after $((SECONDS - t_guest))s"
grep '^CHECK' "$OUT_DIR/guest.log" | sed 's/^/  guest: /'

if [ "$HAVE_TSHARK" = 1 ]; then
  capture_start "$OUT_DIR/capture.pcap" "$OUT_DIR/tshark-capture.log" "$TLS_PORT" "$PLAIN_PORT" ||
    die "tshark could not start capturing on lo"
fi

# ---------------------------------------------------------------------------
# Sluice's host against both ports
# ---------------------------------------------------------------------------
failures=()
# check NAME ok|fail CMD...: runs CMD (bounded: 60 s; output in NAME.out, Sluice's
# host log at info with TLS at debug in it) and expects it to succeed or fail; sets
# ELAPSED (seconds) and RC
check() {
  local name=$1 expect=$2 t0
  shift 2
  t0=$EPOCHREALTIME RC=0
  NO_COLOR=1 SLUICE_LOG=info,runtime::tls=debug timeout 60 "$@" >"$OUT_DIR/$name.out" 2>&1 || RC=$?
  ELAPSED=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }')
  if { [ "$expect" = ok ] && [ "$RC" -eq 0 ]; } || { [ "$expect" = fail ] && [ "$RC" -ne 0 ] && [ "$RC" -ne 124 ]; }; then
    log "CHECK $name: ok (exit $RC, ${ELAPSED}s)"; HOST_OK=$((HOST_OK + 1)); return 0
  fi
  log "CHECK $name: FAIL (exit status $RC$([ "$RC" -eq 124 ] && echo ': hung, killed after 60 s'), expected $expect)"
  tail_file "$OUT_DIR/$name.out"
  HOST_FAILED+=("$name"); failures+=("$name")
  return 1
}
# expect_in NAME TEXT: NAME.out contains TEXT
expect_in() {
  if grep -qF -- "$2" "$OUT_DIR/$1.out"; then log "CHECK $1 output: ok (has '$2')"; HOST_OK=$((HOST_OK + 1))
  else log "CHECK $1 output: FAIL (no '$2')"; tail_file "$OUT_DIR/$1.out"; HOST_FAILED+=("$1-output"); failures+=("$1-output"); fi
}
RESULTS=$OUT_DIR/results.tsv
printf 'target\ttransport\tstep\tseconds\tMiB/s\n' >"$RESULTS"
record() { # TARGET TRANSPORT STEP [MIB]: ELAPSED of the last check into results.tsv
  local rate=-
  [ -z "${4:-}" ] || rate=$(awk -v m="$4" -v s="$ELAPSED" 'BEGIN { printf "%.1f", m / s }')
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$ELAPSED" "$rate" >>"$RESULTS"
}
# check with SLUICE_TLS_KEY=$key, or without it when $key is empty (an empty
# SLUICE_TLS_KEY is a malformed key, not none). A function's prefix assignment
# reaches the commands it runs; SLUICE_TLS_KEY turns TLS on, so it is never exported.
unset SLUICE_TLS_KEY
keyed_check() {
  if [ -n "$key" ]; then SLUICE_TLS_KEY=$key check "$@"; else check "$@"; fi
}
# measure TARGET: the timed steps, the same for both targets, against the TLS port
# (tls_target) and the plain one (plain_target): `sluice connect` (admin and one I/O
# queue, identify, disconnect) three times each, then twice a 16 MiB pattern written
# and read back (2 I/O queues) and compared, TLS at LBA 0, plain at PLAIN_LBA
measure() {
  local tgt=$1 round transport key lba same
  local -a target
  for round in 1 2 3; do
    for transport in tls plain; do
      if [ "$transport" = tls ]; then target=("${tls_target[@]}") key=$KEY; else target=("${plain_target[@]}") key=''; fi
      keyed_check "$tgt-connect-$transport-$round" ok "$SLUICE" connect "${target[@]}" -i 1 &&
        record "$tgt" "$transport" "connect-$round"
    done
  done
  for round in 1 2; do
    for transport in tls plain; do
      if [ "$transport" = tls ]; then target=("${tls_target[@]}") lba=0 key=$KEY
      else target=("${plain_target[@]}") lba=$PLAIN_LBA key=''; fi
      keyed_check "$tgt-write-$transport-$round" ok "$SLUICE" write "${target[@]}" -i 2 -N 1 -b "$lba" \
        -d "$OUT_DIR/$transport-pattern.bin" && record "$tgt" "$transport" "write-${DATA_MIB}MiB-$round" "$DATA_MIB"
      keyed_check "$tgt-read-$transport-$round" ok "$SLUICE" read "${target[@]}" -i 2 -N 1 -b "$lba" \
        -z "${DATA_MIB}M" -d "$OUT_DIR/read.bin" && record "$tgt" "$transport" "read-${DATA_MIB}MiB-$round" "$DATA_MIB"
      if [ -s "$OUT_DIR/read.bin" ] && cmp -s "$OUT_DIR/$transport-pattern.bin" "$OUT_DIR/read.bin"; then same=1; else same=0; fi
      host_check "$tgt-data-$transport-$round" "$( ((same)) && echo equal || echo DIFFERENT): ${DATA_MIB} MiB read back over $transport" 'same == 1'
      rm -f "$OUT_DIR/read.bin"
    done
  done
}

tls_target=(-a 127.0.0.1 -s "$TLS_PORT" -n "$SUBNQN" -q "$HOSTNQN" --tls-compat)
plain_target=(-a 127.0.0.1 -s "$PLAIN_PORT" -n "$SUBNQN" -q "$HOSTNQN")

# TLS: identify with both identity formats
SLUICE_TLS_KEY=$KEY check id-ctrl-tls ok "$SLUICE" id-ctrl "${tls_target[@]}" && expect_in id-ctrl-tls "$SUBNQN"
n_fallback=$(grep -c 'trying the next one' "$OUT_DIR/id-ctrl-tls.out" || true)
host_check tls-format-1-accepted "$n_fallback fall-back(s) to format 0 with --tls-identity auto" 'n_fallback == 0'
SLUICE_TLS_KEY=$KEY check id-ctrl-tls-format-0 ok "$SLUICE" id-ctrl "${tls_target[@]}" --tls-identity 0 && expect_in id-ctrl-tls-format-0 "$SUBNQN"
check id-ctrl-plain ok "$SLUICE" id-ctrl "${plain_target[@]}" && expect_in id-ctrl-plain "$SUBNQN"

measure linux
# the plain region read over TLS: one namespace behind both ports
SLUICE_TLS_KEY=$KEY check read-plain-region-over-tls ok "$SLUICE" read "${tls_target[@]}" -N 1 -b "$PLAIN_LBA" \
  -z "${DATA_MIB}M" -d "$OUT_DIR/cross-read.bin"
if [ -s "$OUT_DIR/cross-read.bin" ] && cmp -s "$OUT_DIR/plain-pattern.bin" "$OUT_DIR/cross-read.bin"; then same=1; else same=0; fi
host_check data-plain-region-over-tls "$( ((same)) && echo equal || echo DIFFERENT): the plain port's ${DATA_MIB} MiB read over TLS" 'same == 1'
rm -f "$OUT_DIR/cross-read.bin"

# refused, quickly and with a TLS error
tls_error() { # NAME: the failure names TLS
  local name=$1 n
  n=$(grep -ciE 'tls|handshake' "$OUT_DIR/$name.out" || true)
  host_check "$name-says-tls" "$n line(s) naming TLS: $(grep -m1 -iE 'error' "$OUT_DIR/$name.out" | cut -c1-160)" 'n > 0'
}
SLUICE_TLS_KEY=$OTHER_KEY check wrong-key-refused fail "$SLUICE" id-ctrl "${tls_target[@]}" && tls_error wrong-key-refused
SLUICE_TLS_KEY=$KEY check rfc-derivation-refused fail "$SLUICE" id-ctrl -a 127.0.0.1 -s "$TLS_PORT" -n "$SUBNQN" -q "$HOSTNQN" &&
  tls_error rfc-derivation-refused
# ... and points at the derivation, the likely cause against a target nvme-cli keyed
n_hint=$(grep -c 'needs the compat derivation' "$OUT_DIR/rfc-derivation-refused.out" || true)
host_check rfc-derivation-hint "$n_hint line(s) naming the compat derivation" 'n_hint > 0'
check plain-to-tls-port-refused fail "$SLUICE" id-ctrl -a 127.0.0.1 -s "$TLS_PORT" -n "$SUBNQN" -q "$HOSTNQN"
SLUICE_TLS_KEY=$KEY check tls-to-plain-port-refused fail "$SLUICE" id-ctrl -a 127.0.0.1 -s "$PLAIN_PORT" -n "$SUBNQN" -q "$HOSTNQN" --tls-compat &&
  tls_error tls-to-plain-port-refused
grep -h -m1 -iE 'error' "$OUT_DIR"/*-refused.out | sed 's/^/  | /'

# ---------------------------------------------------------------------------
# the guest's side: done, its checks, tlshd's log
# ---------------------------------------------------------------------------
# tshark writes its last packets a moment after they pass: stopped at once, it lost
# the last two attempts
if [ "$HAVE_TSHARK" = 1 ]; then sleep 2; capture_stop "$OUT_DIR/tshark-capture.log"; fi
: >"$SHARE/done"
_guest_gone() { ! kill -0 "$GUEST_PID" 2>/dev/null; }
wait_for 120 "the guest to finish" _guest_gone || true
guest_rc=0
if kill -0 "$GUEST_PID" 2>/dev/null; then
  stop_pid "$GUEST_PID" "the guest" 30 TERM || true
  guest_rc=124
else
  wait "$GUEST_PID" || guest_rc=$?
fi
GUEST_PID=''
guest_outcome "$guest_rc" "$t_guest"

tlog=$SHARE/tlshd.log
if [ -s "$tlog" ]; then
  cp "$tlog" "$OUT_DIR/tlshd.log"
  n_ok=$(grep -c 'Handshake with .* was successful' "$tlog" || true)
  n_failed=$(grep -c 'Handshake with .* failed' "$tlog" || true)
  n_tls13=$(grep -c 'Session description: (TLS1.3).*(AES-128-GCM)' "$tlog" || true)
  # successful: id-ctrl x2, connect x3 and the cross read (admin + 1 I/O queue each),
  # writes and reads x2 (admin + 2 I/O queues each): 4 + 6 + 2 + 12 = 24; failed: the
  # wrong key and the RFC derivation (format 1, then 0), the plain ICReq
  host_check tlshd-handshakes "$n_ok successful, $n_tls13 TLS 1.3 with AES-128-GCM, $n_failed failed" \
    'n_ok >= 24 && n_tls13 >= n_ok && n_failed >= 5'
  # format 1 refusals for the right reason: tlshd found no key for the identity
  n_unknown=$(grep -F "failed to search 'psk' key" "$tlog" | grep -cF -e "'$OTHER_ID1'" -e "'$ID1_RFC'" || true)
  host_check tlshd-unknown-identities "$n_unknown lookup(s) of the wrong key's and the RFC derivation's identity failed" \
    'n_unknown >= 2'
  grep -E 'failed|error|Error' "$tlog" | sed 's/^tlshd\[[0-9]*\]: //' | cut -c1-120 | sort | uniq -c | sort -rn | head -n 6 |
    sed 's/^/  tlshd| /'
else
  failures+=("no tlshd log came back from the guest")
fi
[ -s "$SHARE/keys.txt" ] && cp "$SHARE/keys.txt" "$OUT_DIR/guest-keys.txt"
[ -s "$SHARE/dmesg.txt" ] && cp "$SHARE/dmesg.txt" "$OUT_DIR/guest-dmesg.txt"
n_leak=$(cat "$OUT_DIR"/*.out "$OUT_DIR/guest.log" | grep -cF -e "${KEY:16:24}" -e "${OTHER_KEY:16:24}" || true)
host_check no-key-in-output "$n_leak line(s) of Sluice's or the guest's output with key material" 'n_leak == 0'

# ---------------------------------------------------------------------------
# the capture
# ---------------------------------------------------------------------------
if [ "$HAVE_TSHARK" = 0 ]; then
  record_skip capture "tshark is not installed: the capture checks (TLS records, no cleartext NVMe/TCP) did not run"
else
  pcap=$OUT_DIR/capture.pcap
  [ -s "$pcap" ] || failures+=("the capture $pcap is missing or empty")
  tls_capture_hellos "$pcap" "$TLS_PORT"
  tshark_fields "$OUT_DIR/capture-nvme-tcp.txt" -n -r "$pcap" -d "tcp.port==$TLS_PORT,nvme-tcp" \
    -d "tcp.port==$PLAIN_PORT,nvme-tcp" -Y "($NVME_TCP_WELL_FORMED)" -T fields -e tcp.stream -e tcp.dstport -e tcp.srcport \
    -e nvme-tcp.type
  n_id1=$(offered_count "$ID1")
  n_id0=$(offered_count "$ID0")
  n_other=$(offered_count "$OTHER_ID1")
  n_rfc=$(offered_count "$ID1_RFC")
  in_tls=$(awk -v s=" $tls_streams " 'index(s, " " $1 " ")' "$OUT_DIR/capture-nvme-tcp.txt" | wc -l)
  plain_pdus=$(awk -v p="$PLAIN_PORT" '$2 == p || $3 == p' "$OUT_DIR/capture-nvme-tcp.txt" | wc -l)
  n_tls_canary=$(grep -caF "$TLS_CANARY" "$pcap" || true)
  n_plain_canary=$(grep -caF "$PLAIN_CANARY" "$pcap" || true)
  {
    echo "capture $pcap: TLS port $TLS_PORT, plain port $PLAIN_PORT"
    echo "ClientHellos on the TLS port: $n_ch; offering format 1 (compat) $n_id1, format 0 $n_id0, the other key's $n_other, the RFC 8446 derivation's $n_rfc"
    echo "ServerHellos: $n_sh, TLS 1.3 + TLS_AES_128_GCM_SHA256: $n_sh_ok"
    echo "well-formed NVMe/TCP PDUs in TLS streams: $in_tls; on the plain port: $plain_pdus"
    echo "capture lines with the TLS region's canary: $n_tls_canary, the plain region's: $n_plain_canary"
  } >"$OUT_DIR/capture-summary.txt"
  sed 's/^/  /' "$OUT_DIR/capture-summary.txt"
  # format 1: the 22 successful ones but id-ctrl --tls-identity 0's two; format 0:
  # those two and the second try of the wrong key and of the RFC derivation (a
  # format 0 identity has no digest: the same text either way)
  host_check capture-client-identities "$n_id1 ClientHello(s) with format 1, $n_id0 with format 0, $n_other with the other key's, $n_rfc RFC-derived" \
    'n_id1 >= 22 && n_id0 >= 4 && n_other >= 1 && n_rfc >= 1'
  host_check capture-tls13-aes128gcm "$n_sh_ok of $n_sh ServerHello(s) chose TLS 1.3, TLS_AES_128_GCM_SHA256" \
    'n_sh_ok >= 24 && n_sh_ok == n_sh'
  host_check capture-no-cleartext-pdu-in-tls "$in_tls well-formed NVMe/TCP PDU(s) in the TLS streams" 'in_tls == 0'
  host_check capture-plain-pdus "$plain_pdus NVMe/TCP PDU(s) decoded on the plain port" 'plain_pdus >= 100'
  host_check capture-canaries "TLS region's canary in $n_tls_canary capture line(s), the plain region's in $n_plain_canary" \
    'n_tls_canary == 0 && n_plain_canary > 0'
fi

# ---------------------------------------------------------------------------
# the same steps against sluice serve: the other target, the same initiator
# ---------------------------------------------------------------------------
# A host with a tls_key may connect to sluice only over TLS, so the plain steps run
# as a second host NQN (the same sluice commands otherwise).
PLAIN_HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:6a7f0c1e-0000-4000-8000-0000000071b6
S_TLS_PORT=$(( 20000 + RANDOM % 12000 ))
while port_listening "$S_TLS_PORT" || port_listening "$((S_TLS_PORT + 1))"; do S_TLS_PORT=$((S_TLS_PORT + 2)); done
S_PLAIN_PORT=$((S_TLS_PORT + 1))
CONFIG=$OUT_DIR/sluice.toml
{
  echo "# generated by $TEST_NAME"
  printf '[[listener]]\naddress = "127.0.0.1:%s"\ntls = "required"\n\n' "$S_TLS_PORT"
  printf '[[listener]]\naddress = "127.0.0.1:%s"\n\n' "$S_PLAIN_PORT"
  printf '[[subsystem]]\nnqn = "%s"\n\n' "$SUBNQN"
  printf '[[subsystem.namespace]]\nnsid = 1\nbackend = "ram"\nsize = "%sMiB"\nblock_size = 512\n\n' "$NS_SIZE_MIB"
  printf '[[subsystem.host]]\nnqn = "%s"\ntls_key = "%s"\ntls_key_derivation = "compat"\n\n' "$HOSTNQN" "$KEY"
  printf '[[subsystem.host]]\nnqn = "%s"\n\n' "$PLAIN_HOSTNQN"
  printf '[runtime]\nthreads = 1\npoll_mode = "sleep"\n'
} >"$CONFIG"
SLUICE_LOG=info,runtime::tls=debug start_sluice "$SLUICE" "$CONFIG" "$S_TLS_PORT" "$S_PLAIN_PORT"
tls_target=(-a 127.0.0.1 -s "$S_TLS_PORT" -n "$SUBNQN" -q "$HOSTNQN" --tls-compat)
plain_target=(-a 127.0.0.1 -s "$S_PLAIN_PORT" -n "$SUBNQN" -q "$PLAIN_HOSTNQN")
measure sluice
stop_target
# connects (2 queues) x3, writes and reads (3 queues) x2 each
n_est=$(grep 'TLS established' "$OUT_DIR/sluice.log" | grep -c 'TLS_AES_128_GCM_SHA256' || true)
host_check sluice-tls-established "$n_est TLS connection(s) with TLS_AES_128_GCM_SHA256 in sluice.log" 'n_est >= 18'

# TLS against plain per target: connect time and MiB/s, lowest-highest of the rounds
awk -F'\t' '
  NR == 1 { next }
  { step = $3; sub(/-.*/, "", step); v = (step == "connect" ? $4 : $5); k = $1 "|" $2 "|" step
    if (!(k in lo) || v + 0 < lo[k] + 0) lo[k] = v
    if (!(k in hi) || v + 0 > hi[k] + 0) hi[k] = v
    sum[k] += v; n[k]++ }
  function range(k) { return (lo[k] == hi[k] ? lo[k] : lo[k] "-" hi[k]) }
  function ratio(t, s) { a = t "|tls|" s; b = t "|plain|" s; return (n[a] && n[b] && sum[b] > 0 ? sprintf("%.2fx", (sum[a] / n[a]) / (sum[b] / n[b])) : "-") }
  END {
    printf "%-7s %-9s %-15s %-15s %-15s\n", "target", "port", "connect (s)", "write (MiB/s)", "read (MiB/s)"
    split("linux sluice", targets, " ")
    for (i = 1; i <= 2; i++) {
      t = targets[i]
      for (j = 1; j <= 2; j++) {
        p = (j == 1 ? "plain" : "tls")
        printf "%-7s %-9s %-15s %-15s %-15s\n", t, p, range(t "|" p "|connect"), range(t "|" p "|write"), range(t "|" p "|read")
      }
      printf "%-7s %-9s %-15s %-15s %-15s\n", t, "TLS/plain", ratio(t, "connect"), ratio(t, "write"), ratio(t, "read")
    }
    print "(lowest-highest of the rounds; TLS/plain: of the means, a time ratio for connect, a throughput ratio for write and read)"
  }' "$RESULTS" >"$OUT_DIR/results-summary.txt"
log "TLS against plain, Sluice's host (linux: the kernel target in a TCG-emulated guest, so correctness-level numbers only; sluice: sluice serve on this machine):"
sed 's/^/  /' "$OUT_DIR/results-summary.txt"
finish_with_verdict "$TEST_NAME" ", Sluice's host over TLS 1.3 against the Linux kernel target" \
  "guest.log, tlshd.log, results.tsv, results-summary.txt, *.out, sluice.log, capture.pcap, capture-summary.txt"
