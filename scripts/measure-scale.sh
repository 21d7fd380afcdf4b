#!/usr/bin/env bash
# Many connections and many namespaces on one target (the target-speed issue's scale
# goal): `sluice serve` (one runtime thread on core 0) with SUBSYSTEMS x NAMESPACES
# RAM namespaces, driven by fio with Sluice's engine (fio/sluice_engine.c) on core 1,
# 4 KiB random read at one total depth, two ways, interleaved for ROUNDS rounds:
#
#   one      one fio job: one controller, one I/O queue on namespace 1 of subsystem 1,
#            at QD JOBS
#   many     JOBS fio jobs (threads), each its own controller (an admin and an I/O
#            connection: 2 x JOBS connections) on its own namespace, spread over
#            every subsystem, QD 1 each
#
# Both ways use host_io=sleep (JOBS spinning threads on one core would measure the
# spinning), and the target runs in POLL_MODE (default sleep: an adaptive thread spins
# between requests that arrive every few tens of microseconds, and its CPU would
# measure the spinning). The initiator may bound the many-connection way; the target's
# CPU per I/O (from /proc) says what the target itself pays. Also reported: the target's RSS,
# threads and open files with one namespace, with all of them idle, and during the
# many-connection run.
#
#   scripts/measure-scale.sh [--subsystems S] [--namespaces N] [--jobs J] [--seconds T]
#                            [--rounds R] [--poll-mode sleep|adaptive|busy-poll] [--out DIR]
#
# Defaults: 100 subsystems x 100 namespaces (10,000), 500 jobs (1,000 connections),
# 20 s, 2 rounds. Needs fio and the Sluice engine (scripts/build-fio-engine.sh builds
# it) and a release build of sluice (built here unless SLUICE_BIN is set). Loopback
# only; prints a Markdown summary.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SUBSYSTEMS=100
NAMESPACES=100
JOBS=500
SECONDS_PER_RUN=20
SAMPLE_SECONDS=4
POLL_MODE="sleep"
ROUNDS=2
OUT=${OUT:-$REPO/target/measure-scale}

while [ $# -gt 0 ]; do
  case $1 in
    --subsystems) SUBSYSTEMS=$2; shift 2 ;;
    --namespaces) NAMESPACES=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --poll-mode) POLL_MODE=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "measure-scale: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

