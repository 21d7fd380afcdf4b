#!/usr/bin/env bash
# The long run of the host fuzz target (issue 50): `host_receive` (PDU streams and
# completions from a hostile target into nvme-host's HostQueue, and the completion
# data the host library decodes) for SECONDS on one CPU (default 3600: one
# CPU-hour), with libFuzzer's bounds on memory (-rss_limit_mb, also its malloc
# limit) and on the time of one input (-timeout, a hang). Afterwards the corpus is
# merged and minimized into fuzz/seeds/host_receive (checked in: the test
# command's 20 s run starts from it), and one line is appended to
# docs/results/fuzz-host.md with the numbers.
#
# Usage: scripts/fuzz-host.sh [SECONDS]
#
# Environment:
#   FUZZ_RSS_LIMIT_MB    memory bound in MiB (default 1024); over it is a failure
#   FUZZ_INPUT_TIMEOUT   seconds one input may take (default 10); over it is a hang
#   FUZZ_CPU             pin the fuzzer to this CPU (taskset -c), so that other work
#                        can be kept off it; the record gives the CPU seconds the run
#                        actually got either way
#
# Exit status: 0 when the run ended with no crash, hang or memory overrun; 1 when
# libFuzzer found one (the input is in fuzz/artifacts/host_receive/, named in the
# record); 2 for a usage error.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

seconds=${1:-3600}
if ! [[ $seconds =~ ^[0-9]+$ ]] || [ "$seconds" -eq 0 ]; then
  echo "usage: scripts/fuzz-host.sh [SECONDS]   (default 3600)" >&2
  exit 2
fi
target=host_receive
rss_limit=${FUZZ_RSS_LIMIT_MB:-1024}
input_timeout=${FUZZ_INPUT_TIMEOUT:-10}
pin=()
if [ -n "${FUZZ_CPU:-}" ]; then
  pin=(taskset -c "$FUZZ_CPU")
fi
corpus=fuzz/corpus/$target
seeds=fuzz/seeds/$target
artifacts=fuzz/artifacts/$target
record=docs/results/fuzz-host.md

# cargo-fuzz builds with its own profile and target directory (as scripts/test.sh).
unset CARGO_TARGET_DIR CARGO_PROFILE_RELEASE_LTO CARGO_PROFILE_RELEASE_CODEGEN_UNITS \
  CARGO_PROFILE_RELEASE_DEBUG CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS

mkdir -p "$corpus" "$seeds" "$artifacts"
log=$(mktemp)
marker=$(mktemp)
cpu_times=$(mktemp)
merged=$(mktemp -d)
trap 'rm -rf "$log" "$marker" "$cpu_times" "$merged"' EXIT

echo "+ cargo +nightly fuzz build $target"
cargo +nightly fuzz build "$target"

before=$(find "$artifacts" -type f | wc -l)
touch "$marker"
started=$(date -u +%Y-%m-%dT%H:%MZ)
echo "+ cargo +nightly fuzz run $target $corpus $seeds -- -max_total_time=$seconds -rss_limit_mb=$rss_limit -timeout=$input_timeout"
# Bounded from outside too: libFuzzer stops itself at -max_total_time; a run that
# does not is stopped with SIGINT (it then prints its statistics) 5 minutes later.
# The run is in its own shell so that `times` there counts the CPU it got (user and
# system of every process it waited for: the fuzzer and the small filters): on a
# shared machine the wall seconds overstate it.
set +e
FUZZ_PIN="${pin[*]}" FUZZ_TARGET=$target FUZZ_CORPUS=$corpus FUZZ_SEEDS=$seeds FUZZ_SECONDS=$seconds \
  FUZZ_RSS=$rss_limit FUZZ_INPUT=$input_timeout FUZZ_LOG=$log FUZZ_TIMES=$cpu_times bash -c '
  timeout --signal=INT --kill-after=60 $((FUZZ_SECONDS + 300)) \
    $FUZZ_PIN cargo +nightly fuzz run "$FUZZ_TARGET" "$FUZZ_CORPUS" "$FUZZ_SEEDS" -- \
    -max_total_time="$FUZZ_SECONDS" -rss_limit_mb="$FUZZ_RSS" -timeout="$FUZZ_INPUT" -print_final_stats=1 \
    2>&1 | grep --line-buffered -Ev "^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)" | tee "$FUZZ_LOG"
  status=${PIPESTATUS[0]}
  times > "$FUZZ_TIMES"
  exit $status'
status=$?
set -e
# `times` prints the shell's own line, then the one of its children: "XmY.YYYs XmY.YYYs".
cpu_seconds=$(sed -n 2p "$cpu_times" | awk '{
  total = 0
  for (i = 1; i <= 2; i++) { split($i, part, "m"); sub("s", "", part[2]); total += part[1] * 60 + part[2] }
  printf "%d", total }')

final_stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -n 1; }
executions=$(final_stat number_of_executed_units)
rate=$(final_stat average_exec_per_sec)
peak_rss=$(final_stat peak_rss_mb)
after=$(find "$artifacts" -type f | wc -l)
new_artifacts=$(find "$artifacts" -type f -newer "$marker" -printf '%f ' 2>/dev/null || true)

if [ "$status" -eq 0 ] && [ "$after" -eq "$before" ]; then
  outcome="no crash, hang or memory overrun"
else
  outcome="FAILED (exit $status): ${new_artifacts:-see the log}"
fi

# The corpus, merged with the seeds and minimized (inputs that add no coverage
# dropped), becomes the checked-in seeds.
echo "+ cargo +nightly fuzz run $target -- -merge=1 (corpus and seeds into the new seeds)"
cargo +nightly fuzz run "$target" "$merged" "$seeds" "$corpus" -- -merge=1 -rss_limit_mb="$rss_limit" \
  -timeout="$input_timeout" >/dev/null 2>&1 || echo "merge failed; the seeds are left as they were"
if [ -n "$(ls -A "$merged")" ]; then
  find "$seeds" -type f -delete
  cp "$merged"/* "$seeds"/
fi
seed_count=$(find "$seeds" -type f | wc -l)
seed_bytes=$(du -sb "$seeds" | cut -f1)

commit=$(git rev-parse --short HEAD 2>/dev/null || echo "?")
line="| $started | $commit | $seconds | ${cpu_seconds:-?} | ${executions:-?} | ${rate:-?} | ${peak_rss:-?} | $seed_count ($((seed_bytes / 1024)) KiB) | $outcome |"
echo "$line" >> "$record"
echo
echo "recorded in $record:"
echo "$line"
[ "$status" -eq 0 ] && [ "$after" -eq "$before" ]
