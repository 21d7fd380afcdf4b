#!/usr/bin/env bash
# Interop: the real Linux kernel NVMe/TCP host (Linux 6.1 nvme-tcp, nvme-cli 2.3,
# fio 3.33 in a linux-nvme-peer QEMU guest) against `sluice serve`.
#
# One guest boot runs everything (tests/interop/guest/linux-host-guest.sh):
#   discovery on ports 8009 and 4420, connect, nvme list / id-ctrl / id-ns /
#   smart-log, fio write+verify (4 KiB random qd32 x 2 jobs, 128 KiB and 1 MiB
#   sequential), disconnect, reconnect with header + data digests and 2 I/O
#   queues, fio write+verify, disconnect, and a clean guest kernel log.
# The traffic is captured with tshark on lo and dissected as NVMe/TCP (digests
# verified): it must hold NVMe/TCP PDUs and no malformed / error frames.
# sluice must stop with exit status 0 on SIGTERM.
#
# Usage: tests/interop/linux-host.sh
# Environment:
#   OUT=DIR              artifact root (default <repo>/target/interop); this test
#                        writes to DIR/linux-host/
#   SLUICE_BIN=PATH      sluice binary (default: build target/release/sluice)
#   INTEROP_TARGET=T     sluice (default) | linux-nvmet: run the same checks
#                        against the Linux kernel target (harness self-check)
#   GUEST_TIMEOUT=S      bound for the whole guest run (default 900)
#   INTEROP_IO_PORT=P    I/O + discovery port (default 4420)
#   INTEROP_DISC_PORT=P  discovery-only port (default 8009); when 4420 or 8009 is
#                        taken and neither variable is set, two free ports are used
#                        instead (with a warning)
#   SLUICE_LOG=...       sluice's log filter (default info)
# Functions here are also called indirectly (traps, wait_for), which ShellCheck
# cannot see:
# shellcheck disable=SC2317
set -euo pipefail

TEST_NAME=linux-host
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
INTEROP_REPO=$REPO
# shellcheck source=tests/interop/lib/common.sh
. "$REPO/tests/interop/lib/common.sh"

OUT_ROOT=${OUT:-$REPO/target/interop}
mkdir -p "$OUT_ROOT"
OUT_DIR=$(cd "$OUT_ROOT" && pwd)/$TEST_NAME
TARGET_KIND=${INTEROP_TARGET:-sluice}
GUEST_TIMEOUT=${GUEST_TIMEOUT:-900}
IO_PORT=${INTEROP_IO_PORT:-4420}
DISC_PORT=${INTEROP_DISC_PORT:-8009}
NQN=nqn.2026-11.io.sluice:interop
SERIAL=SLUICEINTEROP01
NS_SIZE_MIB=256
BLOCK_SIZE=512
GUEST_SCRIPT=$REPO/tests/interop/guest/linux-host-guest.sh

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

# ---------------------------------------------------------------------------
# prerequisites
# ---------------------------------------------------------------------------
for tool in tshark ss capinfos; do
  command -v "$tool" >/dev/null || die "'$tool' is not installed: run scripts/setup.sh"
done
[ -x "$LNP" ] || die "linux-nvme-peer not found at $LNP (expected in ../shared/ next to the repository)"
[ -r "$GUEST_SCRIPT" ] || die "guest script $GUEST_SCRIPT is missing"
case $TARGET_KIND in sluice | linux-nvmet) ;; *) die "INTEROP_TARGET must be sluice or linux-nvmet" ;; esac

rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR/guest" "$OUT_DIR/peer"
for p in $IO_PORT $DISC_PORT; do
  port_listening "$p" || continue
  if [ -n "${INTEROP_IO_PORT:-}${INTEROP_DISC_PORT:-}" ]; then
    die "TCP port $p is already in use (stop whatever listens there first):
$(port_owner "$p")"
  fi
  # the default ports are taken (e.g. by a `sluice serve` someone runs by hand):
  # the port numbers do not matter to the test, so take two free ones instead
  warn "TCP port $p is already in use, by:
$(port_owner "$p")
  using two free ports instead (set INTEROP_IO_PORT / INTEROP_DISC_PORT to choose)"
  p=$(( 20000 + RANDOM % 12000 ))
  while port_listening "$p" || port_listening "$((p + 1))"; do p=$((p + 2)); done
  IO_PORT=$p DISC_PORT=$((p + 1))
  break
done

log "target: $TARGET_KIND; subsystem $NQN on 127.0.0.1:$IO_PORT (I/O + discovery) and :$DISC_PORT (discovery)"
log "artifacts: $OUT_DIR"

# ---------------------------------------------------------------------------
# start the target
# ---------------------------------------------------------------------------
if [ "$TARGET_KIND" = sluice ]; then
  use_sluice_binary

  write_sluice_config "$OUT_DIR/sluice.toml" "$IO_PORT" "$DISC_PORT" "$NQN" "$NS_SIZE_MIB" "$BLOCK_SIZE" 2 "$SERIAL"
  start_sluice "$SLUICE" "$OUT_DIR/sluice.toml" "$IO_PORT" "$DISC_PORT"
  EXPECT_SERIAL=$SERIAL
