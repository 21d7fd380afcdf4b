#!/usr/bin/env bash
# The RBD backend's benchmark record (docs/results/rbd.md), on a Ceph cluster:
#
#   1. `sluice bench --compare fio-rbd` with fio/jobs/rbd-suite.toml: 128 KiB
#      sequential write and read at QD8, 4 KiB random write and read at QD1 and QD16,
#      through Sluice (embedded target, rbd backend, fio + Sluice's engine) and through
#      fio's own rbd engine on the same image, one after the other; ROUNDS times, and
#      a summary of each job's ratios over the rounds (on a machine whose OSD shares
#      the CPUs, two runs of one configuration differ by more than 20 %: one round
#      says little).
#   2. Many namespaces: `sluice serve` with NAMESPACES rbd namespaces (images of
#      NS_MIB each, written once), 4 KiB random read through fio and Sluice's engine,
#      2 jobs x QD32, first on namespace 1 alone, then spread over all of them; the
#      target's open file descriptors, threads and RSS with 1 and with NAMESPACES open.
#
# Usage: scripts/bench-rbd.sh [OUT_DIR]   (default target/bench/rbd)
# Environment:
#   CEPH_CONF=PATH     the cluster (pool "rbd"); required
#   SLUICE_BIN=PATH    sluice binary (default target/release/sluice)
#   NAMESPACES=N       namespaces of step 2 (default 64)
#   NS_MIB=N           size of each of them (default 16)
#   ROUNDS=N           rounds of step 1 (default 3)
#   RUNTIME_S=N        seconds per fio run of step 2 (default 10)
# Needs fio and the Sluice fio engine (scripts/build-fio-engine.sh). Images it
# creates are named sluice-bench-*; they are removed at the end.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$REPO/target/bench/rbd}
SLUICE=${SLUICE_BIN:-$REPO/target/release/sluice}
ENGINE=$REPO/target/fio/libsluice_fio.so
NAMESPACES=${NAMESPACES:-64}
NS_MIB=${NS_MIB:-16}
RUNTIME_S=${RUNTIME_S:-10}
ROUNDS=${ROUNDS:-3}
NQN=nqn.2026-11.io.sluice:rbd-scale

die() { echo "bench-rbd: $*" >&2; exit 1; }
[ -n "${CEPH_CONF:-}" ] || die "CEPH_CONF is not set: point it at a cluster with pool rbd (../shared/ceph-single-node.sh up DIR)"
[ -x "$SLUICE" ] || die "no sluice binary at $SLUICE: cargo build --release -p sluice"
[ -f "$ENGINE" ] || die "no fio engine at $ENGINE: scripts/build-fio-engine.sh"
command -v rbd >/dev/null || die "the rbd tool is missing: scripts/setup.sh installs ceph-common"
mkdir -p "$OUT"

