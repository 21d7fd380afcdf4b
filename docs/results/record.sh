#!/usr/bin/env bash
# Re-records the benchmark results in docs/results/ (see docs/results/README.md):
#
#   1. four-corners against the embedded target (RAM namespace), Sluice's host
#   2. four-corners against the Linux kernel target (nvmet, brd namespace, in a
#      linux-nvme-peer guest under QEMU), Sluice's host
#   3. four-corners over NVMe/TCP (embedded target on a file) and over iSCSI (tgt on a
#      file), both through fio: sluice bench --compare iscsi
#
# Each writes NAME.json, NAME.html and NAME.txt (the console output); the comparison
# writes NAME-nvme-tcp.json, NAME-iscsi.json, NAME.md, NAME.html, NAME.txt and the fio
# job files and logs in NAME-fio/. About 8 minutes in all.
#
# Usage: docs/results/record.sh [embedded|kernel|iscsi ...]   (default: all three)
# Environment:
#   SLUICE_BIN=PATH   sluice binary (default: cargo build --release, target/release/sluice)
#   SLUICE_FIO_OUT    where scripts/build-fio-engine.sh put the fio engines
#                     (default target/fio; the script is run when they are missing)
#   DURATION          measured seconds per run (default 15; the comparison uses 10)
#   KERNEL_PORT       host port of the kernel target (default 4620)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=$REPO/docs/results
LNP=${LNP:-$REPO/../shared/linux-nvme-peer}
DURATION=${DURATION:-15}
KERNEL_PORT=${KERNEL_PORT:-4620}
ENGINES=${SLUICE_FIO_OUT:-$REPO/target/fio}
say() { echo "record: $*" >&2; }
PEER_PID='' PEER_DIR=''
cleanup() {
  if [ -n "$PEER_PID" ]; then
    kill -TERM "$PEER_PID" 2>/dev/null || true
    wait "$PEER_PID" 2>/dev/null || true
  fi
  [ -z "$PEER_DIR" ] || rm -rf "$PEER_DIR"
}
trap cleanup EXIT

if [ -n "${SLUICE_BIN:-}" ]; then
  SLUICE=$SLUICE_BIN
else
  (cd "$REPO" && cargo build --release -p sluice --bin sluice --quiet)
  SLUICE=${CARGO_TARGET_DIR:-$REPO/target}/release/sluice
fi

# load average next to each recording: this machine is shared
load() { cut -d' ' -f1-3 /proc/loadavg; }

record_embedded() {
  say "four-corners, embedded target (load $(load))"
  "$SLUICE" bench --suite four-corners --duration "${DURATION}s" \
    --json "$OUT/four-corners-embedded.json" 2>&1 | tee "$OUT/four-corners-embedded.txt"
  echo "load average after: $(load)" >>"$OUT/four-corners-embedded.txt"
}

record_kernel() {
  local nqn=nqn.2026-11.io.sluice:kernel-target
  PEER_DIR=$(mktemp -d)
  say "starting the Linux kernel target on 127.0.0.1:$KERNEL_PORT (linux-nvme-peer, TCG guest)"
  TMPDIR=$PEER_DIR "$LNP" target --port "$KERNEL_PORT" --nqn "$nqn" --size-mib 1024 --backend brd \
    --ready-file "$PEER_DIR/ready" >"$PEER_DIR/target.log" 2>&1 </dev/null &
  PEER_PID=$!
  for _ in $(seq 1 300); do
    grep -qs READY "$PEER_DIR/ready" && break
    kill -0 "$PEER_PID" 2>/dev/null || { cat "$PEER_DIR/target.log" >&2; return 1; }
    sleep 1
  done
  grep -qs READY "$PEER_DIR/ready" || { say "the kernel target did not come up"; return 1; }
  say "four-corners, Linux kernel target (load $(load))"
  "$SLUICE" bench --suite four-corners --duration "${DURATION}s" \
    --target "tcp://127.0.0.1:$KERNEL_PORT/$nqn" \
    --json "$OUT/four-corners-linux-nvmet.json" 2>&1 | tee "$OUT/four-corners-linux-nvmet.txt"
  echo "load average after: $(load)" >>"$OUT/four-corners-linux-nvmet.txt"
  cleanup
  PEER_PID='' PEER_DIR=''
}

record_iscsi() {
  if [ ! -f "$ENGINES/libsluice_fio.so" ] || [ ! -f "$ENGINES/libfio_libiscsi.so" ]; then
    (cd "$REPO" && SLUICE_FIO_OUT=$ENGINES bash scripts/build-fio-engine.sh)
  fi
  say "four-corners, NVMe/TCP vs iSCSI (load $(load))"
  "$SLUICE" bench --compare iscsi --suite four-corners --duration 10s \
    --fio-engine-dir "$ENGINES" \
    --json "$OUT/four-corners-nvme-tcp-vs-iscsi" 2>&1 | tee "$OUT/four-corners-nvme-tcp-vs-iscsi.txt"
  echo "load average after: $(load)" >>"$OUT/four-corners-nvme-tcp-vs-iscsi.txt"
  # fio's raw json+ output (a report per second with histograms) is about 12 MB: keep
  # the job files and logs, which repeat the runs, not the raw output.
  find "$OUT/four-corners-nvme-tcp-vs-iscsi-fio" \( -name '*.json' -o -name '*.log' -empty \) -delete
}

mkdir -p "$OUT"
[ $# -gt 0 ] || set -- embedded kernel iscsi
for what in "$@"; do
  case $what in
    embedded) record_embedded ;;
    kernel) record_kernel ;;
    iscsi) record_iscsi ;;
    *) say "unknown recording '$what' (embedded, kernel, iscsi)"; exit 2 ;;
  esac
done
# The machine description for README.md.
{
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) logical CPUs"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "kernel: $(uname -r); Debian $(cat /etc/debian_version)"
  echo "fio: $(fio --version 2>/dev/null || echo none); tgt: $(tgtadm --version 2>/dev/null || echo none)"
} >"$OUT/machine.txt"
say "done: $OUT"
