#!/usr/bin/env bash
# Balancing by measured load against balancing by count (issue 47): starts a one-node
# Ceph cluster, runs the ignored test apps/sluice/tests/gateway_balance.rs (three
# gateways, 24 namespaces in 24 ANA groups, hosts skewed 90/5/5) and keeps its lines.
#
# Usage: scripts/measure-balance.sh [--watch SECONDS] [--threshold PERCENT] [--out FILE]
#   --watch  how long to watch for oscillation after convergence (default 600)
#   --threshold  [gateway.rebalance] threshold_percent (default 10)
#   --out    where the sample lines go (default target/measure-balance.txt)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
watch=600 threshold=10 out=$REPO/target/measure-balance.txt
while [ $# -gt 0 ]; do
  case $1 in
    --watch) watch=$2; shift 2 ;;
    --threshold) threshold=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "measure-balance: unknown argument $1" >&2; exit 2 ;;
  esac
done
env_file=$(mktemp)
CEPH_WATCH_TIMEOUT=5 "$REPO/../shared/ceph-single-node.sh" up >"$env_file"
# shellcheck disable=SC1090
. "$env_file"
trap '"$REPO/../shared/ceph-single-node.sh" down "$CEPH_DIR" >/dev/null 2>&1 || true; rm -f "$env_file"' EXIT
cd "$REPO"
SLUICE_REQUIRE_CEPH=1 SLUICE_BALANCE_WATCH_S=$watch SLUICE_BALANCE_THRESHOLD_PERCENT=$threshold cargo test --release -p sluice --test gateway_balance \
  -- --ignored --nocapture 2>&1 | grep -E '^\[(count|load)\]|test result|panicked' | tee "$out"
