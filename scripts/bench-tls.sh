#!/usr/bin/env bash
# NVMe/TCP with and without TLS on the same target (docs/results/tls.md): `sluice serve`
# (one runtime thread pinned to core 0) with one 1 GiB RAM namespace behind two
# listeners, one plain and one with tls = "required"; fio with Sluice's engine on core
# 1 runs each workload against both, interleaved, ROUNDS times. Prints IOPS, MB/s,
# mean latency, the target's CPU per I/O (its utime+stime over the I/Os) and fio's CPU.
#
# Usage: scripts/bench-tls.sh [OUT_DIR]   (default target/bench/tls)
# Environment: SLUICE_BIN (default target/release/sluice), ROUNDS (2), RUNTIME_S (8)
# Needs fio and the engine (scripts/build-fio-engine.sh).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$REPO/target/bench/tls}
SLUICE=${SLUICE_BIN:-$REPO/target/release/sluice}
ENGINE=$REPO/target/fio/libsluice_fio.so
ROUNDS=${ROUNDS:-2}
RUNTIME_S=${RUNTIME_S:-8}
NQN=nqn.2026-11.io.sluice:tls-bench
HOST_NQN=nqn.2014-08.org.nvmexpress:uuid:0b5e7a1c-1d2e-4f3a-9b8c-7d6e5f4a3b2c

die() { echo "bench-tls: $*" >&2; exit 1; }
[ -x "$SLUICE" ] || die "no sluice binary at $SLUICE: cargo build --release -p sluice"
[ -f "$ENGINE" ] || die "no fio engine at $ENGINE: scripts/build-fio-engine.sh"
command -v fio >/dev/null || die "fio is missing: scripts/setup.sh installs it"
mkdir -p "$OUT"

plain_port=$(( 20000 + RANDOM % 12000 ))
tls_port=$(( plain_port + 1 ))
key=$("$SLUICE" gen-tls-key)
cat >"$OUT/serve.toml" <<EOF
[[listener]]
address = "127.0.0.1:$plain_port"

[[listener]]
address = "127.0.0.1:$tls_port"
tls = "required"

[[backend]]
name = "ram"
kind = "ram"
size = "1GiB"
block_size = 4096

[[subsystem]]
nqn = "$NQN"

[[subsystem.host]]
nqn = "$HOST_NQN"
tls_key = "$key"

[[subsystem.namespace]]
nsid = 1
device = "ram"

[runtime]
threads = 1
pin_threads = true
EOF

"$SLUICE" serve --config "$OUT/serve.toml" --no-rpc-socket >"$OUT/serve.log" 2>&1 &
serve_pid=$!
trap 'kill "$serve_pid" 2>/dev/null; wait "$serve_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do grep -q "sluice: ready" "$OUT/serve.log" && break; sleep 0.1; done
grep -q "sluice: ready" "$OUT/serve.log" || die "sluice serve did not start: $(tail -3 "$OUT/serve.log")"

target_ticks() { awk '{print $14 + $15}' "/proc/$serve_pid/stat"; }
clock_ticks=$(getconf CLK_TCK)

# run LABEL PORT RW BS QD: one fio run, one line
run() {
  local label=$1 port=$2 rw=$3 bs=$4 qd=$5 tls_key='' before after
  [ "$port" = "$tls_port" ] && tls_key=$key
  before=$(target_ticks)
  SLUICE_TLS_KEY=$tls_key taskset -c 1 fio --name=bench --ioengine="external:$ENGINE" --traddr=127.0.0.1 \
    --trsvcid="$port" --subnqn="$NQN" --hostnqn="$HOST_NQN" --rw="$rw" --bs="$bs" --iodepth="$qd" --size=1G \
    --time_based=1 --runtime="$RUNTIME_S" --filename=ns1 --output-format=json >"$OUT/$label.json" 2>"$OUT/$label.log"
  after=$(target_ticks)
  python3 - "$label" "$OUT/$label.json" "$((after - before))" "$clock_ticks" <<'PY'
import json, sys
label, path, ticks, hz = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
job = json.load(open(path))["jobs"][0]
side = "read" if job["read"]["io_bytes"] > 0 else "write"
ios = job[side]["total_ios"]
cpu_us = ticks * 1e6 / hz / ios if ios else 0.0
print(f"| {label} | {job[side]['iops']:.0f} | {job[side]['bw_bytes'] / 1e6:.1f} | "
      f"{job[side]['lat_ns']['mean'] / 1000:.1f} | {cpu_us:.2f} | {job['usr_cpu'] + job['sys_cpu']:.0f} % |")
PY
}

# Every block of the namespace written once, so reads return data.
SLUICE_TLS_KEY='' taskset -c 1 fio --name=fill --ioengine="external:$ENGINE" --traddr=127.0.0.1 --trsvcid="$plain_port" \
  --subnqn="$NQN" --hostnqn="$HOST_NQN" --rw=write --bs=128k --iodepth=8 --size=1G --filename=ns1 >/dev/null 2>&1

echo "| run | IOPS | MB/s | mean us | target CPU us/IO | fio CPU |"
echo "| --- | --: | --: | --: | --: | --: |"
for round in $(seq 1 "$ROUNDS"); do
  for workload in "4k-randread-qd32 randread 4k 32" "4k-randwrite-qd32 randwrite 4k 32" \
    "128k-read-qd8 read 128k 8" "128k-write-qd8 write 128k 8"; do
    read -r name rw bs qd <<<"$workload"
    run "$name-plain-r$round" "$plain_port" "$rw" "$bs" "$qd"
    run "$name-tls-r$round" "$tls_port" "$rw" "$bs" "$qd"
  done
done | tee "$OUT/table.md"
