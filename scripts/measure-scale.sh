#!/usr/bin/env bash
# Many connections and many namespaces on one target (the target-speed issue's scale
# goal): `sluice serve` (one runtime thread on core 0) with SUBSYSTEMS x NAMESPACES
# RAM namespaces, driven by SPDK's spdk_nvme_perf on core 1, 4 KiB random read at one
# total depth, two ways, interleaved for ROUNDS rounds:
#
#   one      one connection: namespace 1 of subsystem 1 at QD CONNECTIONS
#   many     CONNECTIONS = DRIVEN x NAMESPACES connections: every namespace of
#            subsystems 1..DRIVEN (perf opens one I/O queue per namespace, on one
#            controller per subsystem), QD 1 each
#
# and the cost of the namespaces and connections: the target's RSS, threads and open
# files with one namespace, with all of them idle, and during the many-connection run.
#
#   scripts/measure-scale.sh [--subsystems S] [--namespaces N] [--driven D] [--seconds T]
#                            [--rounds R] [--out DIR]
#
# Defaults: 100 subsystems x 100 namespaces (10,000), 10 driven (1,000 connections),
# 10 s, 2 rounds. NAMESPACES is at most 128, the target's I/O queues per controller.
# Needs ../shared/spdk-peer (SPDK_PEER=path overrides) and a release build of sluice
# (built here unless SLUICE_BIN is set). Loopback only; prints a Markdown summary.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SPDK_PEER=${SPDK_PEER:-$REPO/../shared/spdk-peer/spdk-peer}
SUBSYSTEMS=100
NAMESPACES=100
DRIVEN=10
SECONDS_PER_RUN=10
ROUNDS=2
OUT=${OUT:-$REPO/target/measure-scale}
export SPDK_PEER_HUGEPAGES=${SPDK_PEER_HUGEPAGES:-1536}

while [ $# -gt 0 ]; do
  case $1 in
    --subsystems) SUBSYSTEMS=$2; shift 2 ;;
    --namespaces) NAMESPACES=$2; shift 2 ;;
    --driven) DRIVEN=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "measure-scale: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

log() { echo "[measure-scale] $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"

[ -x "$SPDK_PEER" ] || die "$SPDK_PEER not found (set SPDK_PEER)"
[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs (target on 0, initiator on 1)"
[ "$NAMESPACES" -le 128 ] || die "--namespaces is per subsystem and at most 128 (one I/O queue each on one controller)"
[ "$DRIVEN" -le "$SUBSYSTEMS" ] || die "--driven is at most --subsystems"
mkdir -p "$OUT"
if [ -z "${SLUICE_BIN:-}" ]; then
  (cd "$REPO" && cargo build --release -p sluice --bin sluice --quiet)
  SLUICE_BIN=$REPO/target/release/sluice
fi
CONNECTIONS=$(( DRIVEN * NAMESPACES ))
PORT=$(free_port)
NQN_PREFIX=nqn.2026-11.io.sluice:scale

write_config() {  # write_config FILE SUBSYSTEMS NAMESPACES
  local s n
  {
    printf '[[listener]]\naddress = "127.0.0.1:%s"\n\n' "$PORT"
    # perf's I/O queues plus its admin queues, all under one (empty) host NQN.
    printf '[target]\nmax_connections_per_host = %s\n\n' $(( CONNECTIONS + 64 ))
    for s in $(seq 1 "$2"); do
      printf '[[subsystem]]\nnqn = "%s%s"\nallow_any_host = true\n\n' "$NQN_PREFIX" "$s"
      for n in $(seq 1 "$3"); do
        printf '[[subsystem.namespace]]\nnsid = %s\nbackend = "ram"\nsize = "1MiB"\nblock_size = 4096\n\n' "$n"
      done
    done
    printf '[runtime]\nthreads = 1\n'
  } >"$1"
}

SERVE_PID=''
cleanup() { [ -n "$SERVE_PID" ] && { kill "$SERVE_PID" 2>/dev/null; wait "$SERVE_PID" 2>/dev/null || true; }; }
trap cleanup EXIT

start_serve() {  # start_serve CONFIG: prints seconds to ready
  local started=$SECONDS
  taskset -c 0 "$SLUICE_BIN" serve --config "$1" --no-rpc-socket --log-level warn >"$OUT/serve.log" 2>&1 &
  SERVE_PID=$!
  for _ in $(seq 1 1200); do
    grep -q '^sluice: ready' "$OUT/serve.log" && { echo $(( SECONDS - started )); return 0; }
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
start_serve "$OUT/one.toml" >/dev/null
read -r rss_one _ fds_one < <(stats)
stop_serve
ready_s=$(start_serve "$OUT/scale.toml")
read -r rss_idle threads_idle fds_idle < <(stats)
total_ns=$(( SUBSYSTEMS * NAMESPACES ))
log "target with $total_ns namespaces ready in ${ready_s} s: RSS ${rss_idle} KiB (one namespace: ${rss_one} KiB)"

TRID=$("$SPDK_PEER" trid 127.0.0.1 "$PORT" "${NQN_PREFIX}1")
MANY=()
for s in $(seq 1 "$DRIVEN"); do MANY+=(-r "$("$SPDK_PEER" trid 127.0.0.1 "$PORT" "${NQN_PREFIX}$s")"); done
RAW=$OUT/raw.tsv
printf 'round\tway\tconnections\tiops\tavg_us\ttarget_rss_kib\n' >"$RAW"
run_way() {  # run_way ROUND WAY
  local perf_args target_rss=-
  case $2 in
    one) perf_args=(-q "$CONNECTIONS" -r "$TRID ns:1") ;;
    many) perf_args=(-q 1 "${MANY[@]}") ;;
  esac
  "$SPDK_PEER" perf -c 0x2 -o 4096 -w randread -t "$SECONDS_PER_RUN" "${perf_args[@]}" >"$OUT/perf-$1-$2.log" 2>&1 &
  local perf=$!
  sleep $(( SECONDS_PER_RUN / 2 + 2 ))
  read -r target_rss _ _ < <(stats)
  wait "$perf" || { tail -20 "$OUT/perf-$1-$2.log" >&2; die "spdk_nvme_perf ($2) failed"; }
  local total connections
  total=$(grep -E '^Total' "$OUT/perf-$1-$2.log" | tail -1)
  connections=$([ "$2" = one ] && echo 1 || echo "$CONNECTIONS")
  # Total : IOPS MiB/s Average min max
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$connections" \
    "$(awk '{print $3}' <<<"$total")" "$(awk '{print $5}' <<<"$total")" "$target_rss" >>"$RAW"
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
print(f"| way | connections | total depth | IOPS (best of {len(rows) // 2}) | avg us |")
print("| --- | --: | --: | --: | --: |")
print(f"| one connection | 1 | {connections} | {float(one['iops']):.0f} | {one['avg_us']} |")
print(f"| many connections | {connections} | {connections} | {float(many['iops']):.0f} | {many['avg_us']} |")
print()
print(f"many / one: {float(many['iops']) / float(one['iops']):.3f}x IOPS")
print(f"target with {total_ns} namespaces: ready in {ready_s} s, RSS {int(rss_idle) / 1024:.1f} MiB idle "
      f"(one namespace: {int(rss_one) / 1024:.1f} MiB; {per_ns:.2f} KiB per namespace), {threads} threads, "
      f"{fds_idle} open files (one namespace: {fds_one})")
print(f"during the {connections}-connection run: RSS {rss_many / 1024:.1f} MiB "
      f"({per_connection:.1f} KiB per connection over idle)")
EOF
log "raw rounds: $RAW"
