#!/usr/bin/env bash
# Interop: Sluice's own NVMe/TCP host (the `sluice` CLI over nvme-host-client)
# against (1) the real Linux kernel target (nvmet-tcp in a linux-nvme-peer QEMU
# guest, one boot), (2) SPDK's target (nvmf_tgt from ../shared/spdk-peer) and (3)
# `sluice serve`.
#
# Against each target: discover, connect with 2 I/O queues without and with header +
# data digests, id-ctrl / id-ns / smart-log, and 64 MiB of patterned data written
# and read back verified (once per digest setting).
#
# Usage: tests/interop/host-cli.sh
# Environment:
#   OUT=DIR           artifact root (default <repo>/target/interop); writes DIR/host-cli/
#   SLUICE_BIN=PATH   sluice binary (default: build target/release/sluice)
#   HOST_CLI_TARGETS  which targets, default "linux-nvmet spdk sluice"
# shellcheck disable=SC2317
set -euo pipefail

TEST_NAME=host-cli
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
INTEROP_REPO=$REPO
# shellcheck source=tests/interop/lib/common.sh
. "$REPO/tests/interop/lib/common.sh"

OUT_ROOT=${OUT:-$REPO/target/interop}
mkdir -p "$OUT_ROOT"
OUT_DIR=$(cd "$OUT_ROOT" && pwd)/$TEST_NAME
TARGETS=${HOST_CLI_TARGETS:-linux-nvmet spdk sluice}
DATA_MIB=64
PEER_NQN=nqn.2026-11.io.sluice:kernel-target
SPDK_NQN=nqn.2016-06.io.spdk:cnode1
SLUICE_NQN=nqn.2026-11.io.sluice:host-cli

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
if [[ " $TARGETS " == *" spdk "* ]]; then
  require_spdk_peer "${SPDK_PEER:-$REPO/../shared/spdk-peer/spdk-peer}"
fi

use_sluice_binary
[ -x "$SLUICE" ] || die "sluice binary $SLUICE not found"

# Below the kernel's ephemeral range (32768-60999 by default): a port that an
# outgoing connection holds as its local port (a peer's QEMU proxying, a CLI's
# connection) cannot be taken by a listener, and was, once (EADDRINUSE).
free_port_pair() {
  local p=$(( 20000 + RANDOM % 12000 ))
  while port_listening "$p" || port_listening "$((p + 1))"; do p=$((p + 2)); done
  echo "$p"
}

# The 64 MiB pattern: every 512-byte block carries its LBA and a fixed seed, so a
# block read from the wrong place or a stale block is caught by cmp.
PATTERN=$OUT_DIR/pattern.bin
python3 - "$PATTERN" "$DATA_MIB" <<'PY'
import struct, sys
path, mib = sys.argv[1], int(sys.argv[2])
with open(path, "wb") as out:
    for lba in range(mib * 2048):
        head = struct.pack("<QQ", lba, 0x5111CE)
        out.write((head * 32)[:512])
PY

CHECKS_OK=0
check() {  # check NAME CMD...: run CMD, log ok / FAIL with its output file
  local name=$1 out=$OUT_DIR/$CURRENT-$1.txt
  shift
  if "$@" >"$out" 2>&1; then
    CHECKS_OK=$((CHECKS_OK + 1))
    log "CHECK $CURRENT $name: ok"
  else
    tail_file "$out"
    die "CHECK $CURRENT $name failed (output: $out)"
  fi
}

expect_in() {  # expect_in FILE TEXT: FILE contains TEXT
  grep -qF -- "$2" "$1" || { tail_file "$1"; die "CHECK $CURRENT: $1 does not contain '$2'"; }
}

run_host_checks() {  # run_host_checks IO_PORT DISC_PORT NQN
  local io=$1 disc=$2 nqn=$3 digests
  local target=(-a 127.0.0.1 -s "$io" -n "$nqn")
  check discover "$SLUICE" discover -a 127.0.0.1 -s "$disc"
  expect_in "$OUT_DIR/$CURRENT-discover.txt" "$nqn"
  for digests in none both; do
    local flags=() suffix=''
    if [ "$digests" = both ]; then flags=(-g -G); suffix=-digests; fi
    check "connect$suffix" "$SLUICE" connect "${target[@]}" -i 2 "${flags[@]}"
    check "id-ctrl$suffix" "$SLUICE" id-ctrl "${target[@]}" "${flags[@]}"
    expect_in "$OUT_DIR/$CURRENT-id-ctrl$suffix.txt" "subnqn"
    check "id-ns$suffix" "$SLUICE" id-ns "${target[@]}" -N 1 "${flags[@]}"
    expect_in "$OUT_DIR/$CURRENT-id-ns$suffix.txt" "nsze"
    check "smart-log$suffix" "$SLUICE" smart-log "${target[@]}" "${flags[@]}"
    expect_in "$OUT_DIR/$CURRENT-smart-log$suffix.txt" "Data Units Written"
    check "write-64MiB$suffix" "$SLUICE" write "${target[@]}" -i 2 "${flags[@]}" -N 1 -b 0 -d "$PATTERN"
    check "read-64MiB$suffix" "$SLUICE" read "${target[@]}" -i 2 "${flags[@]}" -N 1 -b 0 \
      -z "${DATA_MIB}M" -d "$OUT_DIR/$CURRENT-readback$suffix.bin"
    check "verify-64MiB$suffix" cmp "$PATTERN" "$OUT_DIR/$CURRENT-readback$suffix.bin"
    rm -f "$OUT_DIR/$CURRENT-readback$suffix.bin"
  done
}

for CURRENT in $TARGETS; do
  port=$(free_port_pair)
  io_port=$port disc_port=$((port + 1))
  case $CURRENT in
    linux-nvmet)
      start_linux_target "$io_port" "$disc_port" "$PEER_NQN" 256
      run_host_checks "$io_port" "$disc_port" "$PEER_NQN"
      ;;
    spdk)
      # SPDK's target answers discovery on its I/O port.
      start_spdk_target "$io_port" "$SPDK_NQN" 256
      run_host_checks "$io_port" "$io_port" "$SPDK_NQN"
      ;;
    sluice)
      write_sluice_config "$OUT_DIR/sluice.toml" "$io_port" "$disc_port" "$SLUICE_NQN" 256 512 2
      start_sluice "$SLUICE" "$OUT_DIR/sluice.toml" "$io_port" "$disc_port"
      run_host_checks "$io_port" "$disc_port" "$SLUICE_NQN"
      ;;
    *) die "unknown target '$CURRENT' in HOST_CLI_TARGETS" ;;
  esac
  stop_pid "$TARGET_PID" "$TARGET_NAME" 30 TERM || true
  [ "$STOP_RC" -eq 0 ] || die "$TARGET_NAME exited with status $STOP_RC on SIGTERM"
  TARGET_PID=''
done

log "PASS: $CHECKS_OK checks ok against: $TARGETS"
