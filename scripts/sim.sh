#!/usr/bin/env bash
# The simulation stage of scripts/test.sh: sluice-sim over a fixed window of seeds
# (a gate must not turn red on a seed nobody ran before; explore with a long run,
# see docs/testing.md), then every planted bug must be caught within 200 seeds.
#
# Environment:
#   SIM_SEEDS=N        seeds in the clean run (default 2000)
#   SIM_FIRST_SEED=S   its first seed (default 0)
#   SLUICE_SIM=PATH    the binary (default target/release/sluice-sim, as the build
#                      stage made it)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SIM=${SLUICE_SIM:-${CARGO_TARGET_DIR:-$REPO/target}/release/sluice-sim}
[ -x "$SIM" ] || { echo "sluice-sim not found at $SIM: build it with cargo build --release -p sim"; exit 1; }
seeds=${SIM_SEEDS:-2000}
first=${SIM_FIRST_SEED:-0}

echo "+ sluice-sim run --seeds $seeds --first-seed $first"
"$SIM" run --seeds "$seeds" --first-seed "$first"

for canary in lost-flush reordered-completion stale-read undrained-close missed-notice local-compare-and-write fence-wait-on-finisher no-copy-vouch skip-ana-change; do
  echo "+ sluice-sim run --seeds 200 --first-seed $first --canary $canary"
  "$SIM" run --seeds 200 --first-seed "$first" --canary "$canary" | tail -n 2
done