log() { echo "[measure-scale] $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"

command -v fio >/dev/null || die "fio is missing: scripts/setup.sh installs it"
[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs (target on 0, initiator on 1)"
[ "$JOBS" -le 1024 ] || die "--jobs is at most 1024 (the one-connection way runs at QD JOBS)"
[ "$JOBS" -le $(( SUBSYSTEMS * NAMESPACES )) ] || die "--jobs is at most the number of namespaces"
ENGINE=$("$REPO/scripts/build-fio-engine.sh" --print-path) || die "the Sluice fio engine did not build (scripts/build-fio-engine.sh)"
mkdir -p "$OUT"
if [ -z "${SLUICE_BIN:-}" ]; then
  (cd "$REPO" && cargo build --release -p sluice --bin sluice --quiet)
  SLUICE_BIN=$REPO/target/release/sluice
fi
CONNECTIONS=$(( 2 * JOBS ))
PORT=$(free_port)
NQN_PREFIX=nqn.2026-11.io.sluice:scale

write_config() {  # write_config FILE SUBSYSTEMS NAMESPACES
  local s n
  {
    printf '[[listener]]\naddress = "127.0.0.1:%s"\n\n' "$PORT"
    # Every job's admin and I/O connection, all under the library's one host NQN.
    printf '[target]\nmax_connections_per_host = %s\n\n' $(( CONNECTIONS + 64 ))
    for s in $(seq 1 "$2"); do
      printf '[[subsystem]]\nnqn = "%s%s"\nallow_any_host = true\n\n' "$NQN_PREFIX" "$s"
      for n in $(seq 1 "$3"); do
        printf '[[subsystem.namespace]]\nnsid = %s\nbackend = "ram"\nsize = "1MiB"\nblock_size = 4096\n\n' "$n"
      done
    done
    printf '[runtime]\nthreads = 1\npoll_mode = "%s"\n' "$POLL_MODE"
  } >"$1"
}

SERVE_PID=''
cleanup() { [ -n "$SERVE_PID" ] && { kill "$SERVE_PID" 2>/dev/null; wait "$SERVE_PID" 2>/dev/null || true; }; }
trap cleanup EXIT

READY_SECONDS=0
start_serve() {  # start_serve CONFIG: sets SERVE_PID and READY_SECONDS (not in a subshell)
  local started=$SECONDS
  taskset -c 0 "$SLUICE_BIN" serve --config "$1" --no-rpc-socket --log-level warn >"$OUT/serve.log" 2>&1 &
  SERVE_PID=$!
  for _ in $(seq 1 1200); do
    grep -q '^sluice: ready' "$OUT/serve.log" && { READY_SECONDS=$(( SECONDS - started )); return 0; }
    kill -0 "$SERVE_PID" 2>/dev/null || { cat "$OUT/serve.log" >&2; die "sluice serve exited"; }
    sleep 0.1
  done
  die "sluice serve not ready within 120 s"
}
stop_serve() { kill "$SERVE_PID"; wait "$SERVE_PID" || true; SERVE_PID=''; }
stats() {  # stats: "rss_kib threads fds" of the target
  echo "$(awk '/^VmRSS:/{print $2}' "/proc/$SERVE_PID/status") $(awk '/^Threads:/{print $2}' "/proc/$SERVE_PID/status") $(find "/proc/$SERVE_PID/fd" -mindepth 1 | wc -l)"
}

write_config "$OUT/one.toml" 1 1
write_config "$OUT/scale.toml" "$SUBSYSTEMS" "$NAMESPACES"
start_serve "$OUT/one.toml"
read -r rss_one _ fds_one < <(stats)
stop_serve
start_serve "$OUT/scale.toml"
ready_s=$READY_SECONDS
read -r rss_idle threads_idle fds_idle < <(stats)
total_ns=$(( SUBSYSTEMS * NAMESPACES ))
log "target with $total_ns namespaces ready in ${ready_s} s: RSS ${rss_idle} KiB (one namespace: ${rss_one} KiB)"

# fio job files: [global] shared, then one job (one) or JOBS jobs (many).
fio_global() {
  printf '[global]\nioengine=external:%s\nthread=1\nrw=randread\nbs=4k\ntime_based=1\n' "$ENGINE"
  printf 'runtime=%s\nramp_time=1\nnorandommap=1\ntraddr=127.0.0.1\ntrsvcid=%s\n' "$SECONDS_PER_RUN" "$PORT"
  printf 'host_io=sleep\ngroup_reporting=1\n\n'
}
{ fio_global; printf '[one]\nsubnqn=%s1\nnsid=1\niodepth=%s\n' "$NQN_PREFIX" "$JOBS"; } >"$OUT/one.fio"
{
  fio_global
  for j in $(seq 0 $(( JOBS - 1 ))); do
    # Job j: subsystem j mod S, namespace j div S (every subsystem carries load).
    printf '[job%s]\nsubnqn=%s%s\nnsid=%s\niodepth=1\n' "$j" "$NQN_PREFIX" $(( j % SUBSYSTEMS + 1 )) $(( j / SUBSYSTEMS + 1 ))
  done
} >"$OUT/many.fio"
RAW=$OUT/raw.tsv
printf 'round\tway\tconnections\tiops\tavg_us\ttarget_rss_kib\ttarget_cpu_us_per_io\n' >"$RAW"
run_way() {  # run_way ROUND WAY
  local target_rss=- before after
  taskset -c 1 fio --output-format=json --output="$OUT/fio-$1-$2.json" "$OUT/$2.fio" >"$OUT/fio-$1-$2.log" 2>&1 &
  local fio_pid=$!
  # The target's CPU is sampled over SAMPLE_SECONDS in the middle of the run, after
  # the jobs connected (500 controllers take seconds to come up) and before they stop.
  sleep $(( SECONDS_PER_RUN / 2 ))
  before=$(awk '{ print $14 + $15 }' "/proc/$SERVE_PID/stat")
  sleep "$SAMPLE_SECONDS"
  after=$(awk '{ print $14 + $15 }' "/proc/$SERVE_PID/stat")
  read -r target_rss _ _ < <(stats)
  wait "$fio_pid" || { tail -20 "$OUT/fio-$1-$2.log" >&2; die "fio ($2) failed"; }
  python3 - "$OUT/fio-$1-$2.json" "$1" "$2" "$([ "$2" = one ] && echo 2 || echo "$CONNECTIONS")" "$target_rss" \
    "$(( after - before ))" "$(getconf CLK_TCK)" "$SAMPLE_SECONDS" >>"$RAW" <<'PY'
import json, sys
path, round_, way, connections, rss, ticks, ticks_per_s, seconds = sys.argv[1:9]
job = json.load(open(path))["jobs"][0]["read"]
# the target's CPU over the sampled seconds, at the run's mean rate
cpu = int(ticks) / int(ticks_per_s) * 1e6 / (job["iops"] * int(seconds))
print(f"{round_}\t{way}\t{connections}\t{job['iops']:.0f}\t{job['lat_ns']['mean'] / 1000:.2f}\t{rss}\t{cpu:.2f}")
PY
  log "round $1 $2: $(tail -1 "$RAW")"
}
for round in $(seq 1 "$ROUNDS"); do
  if [ $(( round % 2 )) -eq 1 ]; then run_way "$round" one; run_way "$round" many; else run_way "$round" many; run_way "$round" one; fi
done
stop_serve

python3 - "$RAW" "$total_ns" "$CONNECTIONS" "$rss_one" "$rss_idle" "$threads_idle" "$fds_one" "$fds_idle" "$ready_s" <<'EOF' | tee "$OUT/summary.md"
import csv, sys
raw, total_ns, connections, rss_one, rss_idle, threads, fds_one, fds_idle, ready_s = sys.argv[1:10]
rows = list(csv.DictReader(open(raw), delimiter="\t"))
best = {}
for row in rows:
    if row["way"] not in best or float(row["iops"]) > float(best[row["way"]]["iops"]):
        best[row["way"]] = row
one, many = best["one"], best["many"]
per_ns = (int(rss_idle) - int(rss_one)) / max(int(total_ns) - 1, 1)
rss_many = max(int(row["target_rss_kib"]) for row in rows if row["way"] == "many")
per_connection = (rss_many - int(rss_idle)) / int(connections)
print(f"| way | connections | total depth | IOPS (best of {len(rows) // 2}) | avg us | target CPU us/IO |")
print("| --- | --: | --: | --: | --: | --: |")
print(f"| one controller | 2 | {int(connections) // 2} | {float(one['iops']):.0f} | {one['avg_us']} | {one['target_cpu_us_per_io']} |")
print(f"| {int(connections) // 2} controllers | {connections} | {int(connections) // 2} | {float(many['iops']):.0f} | {many['avg_us']} | {many['target_cpu_us_per_io']} |")
print()
print(f"many / one: {float(many['iops']) / float(one['iops']):.3f}x IOPS")
print(f"target with {total_ns} namespaces: ready in {ready_s} s, RSS {int(rss_idle) / 1024:.1f} MiB idle "
      f"(one namespace: {int(rss_one) / 1024:.1f} MiB; {per_ns:.2f} KiB per namespace), {threads} threads, "
      f"{fds_idle} open files (one namespace: {fds_one})")
print(f"during the {connections}-connection run: RSS {rss_many / 1024:.1f} MiB "
      f"({per_connection:.1f} KiB per connection over idle)")
EOF
log "raw rounds: $RAW"
