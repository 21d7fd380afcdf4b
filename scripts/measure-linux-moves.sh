#!/usr/bin/env bash
# The Linux kernel host through a drain, an undrain and paced ANA group moves (issue
# 47): starts a one-node Ceph cluster, runs the ignored test
# apps/sluice/tests/gateway_linux_moves.rs (two gateways, fio write+verify in a
# linux-nvme-peer guest on both paths of each namespace) for each namespace count and
# keeps its lines.
#
# Usage: scripts/measure-linux-moves.sh [--namespaces "1,1000"] [--out FILE]
#   --namespaces  the counts, comma-separated (default 1,1000)
#   --out         where the result lines go (default target/measure-linux-moves.txt)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LINUX_PEER=${LINUX_PEER:-$REPO/../shared/linux-nvme-peer}
namespaces=1,1000 out=$REPO/target/measure-linux-moves.txt
while [ $# -gt 0 ]; do
  case $1 in
    --namespaces) namespaces=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "measure-linux-moves: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$LINUX_PEER" ] || { echo "measure-linux-moves: linux-nvme-peer not found at $LINUX_PEER (set LINUX_PEER)" >&2; exit 1; }
env_file=$(mktemp)
CEPH_WATCH_TIMEOUT=5 "$REPO/../shared/ceph-single-node.sh" up >"$env_file"
# shellcheck disable=SC1090
. "$env_file"
trap '"$REPO/../shared/ceph-single-node.sh" down "$CEPH_DIR" >/dev/null 2>&1 || true; rm -f "$env_file"' EXIT
cd "$REPO"
SLUICE_REQUIRE_CEPH=1 LINUX_NVME_PEER=$LINUX_PEER SLUICE_LINUX_MOVES_NAMESPACES=$namespaces \
  cargo test --release -p sluice --test gateway_linux_moves -- --ignored --nocapture 2>&1 |
  grep --line-buffered -E '^\[[0-9]+ namespaces\]|test result|panicked' | tee "$out"
