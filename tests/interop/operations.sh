#!/usr/bin/env bash
# Interop: operating `sluice serve` under a connected Linux kernel host (issue 6).
#
# sluice serves one subsystem (allow_any_host) with one file-backed namespace, a
# management socket and a metrics endpoint; the Linux kernel host (nvme-cli 2.3,
# fio 3.33 in one linux-nvme-peer guest boot, tests/interop/guest/operations-guest.sh)
# connects with --ctrl-loss-tmo 120 --reconnect-delay 1 and stays connected while
# this script, taking turns with the guest through marker files in the 9p share:
#   1. adds a second (file) namespace with `sluice ns add`: the guest sees the new
#      block device by itself (namespace attribute notice), with the NGUID the API
#      reported, without a reconnect; the config file now lists it;
#   2. scrapes http://METRICS/metrics while the guest runs fio (128 KiB sequential
#      write of 32 MiB + crc32c verify, iodepth 1, end_fsync): the counters of
#      namespace 1 grow during the run and end equal to what fio did (written bytes
#      and write commands exactly; reads at least the verify reads; a Flush);
#      `sluice stat -o json` samples the same endpoint;
#   3. adds a listener on a fourth free port with `sluice listener add`: the guest
#      connects a second controller (--ctrl-loss-tmo 2) through it; `sluice listener
#      remove` closes that controller's connections only: it leaves "live" and goes
#      away, while the first stays live and fio --verify_only passes through it;
#   4. edits the config file by hand (namespace 3, 16 MiB RAM) and sends SIGHUP: the
#      guest sees the namespace by itself, and sluice leaves the file as written;
#      then a broken edit + SIGHUP is refused (the log names the file and the line)
#      while the guest's I/O goes on; the good file is put back and reloaded;
#   5. SIGKILLs sluice, restarts it from the same config file: the file is byte for
#      byte the same, `sluice ns list` gives the same NSIDs, NGUIDs and UUIDs, the
#      guest reconnects by itself within 30 s, sees the same NGUIDs (sysfs and a
#      fresh Identify Namespace), and fio --verify_only passes on both namespaces;
#      the new process counts the verify reads and no writes;
#   6. the guest disconnects, its kernel log has no nvme error besides the expected
#      reconnect lines, and sluice exits 0 on SIGTERM.
#
# Usage: tests/interop/operations.sh     (or: tests/interop/run-all.sh operations)
# Environment:
#   OUT=DIR           artifact root (default <repo>/target/interop); writes DIR/operations/
#   SLUICE_BIN=PATH   sluice binary (default: build ${CARGO_TARGET_DIR:-target}/release/sluice)
#   GUEST_TIMEOUT=S   bound for the whole guest run (default 600)
#   SLUICE_LOG=...    sluice's log filter (default info)
# Functions here are also called indirectly (traps, wait_for), which ShellCheck
# cannot see:
# shellcheck disable=SC2317
set -euo pipefail

TEST_NAME=operations
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
INTEROP_REPO=$REPO
# shellcheck source=tests/interop/lib/common.sh
. "$REPO/tests/interop/lib/common.sh"

OUT_ROOT=${OUT:-$REPO/target/interop}
mkdir -p "$OUT_ROOT"
OUT_DIR=$(cd "$OUT_ROOT" && pwd)/$TEST_NAME
GUEST_TIMEOUT=${GUEST_TIMEOUT:-600}
GUEST_SCRIPT=$REPO/tests/interop/guest/operations-guest.sh
NQN=nqn.2026-11.io.sluice:ops
FIO_MIB=32          # fio writes this much to namespace 1 ...
FIO_BS=131072       # ... in 128 KiB writes
NS2_FIO_MIB=8
WAIT_GUEST=240      # bound for each wait on the guest (boot under TCG included)
SYNC=$OUT_DIR/guest/sync

TARGET_PID='' TARGET_NAME='' GUEST_PID='' TAIL_PID='' SCRAPER_PID='' STAT_PID='' SOCK_DIR=''
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -z "$SCRAPER_PID" ] || kill "$SCRAPER_PID" 2>/dev/null || true
  [ -z "$STAT_PID" ] || kill "$STAT_PID" 2>/dev/null || true
  if [ -n "$GUEST_PID" ] && kill -0 "$GUEST_PID" 2>/dev/null; then
    # the guest gives up at its next wait, disconnects and powers off
    [ -d "$SYNC" ] && echo "the host script is exiting" >"$SYNC/host-abort"
    stop_pid "$GUEST_PID" linux-nvme-peer 60 TERM || true
  fi
  [ -z "$TAIL_PID" ] || kill "$TAIL_PID" 2>/dev/null || true
  [ -z "$TARGET_PID" ] || stop_pid "$TARGET_PID" "$TARGET_NAME" 20 TERM || true
  [ -z "$SOCK_DIR" ] || rm -rf "$SOCK_DIR"
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

