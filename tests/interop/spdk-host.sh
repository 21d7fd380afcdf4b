#!/usr/bin/env bash
# Interop: SPDK's userspace NVMe/TCP host (../shared/spdk-peer: spdk_nvme_identify and
# spdk_nvme_perf, prebuilt) against `sluice serve`, the way a new user first tries it:
#
#   1. spdk_nvme_identify: it must connect and print no "failed" line (every Get
#      Features it issues, e.g. Temperature Threshold 04h and Error Recovery 05h,
#      answers);
#   2. spdk_nvme_perf, 4 KiB random read at QD32 for 3 s, with a transport ID that
#      names no host NQN (SPDK's host then sends an empty Host NQN in Connect, which a
#      subsystem open to any host accepts): it must finish with I/O counted, no errors;
#   3. the same subsystem with an allow-list refuses the empty Host NQN, and sluice
#      logs why.
#
# Usage: tests/interop/spdk-host.sh
# Environment:
#   OUT=DIR           artifact root (default <repo>/target/interop); writes DIR/spdk-host/
#   SLUICE_BIN=PATH   sluice binary (default: build target/release/sluice)
#   SPDK_PEER=PATH    spdk-peer (default ../shared/spdk-peer/spdk-peer next to the repository)
# shellcheck disable=SC2317
set -euo pipefail

TEST_NAME=spdk-host
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
INTEROP_REPO=$REPO
# shellcheck source=tests/interop/lib/common.sh
. "$REPO/tests/interop/lib/common.sh"

OUT_ROOT=${OUT:-$REPO/target/interop}
mkdir -p "$OUT_ROOT"
OUT_DIR=$(cd "$OUT_ROOT" && pwd)/$TEST_NAME
SPDK_PEER=${SPDK_PEER:-$REPO/../shared/spdk-peer/spdk-peer}
OPEN_NQN=nqn.2026-11.io.sluice:spdk-open
LISTED_NQN=nqn.2026-11.io.sluice:spdk-listed

TARGET_PID='' TARGET_NAME=''
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$TARGET_PID" ] && { stop_pid "$TARGET_PID" "$TARGET_NAME" 30 TERM || true; }
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR"
require_spdk_peer "$SPDK_PEER"

use_sluice_binary
[ -x "$SLUICE" ] || die "sluice binary $SLUICE not found"

IO_PORT=$(( 20000 + RANDOM % 12000 ))
while port_listening "$IO_PORT" || port_listening "$((IO_PORT + 1))"; do IO_PORT=$((IO_PORT + 2)); done
DISC_PORT=$((IO_PORT + 1))
CONFIG=$OUT_DIR/sluice.toml
{
  printf '[[listener]]\naddress = "127.0.0.1:%s"\n\n' "$IO_PORT"
  printf '[[listener]]\naddress = "127.0.0.1:%s"\ndiscovery_only = true\n\n' "$DISC_PORT"
  printf '[[subsystem]]\nnqn = "%s"\nallow_any_host = true\n\n' "$OPEN_NQN"
  printf '[[subsystem.namespace]]\nbackend = "ram"\nsize = "256MiB"\nblock_size = 4096\n\n'
  printf '[[subsystem]]\nnqn = "%s"\n\n' "$LISTED_NQN"
  printf '[[subsystem.host]]\nnqn = "nqn.2014-08.org.nvmexpress:uuid:5111ce00-0000-4000-8000-00000000b001"\n\n'
  printf '[[subsystem.namespace]]\nbackend = "ram"\nsize = "16MiB"\n\n'
  printf '[runtime]\nthreads = 1\npoll_mode = "sleep"\n'
} >"$CONFIG"
start_sluice "$SLUICE" "$CONFIG" "$IO_PORT" "$DISC_PORT"

failures=()
trid() { echo "trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:$IO_PORT subnqn:$1"; }

log "spdk_nvme_identify, no host NQN in the transport ID (identify.txt)"
if timeout 120 "$SPDK_PEER" identify -r "$(trid "$OPEN_NQN")" >"$OUT_DIR/identify.txt" 2>&1; then
  if grep -qi 'failed' "$OUT_DIR/identify.txt"; then
    failures+=("spdk_nvme_identify reported failures: $(grep -i 'failed' "$OUT_DIR/identify.txt" | tr '\n' ';')")
  elif ! grep -q "$OPEN_NQN" "$OUT_DIR/identify.txt"; then
    failures+=("spdk_nvme_identify did not show the subsystem")
  else
    log "ok: identified $(grep -m1 'Model Number' "$OUT_DIR/identify.txt" | tr -s ' ')"
  fi
else
  tail_file "$OUT_DIR/identify.txt"
  failures+=("spdk_nvme_identify failed (exit status != 0)")
fi

log "spdk_nvme_perf 4 KiB random read QD32 3 s, no host NQN (perf.txt)"
if timeout 120 "$SPDK_PEER" perf -c 0x2 -q 32 -o 4096 -w randread -t 3 -r "$(trid "$OPEN_NQN")" \
    >"$OUT_DIR/perf.txt" 2>&1; then
  total=$(awk '/^Total/ {print $3}' "$OUT_DIR/perf.txt")
  if [ -z "$total" ] || awk -v t="$total" 'BEGIN { exit !(t <= 0) }'; then
    failures+=("spdk_nvme_perf counted no I/O: $(tail -n 3 "$OUT_DIR/perf.txt" | tr '\n' ' ')")
  # "CQ transport error -6" on the I/O qpair while perf tears it down is printed
  # against SPDK's own target too: not an error of the run.
  elif grep -iE 'error|failed' "$OUT_DIR/perf.txt" | grep -vq 'CQ transport error -6'; then
    failures+=("spdk_nvme_perf reported errors: $(grep -iE 'error|failed' "$OUT_DIR/perf.txt" | grep -v 'CQ transport error -6' | head -n 3 | tr '\n' ';')")
  else
    log "ok: $total IOPS (correctness run on a shared machine, not a speed measurement)"
  fi
else
  tail_file "$OUT_DIR/perf.txt"
  failures+=("spdk_nvme_perf failed (exit status != 0)")
fi

# spdk_nvme_identify generates a host NQN of its own; spdk_nvme_perf sends none.
log "an allow-list refuses an empty host NQN (perf-listed.txt)"
# (perf exits 0 even when it attached nothing: what counts is whether it ran I/O.)
timeout 120 "$SPDK_PEER" perf -c 0x2 -q 1 -o 4096 -w randread -t 1 -r "$(trid "$LISTED_NQN")" \
  >"$OUT_DIR/perf-listed.txt" 2>&1 || true
if grep -q '^Total' "$OUT_DIR/perf-listed.txt"; then
  failures+=("a subsystem with an allow-list admitted a host without a host NQN")
elif ! grep -q 'the host sent no Host NQN and the subsystem admits listed hosts only' "$OUT_DIR/sluice.log"; then
  failures+=("sluice did not log why it refused the empty host NQN")
else
  log "ok: refused, and sluice.log says why"
fi

if [ ${#failures[@]} -eq 0 ]; then
  log "PASS: SPDK's host connects without a host NQN, identifies with no failed command, runs perf (artifacts: $OUT_DIR)"
  exit 0
fi
log "FAIL: ${#failures[@]} problem(s):"
printf '  - %s\n' "${failures[@]}"
exit 1
