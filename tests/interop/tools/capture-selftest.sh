#!/usr/bin/env bash
# Self-test of the interop capture check (capture_check in tests/interop/lib/common.sh):
# captures hand-built NVMe/TCP exchanges (tools/nvme_tcp_traffic.py) on lo with
# tshark and checks that the clean one passes and that each broken one fails for
# the right reason. Guards the tshark display filters against tshark changes.
# Runs in a few seconds; needs tshark and python3. Part of scripts/test.sh.
#
# Usage: tests/interop/tools/capture-selftest.sh   (artifacts: ${OUT:-target/interop}/capture-selftest/)
# shellcheck disable=SC2317
set -euo pipefail

TEST_NAME=capture-selftest
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
INTEROP_REPO=$REPO
# shellcheck source=tests/interop/lib/common.sh
. "$REPO/tests/interop/lib/common.sh"

command -v tshark >/dev/null || die "tshark is not installed: run scripts/setup.sh"
command -v python3 >/dev/null || die "python3 is not installed: run scripts/setup.sh"
OUT_ROOT=${OUT:-$REPO/target/interop}
mkdir -p "$OUT_ROOT"
OUT_DIR=$(cd "$OUT_ROOT" && pwd)/$TEST_NAME
rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR"

# scenario -> the check that must fail ("" = must pass)
scenarios=(good bad-digest malformed termreq bad-type)
declare -A expect=(
  [good]=''
  [bad-digest]='bad digests'
  [malformed]='errors (malformed or expert error)'
  [termreq]='termination requests'
  [bad-type]='unknown pdu types'
)

# one free port per scenario, all in one capture
ports=() p=$(( 20000 + RANDOM % 12000 ))
while [ ${#ports[@]} -lt ${#scenarios[@]} ]; do
  port_listening "$p" || ports+=("$p")
  p=$((p + 1))
done

cleanup() { [ -z "$TSHARK_PID" ] || stop_pid "$TSHARK_PID" tshark 10 TERM >/dev/null 2>&1 || true; }
trap cleanup EXIT

capture_start "$OUT_DIR/selftest.pcap" "$OUT_DIR/tshark-capture.log" "${ports[@]}" >/dev/null ||
  die "tshark could not start capturing"
for i in "${!scenarios[@]}"; do
  python3 "$HERE/nvme_tcp_traffic.py" "${ports[$i]}" "${scenarios[$i]}" ||
    die "traffic generator failed for ${scenarios[$i]}"
done
sleep 0.5
capture_stop "$OUT_DIR/tshark-capture.log" >/dev/null

failed=0
for i in "${!scenarios[@]}"; do
  s=${scenarios[$i]}
  want=${expect[$s]}
  digests=0; [ "$s" = good ] && digests=1
  rc=0
  capture_check "$OUT_DIR/selftest.pcap" "$OUT_DIR/$s.txt" "$digests" "${ports[$i]}" >"$OUT_DIR/$s.log" 2>&1 || rc=$?
  if [ -z "$want" ]; then
    if [ "$rc" -eq 0 ] && [ "${CAPTURE_COUNT[nvme-tcp frames]}" -gt 0 ]; then
      echo "  ok    $s: passes (${CAPTURE_COUNT[nvme-tcp frames]} NVMe/TCP frames, good digests ${CAPTURE_COUNT[header digest good]}/${CAPTURE_COUNT[data digest good]})"
    else
      echo "  FAIL  $s: expected the capture check to pass"; sed 's/^/        /' "$OUT_DIR/$s.log"; failed=1
    fi
  else
    if [ "$rc" -ne 0 ] && [ "${CAPTURE_COUNT[$want]:-0}" -gt 0 ]; then
      echo "  ok    $s: fails with $want (${CAPTURE_COUNT[$want]} frame(s))"
    else
      echo "  FAIL  $s: expected the capture check to fail with '$want' (status $rc)"
      sed 's/^/        /' "$OUT_DIR/$s.log"; failed=1
    fi
  fi
done
[ "$failed" -eq 0 ] || die "the capture check does not behave as expected (artifacts: $OUT_DIR)"
log "capture check self-test passed (${#scenarios[@]} scenarios)"