for tool in ss jq sha256sum; do
  command -v "$tool" >/dev/null || die "'$tool' is not installed: run scripts/setup.sh"
done
[ -x "$LNP" ] || die "linux-nvme-peer not found at $LNP (expected in ../shared/ next to the repository)"
[ -r "$GUEST_SCRIPT" ] || die "guest script $GUEST_SCRIPT is missing"

rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR/peer" "$OUT_DIR/data" "$OUT_DIR/metrics" "$SYNC"

use_sluice_binary
[ -x "$SLUICE" ] || die "sluice binary $SLUICE not found"

# ---------------------------------------------------------------------------
# checks on this machine: CHECK lines like the guest's
# ---------------------------------------------------------------------------
HOST_OK=0 HOST_FAILED=()
host_ok() { HOST_OK=$((HOST_OK + 1)); log "CHECK host-$1: ok${2:+ ($2)}"; }
host_fail() { HOST_FAILED+=("host-$1"); log "CHECK host-$1: FAIL${2:+ ($2)}"; }
# expect NAME CONDITION-DESCRIPTION TEST...: host_ok if TEST succeeds, else host_fail
expect() {
  local name=$1 what=$2
  shift 2
  if "$@"; then host_ok "$name" "$what"; else host_fail "$name" "$what"; fi
}

# three free ports in a row: I/O, discovery, metrics
IO_PORT=$(( 20000 + RANDOM % 12000 ))
while port_listening "$IO_PORT" || port_listening "$((IO_PORT + 1))" || port_listening "$((IO_PORT + 2))"; do
  IO_PORT=$((IO_PORT + 3))