else
  start_linux_target "$IO_PORT" "$DISC_PORT" "$NQN" "$NS_SIZE_MIB"
  EXPECT_SERIAL=''
fi
log "$TARGET_NAME is up (pid $TARGET_PID)"

# ---------------------------------------------------------------------------
# capture, then the guest
# ---------------------------------------------------------------------------
capture_start "$OUT_DIR/capture.pcap" "$OUT_DIR/tshark-capture.log" "$IO_PORT" "$DISC_PORT" ||
  die "tshark could not start capturing on lo"

EXPECT_NSZE=$(( NS_SIZE_MIB * 1024 * 1024 / BLOCK_SIZE ))
EXPECT_LBADS=9
guest_env="IO_PORT=$IO_PORT DISC_PORT=$DISC_PORT EXPECT_SERIAL='$EXPECT_SERIAL' EXPECT_NSZE=$EXPECT_NSZE EXPECT_LBADS=$EXPECT_LBADS"
log "booting the Linux host guest (timeout ${GUEST_TIMEOUT}s; output: guest.log, details: guest/)"
t_guest=$SECONDS
set +e
TMPDIR=$OUT_DIR/peer "$LNP" initiator --keep --timeout "$GUEST_TIMEOUT" \
  --target-port "$IO_PORT" --subnqn "$NQN" \
  --share "$OUT_DIR/guest" --add "$GUEST_SCRIPT:/root/linux-host-guest.sh" --add "$REPO/tests/interop/guest/checks.sh:/root/checks.sh" \
  -- "$guest_env sh /root/linux-host-guest.sh" </dev/null 2>&1 | tee "$OUT_DIR/guest.log"
guest_rc=${PIPESTATUS[0]}
set -e
log "guest finished with status $guest_rc after $((SECONDS - t_guest))s"
# keep the guest's kernel console log with the artifacts
console=$(find "$OUT_DIR/peer" -name console.log -print -quit 2>/dev/null || true)
[ -n "$console" ] && tr -d '\r' <"$console" >"$OUT_DIR/guest-console.log"

# ---------------------------------------------------------------------------
# stop the target and the capture
# ---------------------------------------------------------------------------
failures=()
[ "$guest_rc" -eq 0 ] || {
  case $guest_rc in
    124) failures+=("guest run timed out after ${GUEST_TIMEOUT}s") ;;
    125) failures+=("linux-nvme-peer harness/boot error (status 125; see guest.log and peer/)") ;;
    *) failures+=("guest checks failed (status $guest_rc)") ;;
  esac
}

stop_target
if [ "$TARGET_KIND" = sluice ]; then
  n_err=$(grep -c -E '(^|[^[:alnum:]])ERROR([^[:alnum:]]|$)' "$OUT_DIR/sluice.log" || true)
  if [ "$n_err" -ne 0 ]; then
    log "note: sluice.log has $n_err ERROR line(s):"
    grep -E '(^|[^[:alnum:]])ERROR([^[:alnum:]]|$)' "$OUT_DIR/sluice.log" | head -n 10 | sed 's/^/  | /'
  fi
fi

capture_stop "$OUT_DIR/tshark-capture.log"

# ---------------------------------------------------------------------------
# dissect the capture
# ---------------------------------------------------------------------------
log "dissecting the capture (NVMe/TCP on ports $IO_PORT and $DISC_PORT, digests verified)"
if ! capture_check "$OUT_DIR/capture.pcap" "$OUT_DIR/tshark-summary.txt" 1 "$IO_PORT" "$DISC_PORT"; then
  failures+=("capture check failed (see tshark-summary.txt)")
fi

# ---------------------------------------------------------------------------
# verdict
# ---------------------------------------------------------------------------
n_ok=$(grep -c '^CHECK .*: ok$' "$OUT_DIR/guest.log" || true)
mapfile -t failed_checks < <(grep '^CHECK .*: FAIL' "$OUT_DIR/guest.log" || true)
{
  echo "linux-host interop against $TARGET_NAME ($(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?'))"
  echo "guest checks ok: $n_ok, failed: ${#failed_checks[@]}"
  printf '  %s\n' "${failed_checks[@]}"
  echo "problems: ${#failures[@]}"
  printf '  %s\n' "${failures[@]}"
} >"$OUT_DIR/result.txt"

if [ ${#failures[@]} -eq 0 ]; then
  log "PASS: $n_ok guest checks ok, capture clean, $TARGET_NAME stopped cleanly (artifacts: $OUT_DIR)"
  exit 0
fi
log "FAIL: ${#failures[@]} problem(s):"
printf '  - %s\n' "${failures[@]}"
[ ${#failed_checks[@]} -eq 0 ] || { echo "  failed guest checks:"; printf '    %s\n' "${failed_checks[@]}"; }
echo "  artifacts: $OUT_DIR (guest.log, guest/*.txt, sluice.log, capture.pcap, tshark-summary.txt)"
exit 1
