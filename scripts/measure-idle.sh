#!/usr/bin/env bash
# What idle connections cost the target (issue 46, scale: "an idle connection costs at
# most 16 KiB"; 10,000 idle connections held 10 minutes, RSS recorded): `sluice serve`
# (one runtime thread on core 0, one RAM namespace) and `sluice bench hold` on core 1,
# which brings up CONTROLLERS controllers the way the Linux host does (an admin queue
# of 32 entries with KATO, CC.EN, Identify, Number of Queues, an Asynchronous Event
# Request; one I/O queue of 128 entries and one 4 KiB read on it), each a host of its
# own, from one thread, then holds them idle for SECONDS with a Keep Alive every
# KATO / 2 on each admin queue, the controllers' keep-alives spread evenly over that
# interval (as those of hosts that connected at different times are).
#
# Reported (a Markdown table): connections, time to bring them all up, the target's
# RSS before the first connection, with every controller up (after the reads) and at
# the end of the hold, the RSS per connection ((with all up - before) / connections,
# and the same at the end), the target's open files, the CPU time the target used
# during the hold (utime + stime from /proc; idle connections should cost next to
# nothing: the keep-alives are all the work there is), keep-alives sent and answered,
# and failures (with the first one).
#
#   scripts/measure-idle.sh [--controllers C] [--seconds S] [--keep-alive-ms MS]
#                           [--poll-mode sleep|adaptive|busy-poll] [--out DIR]
#
# Defaults: 5,000 controllers (10,000 connections), 600 s, KATO 10,000 ms (a Keep Alive
# every 5 s per controller), the target's default poll mode (adaptive). Each side holds
# one file descriptor per connection: the soft open-file limit is raised to the hard
# one here, and the run refuses to start when that is below 2 x C + 256.
#
# SLUICE_BIN is the target (built here, release, unless set). HOLDER_BIN runs `sluice
# bench hold` (default: SLUICE_BIN); set it to a build that has the subcommand to
# measure a target built before it, e.g. a baseline:
#
#   SLUICE_BIN=/path/to/baseline/sluice HOLDER_BIN=target/release/sluice \
#     scripts/measure-idle.sh --controllers 500 --seconds 20
#
# Loopback only. Output in OUT (default target/measure-idle): serve.log, hold.log,
# hold.json, summary.md.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
CONTROLLERS=5000
HOLD_SECONDS=600
KEEP_ALIVE_MS=10000
POLL_MODE=adaptive
OUT=${OUT:-$REPO/target/measure-idle}

while [ $# -gt 0 ]; do
  case $1 in
    --controllers) CONTROLLERS=$2; shift 2 ;;
    --seconds) HOLD_SECONDS=$2; shift 2 ;;
    --keep-alive-ms) KEEP_ALIVE_MS=$2; shift 2 ;;
    --poll-mode) POLL_MODE=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "measure-idle: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

log() { echo "[measure-idle] $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"

[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs (target on 0, holder on 1)"
(( CONTROLLERS >= 1 && HOLD_SECONDS >= 1 )) || die "--controllers and --seconds are at least 1"
case $POLL_MODE in sleep|adaptive|busy-poll) ;; *) die "--poll-mode is sleep, adaptive or busy-poll" ;; esac
command -v python3 >/dev/null || die "python3 is missing"
command -v taskset >/dev/null || die "taskset (util-linux) is missing"

# One descriptor per connection on each side (both inherit this shell's limit).
NEEDED=$(( 2 * CONTROLLERS + 256 ))
HARD=$(ulimit -Hn)
if [ "$HARD" != unlimited ] && [ "$HARD" -lt "$NEEDED" ]; then
  die "$CONTROLLERS controllers need $NEEDED open files per process, but the hard limit is $HARD: raise it (as root: ulimit -Hn $NEEDED, or /etc/security/limits.conf)"
fi
ulimit -n "$HARD"

mkdir -p "$OUT"
if [ -z "${SLUICE_BIN:-}" ]; then
  (cd "$REPO" && cargo build --release -p sluice --bin sluice --quiet)
  SLUICE_BIN=${CARGO_TARGET_DIR:-$REPO/target}/release/sluice
fi
HOLDER_BIN=${HOLDER_BIN:-$SLUICE_BIN}
[ -x "$SLUICE_BIN" ] || die "SLUICE_BIN $SLUICE_BIN is not an executable"
"$HOLDER_BIN" bench hold --help >/dev/null 2>&1 \
  || die "HOLDER_BIN $HOLDER_BIN has no \`sluice bench hold\`: set HOLDER_BIN to a build that has it"