done
DISC_PORT=$((IO_PORT + 1))
METRICS=127.0.0.1:$((IO_PORT + 2))
# and one for the listener added (and removed) while sluice runs
LISTENER_PORT=$((IO_PORT + 3))
while port_listening "$LISTENER_PORT"; do LISTENER_PORT=$((LISTENER_PORT + 1)); done
# a Unix socket path must fit in 108 bytes
SOCK=$OUT_DIR/rpc.sock
if [ ${#SOCK} -gt 100 ]; then SOCK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sluice-ops.XXXXXX"); SOCK=$SOCK_DIR/rpc.sock; fi
CONFIG=$OUT_DIR/sluice.toml
NS1_PATH=$OUT_DIR/data/ns1.img
NS2_PATH=$OUT_DIR/data/ns2.img
{
  echo "# generated by tests/interop/$TEST_NAME.sh"
  printf '[[listener]]\naddress = "127.0.0.1:%s"\n\n' "$IO_PORT"
  printf '[[listener]]\naddress = "127.0.0.1:%s"\ndiscovery_only = true\n\n' "$DISC_PORT"
  printf '[[subsystem]]\nnqn = "%s"\nallow_any_host = true\n\n' "$NQN"
  printf '[[subsystem.namespace]]\nnsid = 1\nbackend = "file"\npath = "%s"\nsize = "64MiB"\ndirect_io = true\n\n' "$NS1_PATH"
  printf '[runtime]\nthreads = 2\npoll_mode = "sleep"\n'
} >"$CONFIG"
"$SLUICE" config check "$CONFIG" >"$OUT_DIR/config-check.txt" 2>&1 ||
  { tail_file "$OUT_DIR/config-check.txt"; die "sluice config check rejected $CONFIG"; }
log "subsystem $NQN on 127.0.0.1:$IO_PORT (discovery :$DISC_PORT), metrics http://$METRICS/metrics, socket $SOCK"
log "artifacts: $OUT_DIR"

sl() { "$SLUICE" "$@" --socket "$SOCK"; }

# start_serve N: `sluice serve` (log sluice-N.log, stdout sluice-N.stdout); waits
# (at most 30 s) for "sluice: ready" and both ports
RUN=0
start_serve() {
  RUN=$1
  TARGET_NAME=sluice
  NO_COLOR=1 SLUICE_LOG=${SLUICE_LOG:-info} "$SLUICE" serve --config "$CONFIG" --rpc-socket "$SOCK" \
    --metrics-address "$METRICS" >"$OUT_DIR/sluice-$RUN.stdout" 2>"$OUT_DIR/sluice-$RUN.log" </dev/null &
  TARGET_PID=$!
  _serve_ready() {
    kill -0 "$TARGET_PID" 2>/dev/null || return 2
    grep -q '^sluice: ready' "$OUT_DIR/sluice-$RUN.stdout" && port_listening "$IO_PORT" && port_listening "$DISC_PORT"
  }
  local t0=$SECONDS
  if ! wait_for 30 "sluice (run $RUN) to be ready" _serve_ready; then
    tail_file "$OUT_DIR/sluice-$RUN.stdout"; tail_file "$OUT_DIR/sluice-$RUN.log"
    return 1
  fi
  log "sluice run $RUN is up (pid $TARGET_PID, ready after $((SECONDS - t0)) s)"
}

# scrape FILE: GET /metrics into FILE (bash's /dev/tcp: no curl needed)
scrape() {
  local host=${METRICS%:*} port=${METRICS##*:}
  # shellcheck disable=SC2016 # the inner script expands its own $0/$1
  timeout 5 bash -c 'exec 3<>"/dev/tcp/$0/$1" && printf "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n" "$0" >&3 && cat <&3' \
    "$host" "$port" >"$1.tmp" 2>/dev/null || return 1
  head -n 1 "$1.tmp" | grep -q ' 200 ' || return 1
  mv "$1.tmp" "$1"
}
# metric FILE NAME NSID: the value of NAME{subsystem="$NQN",nsid="NSID"} (empty if absent)
metric() {
  awk -v k="$2{subsystem=\"$NQN\",nsid=\"$3\"}" '$1 == k { printf "%.0f\n", $2; exit }' "$1"
}
# delta BEFORE AFTER NAME NSID: how much NAME grew between two scrapes (absent = 0)
delta() {
  local x y
  x=$(metric "$1" "$3" "$4") y=$(metric "$2" "$3" "$4")
  echo $(( ${y:-0} - ${x:-0} ))
}

# milliseconds since the epoch; ms_since T0: seconds (two decimals) since T0
now_ms() { date +%s%3N; }
ms_since() { awk -v a="$1" -v b="$(now_ms)" 'BEGIN { printf "%.2f", (b - a) / 1000 }'; }
contains() { case $1 in *"$2"*) return 0 ;; esac; return 1; }
not_listening() { ! port_listening "$1"; }
lacks() { ! grep -qF -- "$1" "$2"; }
config_check() { "$SLUICE" config check "$1" >"$2" 2>&1; }
sha() { sha256sum <"$1" | cut -d' ' -f1; }
# log_count PATTERN: lines of the running sluice's log with the fixed string PATTERN
log_count() { grep -cF -- "$1" "$OUT_DIR/sluice-$RUN.log" || true; }
# replace_config FILE: the config file becomes FILE's content (as an editor saves:
# a new file renamed over the old one)
replace_config() { cp "$1" "$CONFIG.edit" && mv "$CONFIG.edit" "$CONFIG"; }
# sighup_and_wait PATTERN: SIGHUP sluice, wait (at most 20 s) for one more log line
# with PATTERN; sets RELOAD_LINE to that line and RELOAD_SECONDS to how long it took
sighup_and_wait() {
  local before t0
  before=$(log_count "$1") t0=$(now_ms) RELOAD_LINE='' RELOAD_SECONDS=''
  kill -HUP "$TARGET_PID"
  _more_lines() { kill -0 "$TARGET_PID" 2>/dev/null || return 2; [ "$(log_count "$1")" -gt "$2" ]; }
  wait_for 20 "'$1' in sluice-$RUN.log after SIGHUP" _more_lines "$1" "$before" || return 1
  RELOAD_SECONDS=$(ms_since "$t0")
  RELOAD_LINE=$(grep -F -- "$1" "$OUT_DIR/sluice-$RUN.log" | tail -n 1)
}

# guest markers (files in the 9p share): host_signal NAME [TEXT]; await_guest NAME TIMEOUT
host_signal() { printf '%s\n' "${2:-}" >"$SYNC/.$1.tmp" && mv "$SYNC/.$1.tmp" "$SYNC/$1"; }
_guest_marker() {
  [ -e "$SYNC/$1" ] && return 0
  [ -e "$SYNC/guest-abort" ] && { log "the guest gave up: $(cat "$SYNC/guest-abort")"; return 2; }
  kill -0 "$GUEST_PID" 2>/dev/null || { log "the guest run ended"; return 2; }
  return 1
}
await_guest() { wait_for "$2" "the guest's '$1'" _guest_marker "$1"; }

failures=()
# ---------------------------------------------------------------------------
# 1. sluice, then the guest (in the background: the two take turns)
# ---------------------------------------------------------------------------
start_serve 1 || die "sluice did not come up"
T_START=$SECONDS
guest_env="IO_PORT=$IO_PORT DISC_PORT=$DISC_PORT LISTENER_PORT=$LISTENER_PORT CTRL_LOSS_TMO=120 FIO_SIZE=${FIO_MIB}m NS2_FIO_SIZE=${NS2_FIO_MIB}m WAIT_HOST=120"
log "booting the Linux host guest (timeout ${GUEST_TIMEOUT}s; output: guest.log, details: guest/)"
TMPDIR=$OUT_DIR/peer "$LNP" initiator --keep --timeout "$GUEST_TIMEOUT" \
  --target-port "$IO_PORT" --subnqn "$NQN" \
  --share "$OUT_DIR/guest" --add "$GUEST_SCRIPT:/root/operations-guest.sh" --add "$REPO/tests/interop/guest/checks.sh:/root/checks.sh" \
  -- "$guest_env sh /root/operations-guest.sh" </dev/null >"$OUT_DIR/guest.log" 2>&1 &
GUEST_PID=$!
# show the guest's output as it comes (tail ends with the guest)
tail -n +1 -f --pid="$GUEST_PID" "$OUT_DIR/guest.log" &
TAIL_PID=$!

steps_ok=1
# ---------------------------------------------------------------------------
# 2. a namespace added through the API while the guest is connected
# ---------------------------------------------------------------------------
if await_guest connected "$WAIT_GUEST"; then
  log "guest connected ($(cat "$SYNC/connected")); adding namespace 2 through the management API"
  if sl ns add "$NQN" --nsid 2 --backend file --path "$NS2_PATH" --size 32MiB --direct-io true -o json \
      >"$OUT_DIR/ns-add.json" 2>"$OUT_DIR/ns-add.err"; then
    NS2_NGUID=$(jq -r .nguid "$OUT_DIR/ns-add.json")
    host_ok ns-add "namespace 2, NGUID $NS2_NGUID"
    host_signal ns-added "$NS2_NGUID"
    expect ns-add-in-config "the config file lists nsid 2 with $NS2_PATH" \
      grep -qF "path = \"$NS2_PATH\"" "$CONFIG"
    sl ns list "$NQN" -o json >"$OUT_DIR/ns-list-1.json" 2>&1 || true
    expect ns-list "sluice ns list shows namespaces 1 and 2" \
      test "$(jq -c '[.namespaces[].nsid]' "$OUT_DIR/ns-list-1.json")" = '[1,2]'
  else
    host_fail ns-add "exit status $?: $(cat "$OUT_DIR/ns-add.err")"
    host_signal host-abort "sluice ns add failed"; steps_ok=0
  fi
else
  steps_ok=0
fi

# ---------------------------------------------------------------------------
# 3. metrics during fio on namespace 1
# ---------------------------------------------------------------------------
if [ $steps_ok = 1 ] && await_guest fio-start "$WAIT_GUEST"; then
  if scrape "$OUT_DIR/metrics/baseline.txt"; then
    host_ok metrics-scrape "GET http://$METRICS/metrics"
  else
    host_fail metrics-scrape "GET http://$METRICS/metrics failed"
    : >"$OUT_DIR/metrics/baseline.txt"
  fi
  # scrape every 0.3 s until the guest says fio is done; sluice stat alongside
  (
    i=0
    while [ ! -e "$SYNC/fio-done" ] && [ ! -e "$SYNC/guest-abort" ] && [ $i -lt 2000 ]; do
      scrape "$OUT_DIR/metrics/during-$(printf %04d $i).txt" || true
      i=$((i + 1)); sleep 0.3
    done
  ) &
  SCRAPER_PID=$!
  "$SLUICE" stat --metrics-address "$METRICS" --interval 1 --count 5 -o json \
    >"$OUT_DIR/stat.json" 2>"$OUT_DIR/stat.err" &
  STAT_PID=$!
  host_signal metrics-baseline
  if await_guest fio-done 300; then
    wait "$SCRAPER_PID" || true; SCRAPER_PID=''
    scrape "$OUT_DIR/metrics/after-fio.txt" || : >"$OUT_DIR/metrics/after-fio.txt"
    b=$OUT_DIR/metrics/baseline.txt a=$OUT_DIR/metrics/after-fio.txt
    fio_json=$OUT_DIR/guest/fio-ns1.json
    # fio 3.33's JSON (0 when unreadable); verify reads are accounted as reads
    fj() { jq -er "$1 // 0" "$fio_json" 2>/dev/null || echo 0; }
    fio_wb=$(fj .jobs[0].write.io_bytes) fio_wn=$(fj .jobs[0].write.total_ios)
    fio_rb=$(fj .jobs[0].read.io_bytes) fio_rn=$(fj .jobs[0].read.total_ios) fio_ms=$(fj .jobs[0].job_runtime)
    m_wb=$(delta "$b" "$a" sluice_namespace_written_bytes_total 1)
    m_wn=$(delta "$b" "$a" sluice_namespace_write_commands_total 1)
    m_rb=$(delta "$b" "$a" sluice_namespace_read_bytes_total 1)
    m_rn=$(delta "$b" "$a" sluice_namespace_read_commands_total 1)
    m_on=$(delta "$b" "$a" sluice_namespace_other_commands_total 1)
    m_err=$(delta "$b" "$a" sluice_namespace_errors_total 1)
    log "fio on namespace 1 (${fio_ms} ms): wrote $fio_wb bytes in $fio_wn writes, verify read $fio_rb bytes in $fio_rn reads"
    log "metrics delta nsid 1: written_bytes $m_wb, write_commands $m_wn, read_bytes $m_rb, read_commands $m_rn, other_commands $m_on, errors $m_err"
    c=0; [ "$m_wb" = "$fio_wb" ] && [ "$fio_wb" = $((FIO_MIB << 20)) ] && c=1
    expect metrics-written-bytes "sluice_namespace_written_bytes_total +$m_wb = fio's $fio_wb (= ${FIO_MIB} MiB)" test $c = 1
    c=0; [ "$m_wn" = "$fio_wn" ] && [ "$fio_wn" = $(((FIO_MIB << 20) / FIO_BS)) ] && c=1
    expect metrics-write-commands "sluice_namespace_write_commands_total +$m_wn = fio's $fio_wn writes of 128 KiB" test $c = 1
    c=0; [ "$m_rb" -ge "$fio_rb" ] && [ "$fio_rb" -gt 0 ] && c=1
    expect metrics-read-bytes "sluice_namespace_read_bytes_total +$m_rb >= fio's $fio_rb verify bytes" test $c = 1
    c=0; [ "$m_rn" -ge "$fio_rn" ] && [ "$fio_rn" -gt 0 ] && c=1
    expect metrics-read-commands "sluice_namespace_read_commands_total +$m_rn >= fio's $fio_rn verify reads" test $c = 1
    expect metrics-flush "sluice_namespace_other_commands_total +$m_on >= 1 (end_fsync's Flush)" test "$m_on" -ge 1
    expect metrics-no-errors "sluice_namespace_errors_total +$m_err" test "$m_err" = 0
    sub_wb=$(( $(awk -v k="sluice_subsystem_written_bytes_total{subsystem=\"$NQN\"}" '$1 == k { printf "%.0f", $2 }' "$a") ))
    expect metrics-subsystem-total "sluice_subsystem_written_bytes_total $sub_wb = namespace 1's written bytes (nothing else wrote yet)" \
      test "$sub_wb" = "$(metric "$a" sluice_namespace_written_bytes_total 1)"
    # the samples taken during the run
    series='' mid=0 mono=1 prev=0 n=0
    for f in "$OUT_DIR"/metrics/during-*.txt; do
      [ -e "$f" ] || continue
      v=$(delta "$b" "$f" sluice_namespace_written_bytes_total 1)
      n=$((n + 1)); series+=" $((v >> 20))"
      [ "$v" -lt "$prev" ] && mono=0
      [ "$v" -gt 0 ] && [ "$v" -lt "$m_wb" ] && mid=$((mid + 1))
      prev=$v
    done
    log "written MiB of namespace 1 in the $n scrapes during fio (every 0.3 s):$series"
    c=0; [ "$mono" = 1 ] && [ "$n" -gt 0 ] && c=1
    expect metrics-monotonic "$n scrapes during the run, the counter never went back" test $c = 1
    if [ "${fio_ms:-0}" -ge 2000 ]; then
      expect metrics-during-run "$mid scrape(s) saw the run in progress (0 < written < total)" test "$mid" -gt 0
    else
      log "note: fio ran ${fio_ms} ms, too short to require a scrape in mid-run ($mid seen)"
    fi
    wait "$STAT_PID" || true; STAT_PID=''
    if jq -e --arg n "$NQN" '[.[] | select(.subsystem == $n and .nsid == "1")] | length == 1' \
        <(head -n 1 "$OUT_DIR/stat.json") >/dev/null 2>&1; then
      host_ok sluice-stat "$(wc -l <"$OUT_DIR/stat.json") samples; peak write $(jq -s --arg n "$NQN" \
        '[.[][] | select(.subsystem == $n and .nsid == "1") | .write_megabytes_per_second] | max | . * 10 | round / 10' \
        "$OUT_DIR/stat.json") MB/s"
    else
      host_fail sluice-stat "no sample for namespace 1 in stat.json: $(head -c 300 "$OUT_DIR/stat.err")"
    fi
  else
    steps_ok=0
  fi
else
  steps_ok=0
fi

# ---------------------------------------------------------------------------
# 4. a listener added live, a second controller through it, the listener removed
# ---------------------------------------------------------------------------
NEW_LISTENER=127.0.0.1:$LISTENER_PORT
if [ $steps_ok = 1 ] && await_guest listener-ready 300; then
  t0=$(now_ms)
  if sl listener add "$NEW_LISTENER" -o json >"$OUT_DIR/listener-add.json" 2>"$OUT_DIR/listener-add.err"; then
    host_ok listener-add "$NEW_LISTENER accepting after $(ms_since "$t0") s: $(jq -c . "$OUT_DIR/listener-add.json")"
    expect listener-add-listening "something listens on :$LISTENER_PORT" port_listening "$LISTENER_PORT"
    expect listener-add-in-config "the config file lists $NEW_LISTENER" grep -qF "address = \"$NEW_LISTENER\"" "$CONFIG"
    host_signal listener-added "$LISTENER_PORT"
  else
    host_fail listener-add "exit status $?: $(cat "$OUT_DIR/listener-add.err")"
    host_signal host-abort "sluice listener add failed"; steps_ok=0
  fi
  if [ $steps_ok = 1 ] && await_guest ctrl2-connected "$WAIT_GUEST"; then
    sl subsystem show "$NQN" -o json >"$OUT_DIR/subsystem-show-2.json" 2>&1 || true
    expect listener-second-controller "sluice subsystem show: controllers $(jq -c '[.controller_list[]?.cntlid]' "$OUT_DIR/subsystem-show-2.json" 2>/dev/null); the guest's second is cntlid $(cut -d' ' -f2 "$SYNC/ctrl2-connected")" \
      test "$(jq -r .controllers "$OUT_DIR/subsystem-show-2.json" 2>/dev/null)" = 2
    t0=$(now_ms)
    if sl listener remove "$NEW_LISTENER" -o json >"$OUT_DIR/listener-remove.json" 2>"$OUT_DIR/listener-remove.err"; then
      closed=$(jq -r .connections_closed "$OUT_DIR/listener-remove.json")
      host_ok listener-remove "$NEW_LISTENER removed in $(ms_since "$t0") s: $closed connection(s) through it closed"
      host_signal listener-removed "removed $NEW_LISTENER: $closed connection(s) through it closed"
      expect listener-remove-connections "$closed >= 2: the second controller's admin and I/O queues" test "$closed" -ge 2
      expect listener-remove-not-listening "nothing listens on :$LISTENER_PORT" not_listening "$LISTENER_PORT"
      expect listener-remove-config "the config file no longer lists $NEW_LISTENER" \
        lacks "address = \"$NEW_LISTENER\"" "$CONFIG"
      _one_controller() { [ "$(sl subsystem show "$NQN" -o json 2>/dev/null | jq -r .controllers)" = 1 ]; }
      if wait_for 10 "sluice to release the second controller" _one_controller; then
        host_ok listener-remove-controller-released "1 controller left $(ms_since "$t0") s after the removal (the first one)"
      else
        host_fail listener-remove-controller-released "sluice subsystem show still lists 2 controllers after 10 s"
      fi
    else
      host_fail listener-remove "exit status $?: $(cat "$OUT_DIR/listener-remove.err")"
      host_signal host-abort "sluice listener remove failed"; steps_ok=0
    fi
  else
    steps_ok=0
  fi
else
  steps_ok=0
fi

# ---------------------------------------------------------------------------
# 5. reload (SIGHUP) of an edited config file, then of a broken one
# ---------------------------------------------------------------------------
if [ $steps_ok = 1 ] && await_guest listener-done "$WAIT_GUEST"; then
  cp "$CONFIG" "$OUT_DIR/sluice.toml.before-reload"
  # by hand: namespace 3 (16 MiB of RAM) in the subsystem, before [runtime]
  awk '/^\[runtime\]/ && !done { printf "[[subsystem.namespace]]\nnsid = 3\nbackend = \"ram\"\nsize = \"16MiB\"\n\n"; done = 1 } { print }' \
    "$OUT_DIR/sluice.toml.before-reload" >"$OUT_DIR/sluice.toml.reload"
  replace_config "$OUT_DIR/sluice.toml.reload"
  sum_written=$(sha "$CONFIG")
  expect reload-config-check "sluice config check accepts the edited file" \
    config_check "$CONFIG" "$OUT_DIR/config-check-reload.txt"
  if sighup_and_wait "reloaded: "; then
    line=$RELOAD_LINE
    expect reload-applied "after ${RELOAD_SECONDS} s: ${line##*reloaded: }" contains "$line" "reloaded: 1 change(s) applied, 0 need a restart, 0 failed"
    expect reload-config-untouched "the file is what this script wrote (sha256 $(sha "$CONFIG"))" test "$(sha "$CONFIG")" = "$sum_written"
    sl rpc config_show >"$OUT_DIR/config-show-reload.json" 2>&1 || true
    expect reload-config-show "config_show is the edited file" cmp -s <(jq -j .text "$OUT_DIR/config-show-reload.json") "$CONFIG"
    sl ns list "$NQN" -o json >"$OUT_DIR/ns-list-reload.json" 2>&1 || true
    NS3_NGUID=$(jq -r '.namespaces[] | select(.nsid == 3) | .nguid' "$OUT_DIR/ns-list-reload.json" 2>/dev/null || true)
    expect reload-ns-list "sluice ns list: namespaces $(jq -c '[.namespaces[].nsid]' "$OUT_DIR/ns-list-reload.json" 2>/dev/null), NGUID of 3: $NS3_NGUID" \
      test "$(jq -c '[.namespaces[].nsid]' "$OUT_DIR/ns-list-reload.json" 2>/dev/null)" = '[1,2,3]'
    host_signal ns3-added "$NS3_NGUID"
  else
    host_fail reload-applied "no 'reloaded:' line within 20 s of SIGHUP"
    tail_file "$OUT_DIR/sluice-$RUN.log" 10
    host_signal host-abort "the reload did not happen"; steps_ok=0
  fi
  if [ $steps_ok = 1 ] && await_guest ns3-seen "$WAIT_GUEST"; then
    # a typo: a size without its quotes, appended to the file
    cp "$CONFIG" "$OUT_DIR/sluice.toml.good"
    { cat "$OUT_DIR/sluice.toml.good"; printf '\n[[subsystem.namespace]]\nnsid = 4\nbackend = "ram"\nsize = 16MiB\n'; } \
      >"$OUT_DIR/sluice.toml.broken"
    bad_line=$(grep -n '^size = 16MiB$' "$OUT_DIR/sluice.toml.broken" | cut -d: -f1)
    replace_config "$OUT_DIR/sluice.toml.broken"
    rc=0; "$SLUICE" config check "$CONFIG" >"$OUT_DIR/config-check-broken.txt" 2>&1 || rc=$?
    expect reload-broken-config-check "sluice config check exits $rc: $(head -n 1 "$OUT_DIR/config-check-broken.txt")" test "$rc" = 2
    if sighup_and_wait "reload refused"; then
      line=$RELOAD_LINE
      want="reload refused, still running the previous configuration: config file $CONFIG: TOML parse error at line $bad_line,"
      expect reload-broken-refused "after ${RELOAD_SECONDS} s, the log names the file and line $bad_line: ${line#*ERROR }" contains "$line" "$want"
      expect reload-broken-alive "sluice (pid $TARGET_PID) still runs" kill -0 "$TARGET_PID"
      expect reload-broken-file-kept "the broken file is left as written" cmp -s "$CONFIG" "$OUT_DIR/sluice.toml.broken"
      host_signal broken-reload "$line"
      if await_guest broken-io-done "$WAIT_GUEST"; then
        sl ns list "$NQN" -o json >"$OUT_DIR/ns-list-broken.json" 2>&1 || true
        expect reload-broken-unchanged "sluice still serves namespaces $(jq -c '[.namespaces[].nsid]' "$OUT_DIR/ns-list-broken.json" 2>/dev/null)" \
          test "$(jq -c '[.namespaces[].nsid]' "$OUT_DIR/ns-list-broken.json" 2>/dev/null)" = '[1,2,3]'
        # the good file back, and reloaded: nothing to change
        replace_config "$OUT_DIR/sluice.toml.good"
        if sighup_and_wait "reload: the config file is unchanged"; then
          host_ok reload-restored "the good file put back; SIGHUP: the config file is unchanged (${RELOAD_SECONDS} s)"
        else
          host_fail reload-restored "no 'unchanged' line after the good file was put back"; steps_ok=0
        fi
      else
        steps_ok=0
      fi
    else
      host_fail reload-broken-refused "no 'reload refused' line within 20 s of SIGHUP"
      tail_file "$OUT_DIR/sluice-$RUN.log" 10
      replace_config "$OUT_DIR/sluice.toml.good"
      host_signal host-abort "the broken reload was not refused"; steps_ok=0
    fi
  else
    steps_ok=0
  fi
else
  steps_ok=0
fi

# ---------------------------------------------------------------------------
# 6. SIGKILL and restart from the same config file
# ---------------------------------------------------------------------------
if [ $steps_ok = 1 ] && await_guest pre-restart 300; then
  sum_before=$(sha256sum <"$CONFIG" | cut -d' ' -f1)
  sl ns list "$NQN" -o json >"$OUT_DIR/ns-list-before.json"
  cp "$CONFIG" "$OUT_DIR/sluice.toml.before-kill"
  # the guest's NGUIDs (sysfs, dashed or not) against the API's
  while read -r nsid _ nguid; do
    api=$(jq -r --argjson n "$nsid" '.namespaces[] | select(.nsid == $n) | .nguid' "$OUT_DIR/ns-list-before.json")
    expect "ns$nsid-nguid-guest-matches-api" "guest ${nguid}, API $api" test "${nguid//-/}" = "$api"
  done <"$SYNC/pre-restart"
  log "SIGKILL sluice (pid $TARGET_PID); config sha256 $sum_before"
  kill -KILL "$TARGET_PID"
  rc=0; wait "$TARGET_PID" 2>/dev/null || rc=$?   # (no "Killed" job notice)
  TARGET_PID=''
  expect killed "sluice ended by SIGKILL (status $rc)" test "$rc" = 137
  sleep 3
  expect config-unchanged-after-kill "sha256 $(sha256sum <"$CONFIG" | cut -d' ' -f1)" \
    test "$(sha256sum <"$CONFIG" | cut -d' ' -f1)" = "$sum_before"
  t_restart=$SECONDS
  if start_serve 2; then
    host_ok restart "sluice serve from the same config file and socket path (stale socket replaced)"
    host_signal restarted
    expect config-unchanged-after-restart "sha256 $(sha256sum <"$CONFIG" | cut -d' ' -f1)" \
      test "$(sha256sum <"$CONFIG" | cut -d' ' -f1)" = "$sum_before"
    sl ns list "$NQN" -o json >"$OUT_DIR/ns-list-after.json" || true
    expect identities-unchanged "NSIDs, NGUIDs, UUIDs, sizes, paths: $(jq -c '[.namespaces[] | [.nsid, .nguid]]' "$OUT_DIR/ns-list-after.json")" \
      cmp -s <(jq -S .namespaces "$OUT_DIR/ns-list-before.json") <(jq -S .namespaces "$OUT_DIR/ns-list-after.json")
    sl rpc config_show >"$OUT_DIR/config-show.json" 2>&1 || true
    expect config-show "the restarted target runs from the file as written" \
      cmp -s <(jq -j .text "$OUT_DIR/config-show.json") "$CONFIG"
  else
    host_fail restart "sluice did not come back within 30 s"
    host_signal host-abort "sluice did not restart"; steps_ok=0
  fi
  if [ $steps_ok = 1 ] && await_guest verify-done 300; then
    log "guest verified the data $((SECONDS - t_restart)) s after the restart"
    scrape "$OUT_DIR/metrics/after-verify.txt" || : >"$OUT_DIR/metrics/after-verify.txt"
    v=$OUT_DIR/metrics/after-verify.txt
    v_rb=$(metric "$v" sluice_namespace_read_bytes_total 1) v_wb=$(metric "$v" sluice_namespace_written_bytes_total 1)
    c=0; [ "${v_rb:-0}" -ge $((FIO_MIB << 20)) ] && [ "${v_wb:-1}" = 0 ] && c=1
    expect metrics-after-restart "the restarted process counted ${v_rb:-?} bytes read (>= ${FIO_MIB} MiB of verify_only) and ${v_wb:-?} written (0)" \
      test $c = 1
  else
    steps_ok=0
  fi
else
  steps_ok=0
fi

# ---------------------------------------------------------------------------
# 7. the guest's end, then SIGTERM
# ---------------------------------------------------------------------------
guest_rc=0
if [ $steps_ok = 0 ] && [ ! -e "$SYNC/guest-abort" ] && [ ! -e "$SYNC/host-abort" ] &&
    kill -0 "$GUEST_PID" 2>/dev/null; then
  host_signal host-abort "a step on the host failed"
fi
# the guest disconnects and checks its kernel log; bounded by its own --timeout
wait "$GUEST_PID" || guest_rc=$?
GUEST_PID=''
wait "$TAIL_PID" 2>/dev/null || true
TAIL_PID=''
log "guest finished with status $guest_rc after $((SECONDS - T_START))s"
console=$(find "$OUT_DIR/peer" -name console.log -print -quit 2>/dev/null || true)
[ -n "$console" ] && tr -d '\r' <"$console" >"$OUT_DIR/guest-console.log"
case $guest_rc in
  0) ;;
  124) failures+=("guest run timed out after ${GUEST_TIMEOUT}s") ;;
  125) failures+=("linux-nvme-peer harness/boot error (status 125; see guest.log and peer/)") ;;
  *) failures+=("guest checks failed (status $guest_rc)") ;;
