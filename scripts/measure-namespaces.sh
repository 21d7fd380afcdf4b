#!/usr/bin/env bash
# Namespaces on Ceph at the size users run (issue 46): a group of three `sluice serve`
# gateways sharing N RBD-backed namespaces (thin images in pool rbd, one cluster
# connection per gateway, the group's configuration in the cluster), measured by
# apps/sluice/tests/namespace_scale.rs for each count of --namespaces side by side:
# start and serve times, memory, open files and threads per gateway, the CPU the idle
# group costs the gateways, the OSD and the monitor, `ns add` and `ns list`, 4 KiB
# random reads spread over every namespace against one, takeover after a SIGKILL (the
# ANA change, then a write through the new owner to each namespace of the group), a
# restart on existing images, and with --linux the Linux host's view (discovery,
# connect, `nvme list`, the ANA log) in a linux-nvme-peer guest.
#
#   scripts/measure-namespaces.sh [--namespaces "1,4096"] [--linux] [--out FILE]
#
# Runs on a fresh ../shared/ceph-single-node.sh cluster of its own (memstore; Ceph's
# default 30 s osd_client_watch_timeout unless CEPH_WATCH_TIMEOUT says otherwise),
# removed at the end with the thousands of images in it. Builds the test in release
# mode. Prints the Markdown table and writes it to FILE (default
# docs/results/scale/namespaces-<date>.md).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CEPH_SINGLE_NODE=${CEPH_SINGLE_NODE:-$REPO/../shared/ceph-single-node.sh}
LINUX_PEER=${LINUX_PEER:-$REPO/../shared/linux-nvme-peer}
NAMESPACES="1,4096"
LINUX=0
OUT="$REPO/docs/results/scale/namespaces-$(date +%Y-%m-%d).md"

die() { echo "measure-namespaces: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --namespaces) NAMESPACES=$2; shift 2 ;;
    --linux) LINUX=1; shift ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[ -x "$CEPH_SINGLE_NODE" ] || die "ceph-single-node.sh not found at $CEPH_SINGLE_NODE"
if [ "$LINUX" = 1 ]; then
  [ -x "$LINUX_PEER" ] || die "linux-nvme-peer not found at $LINUX_PEER (set LINUX_PEER)"
  export LINUX_NVME_PEER=$LINUX_PEER
fi

WORK=$(mktemp -d /tmp/sluice-namespaces.XXXXXX)
CLUSTER_ENV=$WORK/cluster.env
cleanup() {
  if [ -f "$CLUSTER_ENV" ]; then
    # shellcheck disable=SC1090
    . "$CLUSTER_ENV"
    "$CEPH_SINGLE_NODE" down "$CEPH_DIR" >/dev/null 2>&1 || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

cd "$REPO"
echo "measure-namespaces: building the measurement (release)" >&2
cargo test --release -p sluice --test namespace_scale --no-run >&2
echo "measure-namespaces: starting a one-node cluster" >&2
"$CEPH_SINGLE_NODE" up "$WORK/ceph" >"$CLUSTER_ENV"
# shellcheck disable=SC1090
. "$CLUSTER_ENV"
export CEPH_DIR CEPH_CONF SLUICE_REQUIRE_CEPH=1 SLUICE_SCALE_NAMESPACES=$NAMESPACES

mkdir -p "$(dirname "$OUT")"
{
  echo "# Namespaces on a three-gateway group: $(date -u +%Y-%m-%d), $(git rev-parse --short HEAD)"
  echo
  echo "scripts/measure-namespaces.sh --namespaces $NAMESPACES$([ "$LINUX" = 1 ] && echo ' --linux'),"
  echo "$(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo),"
  echo "osd_client_watch_timeout $(awk -F= '/osd_client_watch_timeout/ {gsub(/ /, "", $2); print $2}' "$CEPH_CONF") s."
  echo
} >"$OUT"
cargo test --release -p sluice --test namespace_scale -- --ignored --nocapture 2>&1 \
  | tee "$WORK/run.log" | grep --line-buffered '^|' | tee -a "$OUT"
grep -q '^test result: ok' "$WORK/run.log" || { tail -40 "$WORK/run.log" >&2; die "the measurement failed (log above)"; }
echo "measure-namespaces: written to $OUT" >&2