SERVE_PID=''
cleanup() {
  [ -n "$SERVE_PID" ] && { kill "$SERVE_PID" 2>/dev/null || true; wait "$SERVE_PID" 2>/dev/null || true; }
  rbd -c "$CEPH_CONF" rm rbd/sluice-bench-compare >/dev/null 2>&1 || true
  for n in $(seq 1 "$NAMESPACES"); do rbd -c "$CEPH_CONF" rm "rbd/sluice-bench-$n" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

echo "== 1. sluice bench --compare fio-rbd"
# --host-io sleep: the OSD shares these CPUs, so the initiator must not spin.
# --target-poll-mode adaptive: the target as `sluice serve` runs it by default (it
# spins only for the host's next command, never while RBD requests are in flight).
for round in $(seq 1 "$ROUNDS"); do
  echo "-- round $round of $ROUNDS"
  "$SLUICE" bench --compare fio-rbd --rbd-image rbd/sluice-bench-compare --namespace-size 256MiB \
    --suite-file "$REPO/fio/jobs/rbd-suite.toml" --target-threads 1 --host-io sleep --target-poll-mode adaptive \
    --json "$OUT/compare-round-$round"
done
# Each job's Sluice / fio-rbd ratios in every round, and their median.
python3 - "$OUT" "$ROUNDS" <<'PY' | tee "$OUT/compare-summary.md"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def runs(path):
    return {run["name"]: run for run in json.load(open(path))["runs"]}
ratios = {}
for n in range(1, rounds + 1):
    sluice = runs(f"{out}/compare-round-{n}-sluice-rbd.json")
    direct = runs(f"{out}/compare-round-{n}-fio-rbd.json")
    for name, run in sluice.items():
        other = direct.get(name)
        if other and other["iops"] > 0 and other["latency_us"]["mean"] > 0:
            ratios.setdefault(name, []).append(
                (run["iops"] / other["iops"], run["latency_us"]["mean"] / other["latency_us"]["mean"]))
print(f"Sluice / fio-rbd over {rounds} rounds (goal: IOPS >= 0.90, mean latency <= 1.15)")
print()
print("| job | IOPS ratio per round | median | mean latency ratio per round | median |")
print("| --- | --- | --: | --- | --: |")
for name, pairs in ratios.items():
    iops = [p[0] for p in pairs]
    latency = [p[1] for p in pairs]
    print(f"| {name} | {' / '.join(f'{r:.2f}' for r in iops)} | {statistics.median(iops):.2f} "
          f"| {' / '.join(f'{r:.2f}' for r in latency)} | {statistics.median(latency):.2f} |")
PY

echo "== 2. $NAMESPACES namespaces of $NS_MIB MiB"
port=$(( 20000 + RANDOM % 12000 ))
write_config() {  # write_config FILE COUNT: a subsystem with namespaces 1..COUNT
  local n
  {
    printf '[[listener]]\naddress = "127.0.0.1:%s"\n\n' "$port"
    for n in $(seq 1 "$2"); do
      printf '[[backend]]\nname = "vol%s"\nkind = "rbd"\npool = "rbd"\nimage = "sluice-bench-%s"\nsize = "%sMiB"\nblock_size = 4096\n\n' \
        "$n" "$n" "$NS_MIB"
    done
    printf '[[subsystem]]\nnqn = "%s"\nallow_any_host = true\n\n' "$NQN"
    for n in $(seq 1 "$2"); do printf '[[subsystem.namespace]]\nnsid = %s\ndevice = "vol%s"\n\n' "$n" "$n"; done
    printf '[runtime]\nthreads = 1\n'
  } >"$1"
}
config=$OUT/scale.toml one=$OUT/scale-one.toml
write_config "$config" "$NAMESPACES"
write_config "$one" 1

serve_stats() {  # serve_stats LABEL: fds, threads and RSS of the running target
  local fds threads rss
  fds=$(find "/proc/$SERVE_PID/fd" -mindepth 1 | wc -l)
  threads=$(awk '/^Threads:/{print $2}' "/proc/$SERVE_PID/status")
  rss=$(awk '/^VmRSS:/{print $2}' "/proc/$SERVE_PID/status")
  echo "$1 fds=$fds threads=$threads rss_kib=$rss"
}
start_serve() {  # start_serve CONFIG
  "$SLUICE" serve --config "$1" >"$OUT/serve.log" 2>&1 &
  SERVE_PID=$!
  for _ in $(seq 1 600); do
    grep -q '^sluice: ready' "$OUT/serve.log" && return 0
    kill -0 "$SERVE_PID" 2>/dev/null || { cat "$OUT/serve.log"; die "sluice serve exited"; }
    sleep 0.1
  done
  die "sluice serve not ready within 60 s"
}
stop_serve() { kill "$SERVE_PID"; wait "$SERVE_PID" || true; SERVE_PID=''; }

# The target with namespace 1 only, then with all: the cost of one more namespace.
start_serve "$one"
serve_stats "namespaces=1" | tee "$OUT/scale-stats.txt"
stop_serve
start_serve "$config"
serve_stats "namespaces=$NAMESPACES" | tee -a "$OUT/scale-stats.txt"

files() {  # files FIRST LAST: fio's filename list of namespaces FIRST..LAST
  local n list=''
  for n in $(seq "$1" "$2"); do list+="${list:+:}tcp\\://127.0.0.1\\:$port/${NQN//:/\\:}/$n"; done
  echo "$list"
}
fio_run() {  # fio_run NAME FILES FIO-ARGS...
  local name=$1 list=$2
  shift 2
  fio --output-format=json --output="$OUT/$name.json" --name="$name" --ioengine="external:$ENGINE" \
    --host_io=sleep --filename="$list" "$@" >/dev/null
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"]; print(sys.argv[2], "iops=%.0f" % sum(x["read"]["iops"] + x["write"]["iops"] for x in j), "mean_us=%.1f" % (sum(x["read"]["lat_ns"]["mean"] for x in j) / len(j) / 1000))' \
    "$OUT/$name.json" "$name"
}
all=$(files 1 "$NAMESPACES")
echo "writing all $NAMESPACES namespaces once (reads of never-written objects never reach an OSD)"
fio_run fill "$all" --rw=write --bs=128k --iodepth=8 --file_service_type=sequential >/dev/null
{
  fio_run randread-one-namespace "$(files 1 1)" --rw=randread --bs=4k --iodepth=32 --numjobs=2 \
    --time_based --runtime="$RUNTIME_S" --norandommap --group_reporting=0
  fio_run randread-all-namespaces "$all" --rw=randread --bs=4k --iodepth=32 --numjobs=2 \
    --file_service_type=random --time_based --runtime="$RUNTIME_S" --norandommap --group_reporting=0
} | tee "$OUT/scale-iops.txt"
stop_serve
echo "results in $OUT"