esac

OUT_LOG=$OUT_DIR/sluice-$RUN.log
cp "$OUT_LOG" "$OUT_DIR/sluice.log" 2>/dev/null || true
cp "$OUT_DIR/sluice-$RUN.stdout" "$OUT_DIR/sluice.stdout" 2>/dev/null || true
if [ -n "$TARGET_PID" ]; then
  # SIGTERM: exit status 0 within 20 s, no panic (stop_target adds to failures)
  n_before=${#failures[@]}
  stop_target
  if [ ${#failures[@]} -eq "$n_before" ]; then log "CHECK host-sigterm: ok (sluice exited 0)"
  else log "CHECK host-sigterm: FAIL (${failures[*]:$n_before})"; fi
fi
for f in "$OUT_DIR"/sluice-*.log; do
  if grep -q 'panicked at' "$f"; then host_fail no-panic "$(basename "$f")"; fi
  # (the refused reload of step 5 logs one ERROR on purpose)
  n_err=$(grep -E '(^|[^[:alnum:]])ERROR([^[:alnum:]]|$)' "$f" | grep -cvF 'reload refused, still running' || true)
  if [ "$n_err" -ne 0 ]; then
    log "note: $(basename "$f") has $n_err unexpected ERROR line(s):"
    grep -E '(^|[^[:alnum:]])ERROR([^[:alnum:]]|$)' "$f" | grep -vF 'reload refused, still running' | head -n 10 | sed 's/^/  | /'
  fi
done
[ ${#HOST_FAILED[@]} -eq 0 ] || failures+=("${#HOST_FAILED[@]} check(s) on this machine failed: ${HOST_FAILED[*]}")
[ $steps_ok = 1 ] || failures+=("a step did not complete (see the log above)")

# ---------------------------------------------------------------------------
# verdict
# ---------------------------------------------------------------------------
finish_with_verdict operations "" "guest.log, guest/, sluice-*.log, metrics/, ns-list-*.json"
