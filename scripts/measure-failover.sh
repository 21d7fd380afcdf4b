#!/usr/bin/env bash
# Measures gateway failover with the unedited examples docs/examples/gateway-a.toml and
# gateway-b.toml (default lease) on the cluster at CEPH_CONF, ROUNDS times:
#   1. start gateways a and b; wait until a reports ANA group 1 optimized;
#   2. a writer writes through a every 50 ms (a holds the image's exclusive lock, as
#      when hosts use the optimized path);
#   3. SIGKILL a, and from that moment a probe writes through b every 50 ms (a host
#      failing over to the other path; a fresh `sluice write` each: connect, write,
#      disconnect), recording when each write started and ended;
#   4. poll b's ANA log (`sluice ana-log`, as a host reads it) until the group is
#      optimized there.
# Prints per round: the takeover (kill -> b optimized) and the first write through b
# that completed (kill -> its completion: what a host that fails over at once waits),
# then the median and the worst. Results are for docs/results/gateway.md.
#
# Usage: CEPH_CONF=... scripts/measure-failover.sh [ROUNDS]   (default 5)
set -euo pipefail

ROUNDS=${1:-5}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SLUICE=${SLUICE_BIN:-$REPO/target/release/sluice}
NQN=nqn.2026-11.io.sluice:ha
WORK=$(mktemp -d /tmp/sluice-failover.XXXXXX)
die() { echo "measure-failover: $*" >&2; exit 1; }
[ -n "${CEPH_CONF:-}" ] || die "CEPH_CONF is not set: point it at a cluster with pool rbd"
[ -x "$SLUICE" ] || die "$SLUICE is missing: cargo build --release -p sluice"

PIDS=()
declare -A PID=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

now() { date +%s.%N; }
state() {  # state PORT: ANA state of group 1 there
  "$SLUICE" ana-log -t tcp -a 127.0.0.1 -s "$1" -n "$NQN" -o json --timeout 2000 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["ana_log"][0]["state"])' 2>/dev/null || true
}
await_state() {  # await_state PORT STATE SECONDS
  local deadline=$(( $(date +%s) + $3 ))
  until [ "$(state "$1")" = "$2" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || die "127.0.0.1:$1 did not report $2 within $3 s"
    sleep 0.05
  done
}
start() {  # start NAME
  "$SLUICE" serve --config "$REPO/docs/examples/gateway-$1.toml" --no-rpc-socket >>"$WORK/$1.log" 2>&1 &
  PIDS+=($!)
  PID[$1]=$!
}

head -c 4096 /dev/urandom >"$WORK/block"
results=()
for round in $(seq 1 "$ROUNDS"); do
  start a
  start b
  await_state 4420 optimized 60
  await_state 4421 non-optimized 30
  # writes_to PORT FILE: a write every 50 ms through PORT, each logged "start end"
  writes_to() {
    while :; do
      started=$(now)
      "$SLUICE" write -t tcp -a 127.0.0.1 -s "$1" -n "$NQN" -b 0 -c 7 -z 4096 -d "$WORK/block" --timeout 60000 \
        >/dev/null 2>&1 && echo "$started $(now)" >>"$2"
      sleep 0.05
    done
  }
  : >"$WORK/probe.txt"
  writes_to 4420 "$WORK/writer.txt" &
  writer=$!
  sleep 2
  killed=$(now); kill -KILL "${PID[a]}"; wait "${PID[a]}" 2>/dev/null || true
  writes_to 4421 "$WORK/probe.txt" &
  probe=$!
  kill "$writer" 2>/dev/null; wait "$writer" 2>/dev/null || true
  await_state 4421 optimized 60
  optimized=$(now)
  wait_probe() { [ -s "$WORK/probe.txt" ]; }
  for _ in $(seq 1 600); do wait_probe && break; sleep 0.1; done
  kill "$probe" 2>/dev/null; wait "$probe" 2>/dev/null || true
  line=$(python3 - "$killed" "$optimized" "$WORK/probe.txt" <<'EOF'
import sys
killed, optimized = float(sys.argv[1]), float(sys.argv[2])
probes = [tuple(map(float, line.split())) for line in open(sys.argv[3]) if line.strip()]
after = [end for start, end in probes if start >= killed]
first = min(after) - killed if after else float("nan")
longest = max(end - start for start, end in probes)
print(f"{optimized - killed:.2f} {first:.2f} {longest:.2f}")
EOF
)
  read -r takeover first longest <<<"$line"
  echo "round $round: takeover ${takeover} s, first write through b completed ${first} s after the kill, longest probe write ${longest} s"
  results+=("$line")
  kill -TERM "${PID[b]}"; wait "${PID[b]}" 2>/dev/null || true
  sleep 1
done
printf '%s\n' "${results[@]}" | python3 -c '
import statistics, sys
rows = [list(map(float, line.split())) for line in sys.stdin]
for index, name in enumerate(["takeover", "first write through b", "longest probe write"]):
    values = [row[index] for row in rows]
    print(f"{name}: median {statistics.median(values):.2f} s, worst {max(values):.2f} s over {len(values)} rounds")
'
