#!/usr/bin/env bash
# Interop: `sluice bench --driver fio` and `sluice bench --compare iscsi` end to end,
# in miniature (a smoke test of the plumbing, not a measurement):
#
#   1. builds the fio engines (scripts/build-fio-engine.sh: Sluice's engine and fio's
#      libiscsi engine) and target/release/sluice
#   2. --driver fio, suite quick at scale mini against the embedded target: exit 0,
#      a valid result with driver "fio", I/O in every run, no errors, the fio job
#      files and fio's JSON kept next to the result
#   3. --compare iscsi, suite four-corners at scale mini: Debian's tgtd on loopback,
#      both results valid, the side-by-side table with all six runs, and afterwards
#      no tgtd left running, no management socket and no scratch directory left
#   4. Ctrl-C during the iSCSI half (SIGINT to the process group, as a terminal
#      sends it, which also reaches fio but not tgtd): exit 130, a partial iSCSI
#      result, tgtd stopped and everything cleaned up as in 3
#
# Usage: tests/interop/bench-fio.sh
# Environment:
#   OUT=DIR          artifact root (default <repo>/target/interop); this test writes
#                    to DIR/bench-fio/
#   SLUICE_BIN=PATH  sluice binary (default: build target/release/sluice)
# Functions here are also called indirectly (traps, wait_for):
# shellcheck disable=SC2317
set -euo pipefail

TEST_NAME=bench-fio
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
INTEROP_REPO=$REPO
# shellcheck source=tests/interop/lib/common.sh
. "$REPO/tests/interop/lib/common.sh"

OUT_ROOT=${OUT:-$REPO/target/interop}
mkdir -p "$OUT_ROOT"
OUT_DIR=$(cd "$OUT_ROOT" && pwd)/$TEST_NAME
rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR"

BENCH_PID=''
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$BENCH_PID" ] && { stop_pid "$BENCH_PID" "sluice bench" 30 INT || true; }
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

for tool in fio python3 setsid; do
  command -v "$tool" >/dev/null || die "'$tool' is not installed: run scripts/setup.sh"
done
for tool in tgtd tgtadm; do
  PATH=$PATH:/usr/sbin:/sbin command -v "$tool" >/dev/null ||
    die "'$tool' is not installed (Debian package tgt): run scripts/setup.sh"
done
[ -f /usr/include/iscsi/iscsi.h ] ||
  die "libiscsi-dev is not installed (fio's libiscsi engine needs it): run scripts/setup.sh"

# ---------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------
log "building the fio engines (scripts/build-fio-engine.sh; log: build-engine.log)"
if ! ENGINE=$(cd "$REPO" && bash scripts/build-fio-engine.sh --print-path 2>"$OUT_DIR/build-engine.log"); then
  tail_file "$OUT_DIR/build-engine.log" 40
  die "building the fio engines failed"
fi
ENGINE_DIR=$(dirname "$(printf '%s\n' "$ENGINE" | tail -n 1)")
[ -f "$ENGINE_DIR/libsluice_fio.so" ] || die "no libsluice_fio.so in $ENGINE_DIR"
[ -f "$ENGINE_DIR/libfio_libiscsi.so" ] ||
  { tail_file "$OUT_DIR/build-engine.log"; die "the build did not produce $ENGINE_DIR/libfio_libiscsi.so"; }
log "engines: $ENGINE_DIR/libsluice_fio.so, $ENGINE_DIR/libfio_libiscsi.so"

use_sluice_binary
[ -x "$SLUICE" ] || die "sluice binary $SLUICE not found"

failures=()

# check_results PYTHON-ARGS...: runs the checks below on result files; prints one line
# per result and fails with what is wrong
check_results() {
  python3 - "$@" <<'PY'
import json, sys
mode, *paths = sys.argv[1:]
bad = []
for path in paths:
    r = json.load(open(path))
    runs = r["runs"]
    print("  %s: driver %s, target %s/%s, %d run(s), partial %s" % (
        path.rsplit("/", 1)[-1], r["driver"], r["target"]["kind"], r["target"]["backend"],
        len(runs), r["partial"]))
    if r["schema"] != "sluice-bench/3": bad.append(path + ": schema " + r["schema"])
    if any(run["schedule"] is not None for run in runs): bad.append(path + ": fio runs have no schedule")
    # The embedded target's split of each run's time; none for tgt.
    embedded = r["target"]["kind"] == "embedded"
    for run in runs:
        phases = run["target_phases_us"]
        if embedded and not r["partial"] and (phases is None or phases["commands"] < run["ios"]):
            bad.append("%s: %s: target split %r for %d I/Os" % (path, run["name"], phases, run["ios"]))
        if not embedded and phases is not None: bad.append("%s: %s: a split from tgt" % (path, run["name"]))
    if r["driver"] != "fio": bad.append(path + ": driver " + r["driver"])
    if mode == "partial":
        if not r["partial"]: bad.append(path + ": not marked partial")
        continue
    if r["partial"]: bad.append(path + ": partial")
    if not runs: bad.append(path + ": no runs")
    for run in runs:
        if run["ios"] <= 0: bad.append("%s: %s did no I/O" % (path, run["name"]))
        if run["errors"]: bad.append("%s: %s had %d errors" % (path, run["name"], run["errors"]))
        if run["cpu"]["initiator_seconds"] <= 0: bad.append("%s: %s: no initiator CPU" % (path, run["name"]))
        if run["cpu"]["target_seconds"] is None: bad.append("%s: %s: no target CPU" % (path, run["name"]))
        if not run["time_series"]: bad.append("%s: %s: no time series" % (path, run["name"]))
for b in bad: print("  PROBLEM: " + b)
sys.exit(1 if bad else 0)
PY
}