PORT=$(free_port)
NQN=nqn.2026-11.io.sluice:idle
{
  printf '[[listener]]\naddress = "127.0.0.1:%s"\n\n' "$PORT"
  printf '[[subsystem]]\nnqn = "%s"\nallow_any_host = true\n\n' "$NQN"
  printf '[[subsystem.namespace]]\nnsid = 1\nbackend = "ram"\nsize = "16MiB"\nblock_size = 4096\n\n'
  printf '[runtime]\nthreads = 1\npoll_mode = "%s"\n' "$POLL_MODE"
} >"$OUT/idle.toml"

SERVE_PID=''
cleanup() {
  [ -n "$SERVE_PID" ] && { kill "$SERVE_PID" 2>/dev/null; wait "$SERVE_PID" 2>/dev/null || true; }
  return 0
}
trap cleanup EXIT

start_serve() {  # start_serve CONFIG: sets SERVE_PID (not in a subshell)
  taskset -c 0 "$SLUICE_BIN" serve --config "$1" --no-rpc-socket --log-level warn >"$OUT/serve.log" 2>&1 &
  SERVE_PID=$!
  for _ in $(seq 1 1200); do
    grep -q '^sluice: ready' "$OUT/serve.log" && return 0
    kill -0 "$SERVE_PID" 2>/dev/null || { cat "$OUT/serve.log" >&2; die "sluice serve exited"; }
    sleep 0.1
  done
  die "sluice serve not ready within 120 s"
}
stop_serve() { kill "$SERVE_PID"; wait "$SERVE_PID" || true; SERVE_PID=''; }
stats() {  # stats: "rss_kib threads fds" of the target
  echo "$(awk '/^VmRSS:/{print $2}' "/proc/$SERVE_PID/status") $(awk '/^Threads:/{print $2}' "/proc/$SERVE_PID/status") $(find "/proc/$SERVE_PID/fd" -mindepth 1 | wc -l)"
}

start_serve "$OUT/idle.toml"
read -r _ threads _ < <(stats)
log "target $SLUICE_BIN ready (pid $SERVE_PID, $threads threads, poll mode $POLL_MODE); holding $CONTROLLERS controllers for $HOLD_SECONDS s"
HOLD_STATUS=0
taskset -c 1 "$HOLDER_BIN" bench hold --target "tcp://127.0.0.1:$PORT/$NQN" --controllers "$CONTROLLERS" \
  --seconds "$HOLD_SECONDS" --keep-alive-ms "$KEEP_ALIVE_MS" --target-pid "$SERVE_PID" --json "$OUT/hold.json" \
  >"$OUT/hold.log" 2>&1 || HOLD_STATUS=$?
[ -f "$OUT/hold.json" ] || { tail -20 "$OUT/hold.log" >&2; die "sluice bench hold failed (exit $HOLD_STATUS) without a report"; }
kill -0 "$SERVE_PID" 2>/dev/null || { tail -20 "$OUT/serve.log" >&2; die "sluice serve died during the hold"; }
stop_serve

python3 - "$OUT/hold.json" "$SLUICE_BIN" "$POLL_MODE" <<'PY' | tee "$OUT/summary.md"
import json, sys
path, binary, poll_mode = sys.argv[1:4]
r = json.load(open(path))
t = r["target"]
b, a, e = t["before"], t["after_open"], t["end"]
mib = lambda kib: f"{kib / 1024:.1f}"
cpu = t["hold_cpu_seconds"]
failures = str(r["failures"]) + (f" ({r['first_error']})" if r["first_error"] else "")
print("| connections | time to open | target RSS MiB before / all up / end | KiB per connection (all up / end) "
      "| open files before / all up / end | target CPU in the hold | keep-alives sent / answered | failures |")
print("| --: | --: | --: | --: | --: | --: | --: | --- |")
print(f"| {r['connections']} | {r['open_seconds']:.2f} s | {mib(b['rss_kib'])} / {mib(a['rss_kib'])} / {mib(e['rss_kib'])} "
      f"| {t['kib_per_connection']:.1f} / {t['kib_per_connection_at_end']:.1f} "
      f"| {b['open_files']} / {a['open_files']} / {e['open_files']} "
      f"| {cpu:.2f} s in {r['hold_seconds']:.0f} s ({cpu / r['hold_seconds'] * 100:.2f} % of a core) "
      f"| {r['keep_alives_sent']} / {r['keep_alives_answered']} | {failures} |")
print()
print(f"target: {binary} (one runtime thread on core 0, poll mode {poll_mode}); {r['controllers_up']} of "
      f"{r['controllers_requested']} controllers up, each an admin queue (32 entries, KATO "
      f"{r['keep_alive_timeout_ms']} ms, a Keep Alive every {r['keep_alive_timeout_ms'] // 2} ms) and one I/O queue "
      f"(128 entries, one 4 KiB read); {r['controllers_at_end']} still up at the end.")
PY
[ "$HOLD_STATUS" -eq 0 ] || die "sluice bench hold reported failures (exit $HOLD_STATUS): $OUT/hold.log"