# leftovers: tgtd processes, management sockets and scratch directories now
leftovers() {
  { pgrep -x tgtd || true; ls /var/run/tgtd 2>/dev/null || true; ls -d /tmp/sluice-bench-[0-9]* 2>/dev/null || true; } | sort
}
before=$(leftovers)

# ---------------------------------------------------------------------------
# 2. --driver fio
# ---------------------------------------------------------------------------
log "sluice bench --driver fio --suite quick --scale mini"
if "$SLUICE" bench --driver fio --fio-engine-dir "$ENGINE_DIR" --suite quick --scale mini \
    --namespace-size 64MiB --json "$OUT_DIR/quick-fio.json" >"$OUT_DIR/quick-fio.out" 2>&1; then
  check_results full "$OUT_DIR/quick-fio.json" || failures+=("--driver fio: bad result (quick-fio.json)")
  n=$(find "$OUT_DIR/quick-fio-fio" -name '*.fio' | wc -l)
  [ "$n" -ge 9 ] || failures+=("--driver fio: $n fio job files kept, expected 9")
else
  tail_file "$OUT_DIR/quick-fio.out"
  failures+=("sluice bench --driver fio failed (quick-fio.out)")
fi

# ---------------------------------------------------------------------------
# 3. --compare iscsi
# ---------------------------------------------------------------------------
log "sluice bench --compare iscsi --suite four-corners --scale mini"
if "$SLUICE" bench --compare iscsi --fio-engine-dir "$ENGINE_DIR" --suite four-corners --scale mini \
    --namespace-size 64MiB --json "$OUT_DIR/compare" >"$OUT_DIR/compare.out" 2>&1; then
  check_results full "$OUT_DIR/compare-nvme-tcp.json" "$OUT_DIR/compare-iscsi.json" ||
    failures+=("--compare iscsi: bad results")
  rows=$(grep -c '^| [0-9]' "$OUT_DIR/compare.md" || true)
  [ "$rows" -eq 6 ] || failures+=("--compare iscsi: $rows rows in compare.md, expected 6")
  grep -q 'iscsi-tgt' "$OUT_DIR/compare-iscsi.json" || failures+=("--compare iscsi: target kind is not iscsi-tgt")
  sed -n '/^| run/,$p' "$OUT_DIR/compare.md" | cut -c1-150 | sed 's/^/  /'
else
  tail_file "$OUT_DIR/compare.out"
  failures+=("sluice bench --compare iscsi failed (compare.out)")
fi
after=$(leftovers)
[ "$after" = "$before" ] ||
  failures+=("--compare iscsi left something behind: $(comm -13 <(echo "$before") <(echo "$after") | tr '\n' ' ')")

# ---------------------------------------------------------------------------
# 4. Ctrl-C during the iSCSI half
# ---------------------------------------------------------------------------
log "sluice bench --compare iscsi, Ctrl-C (SIGINT to its process group) during the iSCSI half"
setsid "$SLUICE" bench --compare iscsi --fio-engine-dir "$ENGINE_DIR" --suite four-corners \
  --duration 2s --threads 2 --queue-depth 4 --namespace-size 64MiB \
  --json "$OUT_DIR/interrupted" >"$OUT_DIR/interrupted.out" 2>&1 &
BENCH_PID=$!
tgtd_child() {
  kill -0 "$BENCH_PID" 2>/dev/null || return 2
  pgrep -P "$BENCH_PID" -x tgtd >/dev/null
}
if wait_for 180 "tgtd started by the bench" tgtd_child; then
  sleep 3
  if [ "$(ps -o pgid= -p "$BENCH_PID" | tr -d ' ')" = "$BENCH_PID" ]; then
    kill -INT -- "-$BENCH_PID"
  else
    kill -INT "$BENCH_PID"
  fi
  stop_pid "$BENCH_PID" "sluice bench" 60 CONT || true
  rc=$STOP_RC
  BENCH_PID=''
  if [ "$rc" -ne 130 ]; then
    tail_file "$OUT_DIR/interrupted.out"
    failures+=("interrupted --compare iscsi exited with $rc, expected 130")
  fi
  check_results partial "$OUT_DIR/interrupted-iscsi.json" ||
    failures+=("interrupted --compare iscsi: the iSCSI result is not a partial result")
else
  tail_file "$OUT_DIR/interrupted.out"
  failures+=("the bench never started tgtd (interrupted.out)")
fi
after=$(leftovers)
[ "$after" = "$before" ] ||
  failures+=("the interrupted bench left something behind: $(comm -13 <(echo "$before") <(echo "$after") | tr '\n' ' ')")

if [ ${#failures[@]} -eq 0 ]; then
  log "PASS: --driver fio and --compare iscsi (with Ctrl-C) work, tgtd stopped cleanly (artifacts: $OUT_DIR)"
  exit 0
fi
log "FAIL: ${#failures[@]} problem(s):"
printf '  - %s\n' "${failures[@]}"
echo "  artifacts: $OUT_DIR"
exit 1
