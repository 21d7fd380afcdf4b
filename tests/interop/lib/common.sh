# shellcheck shell=bash
# Helpers shared by the interop tests in tests/interop/*.sh (sourced, not run).
#
# Conventions: every wait is bounded; every helper that fails prints why; the
# artifact directory of a test is $OUT_DIR (set by the test).

# repository root and the linux-nvme-peer script (a sibling of the repo, also in CI)
INTEROP_REPO=${INTEROP_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)}
# The peer itself, and the wrapper the tests call: it boots a guest that died while
# booting once more (lib/lnp-retry).
LNP_REAL=${LNP_REAL:-${LNP:-$INTEROP_REPO/../shared/linux-nvme-peer}}
export LNP_REAL
LNP=$INTEROP_REPO/tests/interop/lib/lnp-retry

_t_start=$(date +%s)
log() { printf '[%s +%3ss] %s\n' "${TEST_NAME:-interop}" "$(( $(date +%s) - _t_start ))" "$*"; }
warn() { log "WARNING: $*" >&2; }
die() { log "FAIL: $*" >&2; exit 1; }

# tail_file FILE [N]: show the last N lines of FILE, indented
tail_file() {
  [ -s "$1" ] || { echo "  ($1 is empty)"; return 0; }
  echo "  --- last ${2:-30} lines of $1:"
  tail -n "${2:-30}" "$1" | sed 's/^/  | /'
}

# port_listening PORT: is something listening on TCP PORT (any local address)?
port_listening() {
  [ -n "$(ss -Htln "sport = :$1" 2>/dev/null)" ]
}

# port_owner PORT: describe who listens on PORT (for error messages)
port_owner() {
  ss -Htlnp "sport = :$1" 2>/dev/null | sed 's/^/    /'
}

# wait_for TIMEOUT DESCRIPTION CMD...: poll CMD every 0.2 s until it succeeds;
# fails after TIMEOUT seconds, or at once when CMD returns 2 (= will never succeed)
wait_for() {
  local timeout=$1 what=$2 deadline rc
  shift 2
  deadline=$(( $(date +%s) + timeout ))
  while :; do
    rc=0
    "$@" || rc=$?
    [ "$rc" -eq 0 ] && return 0
    if [ "$rc" -eq 2 ]; then
      log "gave up waiting for $what"
      return 2
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "timed out after ${timeout}s waiting for $what"
      return 1
    fi
    sleep 0.2
  done
}

# stop_pid PID NAME [TIMEOUT] [SIGNAL]: send SIGNAL (default TERM), wait at most
# TIMEOUT seconds (default 20), then SIGKILL. Sets STOP_RC to the exit status
# (or 137 after SIGKILL); returns 0 when the process stopped by itself in time.
stop_pid() {
  local pid=$1 name=$2 timeout=${3:-20} sig=${4:-TERM} deadline
  STOP_RC=0
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid" 2>/dev/null || STOP_RC=$?
    log "$name (pid $pid) had already exited with status $STOP_RC"
    return 0
  fi
  kill "-$sig" "$pid" 2>/dev/null || true
  deadline=$(( $(date +%s) + timeout ))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "$name (pid $pid) did not exit within ${timeout}s of SIG$sig: killing it"
      kill -KILL "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      STOP_RC=137
      return 1
    fi
    sleep 0.1
  done
  wait "$pid" 2>/dev/null || STOP_RC=$?
  return 0
}

# ---------------------------------------------------------------------------
# packet capture (tshark) on the loopback interface
# ---------------------------------------------------------------------------
TSHARK_PID=''

# capture_start PCAP LOGFILE PORT...: capture TCP traffic of PORTs on lo into
# PCAP (pcap format); returns once tshark reports that it is capturing
capture_start() {
  local pcap=$1 tlog=$2 filter='' p
  shift 2
  for p in "$@"; do filter="${filter:+$filter or }tcp port $p"; done
  rm -f "$pcap"
  tshark -i lo -n -q -B 64 -F pcap -f "$filter" -w "$pcap" >"$tlog" 2>&1 &
  TSHARK_PID=$!
  if ! wait_for 30 "tshark to start capturing" capture_running "$tlog"; then
    tail_file "$tlog"
    return 1
  fi
  # tshark says it is capturing a moment before its filter is attached: on a loaded
  # machine the first connection's SYN and ICReq were missed, and a stream without
  # its start cannot be dissected (the capture self-test failed that way once).
  sleep 0.5
  log "tshark (pid $TSHARK_PID) capturing '$filter' on lo into $pcap"
}
# capture_gaps PCAP TSHARK-OPTIONS...: sets CAPTURE_GAP_EXCUSED=1 when the capture
# itself lost segments (tshark: "previous segment(s) not captured"; the capture
# buffer overran under load) and every frame a fatal check matched lies in such a
# stream at or after its first gap: after a gap tshark cannot find the PDU
# boundaries and reads the rest of the stream as garbage. Anything before the gap,
# and every stream without one, is still checked. Costs tshark passes only when
# some fatal check matched.
capture_gaps() {
  local pcap=$1 gaps verdict c filter=''
  shift
  CAPTURE_GAP_EXCUSED=0
  for c in "${fatal[@]}"; do
    [ "${CAPTURE_COUNT[${c%%|*}]}" -ne 0 ] && filter+="${filter:+ || }(${c#*|})"
  done
  [ -n "$filter" ] || return 0
  # Without TCP reassembly: the gap flags do not need it, and with it tshark 4.0 ran
  # for over 11 minutes on a 311 MB capture whose streams had a retransmission that
  # overlapped (3.8 s without). Bounded all the same.
  gaps=$(timeout 600 tshark -r "$pcap" -n -o tcp.desegment_tcp_streams:FALSE -Y tcp.analysis.lost_segment \
      -T fields -e tcp.stream -e frame.number 2>/dev/null |
    awk '!($1 in first) { first[$1] = $2 } END { for (s in first) print s, first[s] }')
  [ -n "$gaps" ] || return 0
  verdict=$(tshark -r "$pcap" "$@" -Y "$filter" -T fields -e frame.number -e tcp.stream 2>/dev/null |
    awk -v gaps="$gaps" 'BEGIN { n = split(gaps, g, "\n"); for (i = 1; i <= n; i++) { split(g[i], f, " "); first[f[1]] = f[2] } }
      { if (($2 in first) && $1 + 0 >= first[$2] + 0) excused++; else unexcused++ }
      END { print unexcused + 0, excused + 0 }')
  log "capture lost segments in tcp stream(s) $(awk '{ printf "%s%s (from frame %s)", (NR > 1 ? ", " : ""), $1, $2 }' <<<"$gaps");" \
    "frames failing a check: ${verdict% *} before or outside a gap, ${verdict#* } after one"
  [ "${verdict% *}" = 0 ] && CAPTURE_GAP_EXCUSED=1
  return 0
}

capture_running() {
  kill -0 "$TSHARK_PID" 2>/dev/null || { log "tshark exited early"; return 2; }
  # Not yet (1), also while the background job has not created the log yet: grep's
  # own status 2 for a missing file would read as "never" to wait_for.
  grep -q "^Capturing on" "$1" 2>/dev/null || return 1
}

# capture_stop LOGFILE: stop tshark (SIGTERM), report captured/dropped packets
capture_stop() {
  local tlog=$1
  [ -n "$TSHARK_PID" ] || return 0
  stop_pid "$TSHARK_PID" tshark 30 TERM || true
  TSHARK_PID=''
  CAPTURE_DROPPED=$(sed -n 's/^\([0-9][0-9]*\) packets\{0,1\} dropped.*/\1/p' "$tlog" | head -n 1)
  log "tshark stopped: $(sed -n 's/^\([0-9][0-9]*\) packets\{0,1\} captured.*/\1/p' "$tlog" | head -n 1) packets captured${CAPTURE_DROPPED:+, $CAPTURE_DROPPED dropped}"
  if [ "${CAPTURE_DROPPED:-0}" -gt 0 ]; then
    warn "the capture lost $CAPTURE_DROPPED packets: dissection errors may come from the capture, not the target"
  fi
}

# capture_check PCAP SUMMARY_FILE EXPECT_DIGESTS(0|1) PORT...
# Dissects PCAP (one tshark pass) with every PORT decoded as NVMe/TCP and the
# header and data digests verified. Fails unless the capture holds NVMe/TCP
# PDUs and no frame is malformed or carries an expert-info error, a bad digest,
# a termination request (H2C/C2HTermReq), an unknown PDU type or a PDU length
# shorter than its header; with EXPECT_DIGESTS=1 PDUs with verified-good header
# and data digests must be present too. NVMe completions with a non-zero status
# and expert warnings are reported, not failed. Writes the counts, the expert
# summary and the notable frames to SUMMARY_FILE.
capture_check() {
  local pcap=$1 summary=$2 expect_digests=$3 p
  shift 3
  local -a topt=(-n -o nvme-tcp.check_hdgst:TRUE -o nvme-tcp.check_ddgst:TRUE)
  for p in "$@"; do topt+=(-d "tcp.port==$p,nvme-tcp"); done
  [ -s "$pcap" ] || { log "capture $pcap is missing or empty"; return 1; }

  # "name|display filter" (no commas: io,stat separates its columns with them).
  # The first ones fail the test when they match any frame.
  # A TCP retransmission carries bytes the stream already had; tshark's reassembly
  # may still call it "New fragment overlaps old data" (seen once in CI on a fast
  # retransmission by the guest's side, after the receiver SACKed around a loss),
  # so retransmitted frames do not count as errors; the original ones do.
  local -a fatal=(
    "errors (malformed or expert error)|(_ws.malformed || _ws.expert.severity >= error) && !(tcp.analysis.retransmission || tcp.analysis.fast_retransmission)"
    "bad digests|nvme-tcp.hdgst.status == 0 || nvme-tcp.hdgst.status == 4 || nvme-tcp.ddgst.status == 0 || nvme-tcp.ddgst.status == 4"
    "termination requests|nvme-tcp.type == 2 || nvme-tcp.type == 3"
    "unknown pdu types|nvme-tcp.type == 8 || nvme-tcp.type > 9"
    "plen < hlen|nvme-tcp.plen < nvme-tcp.hlen"
  )
  local -a checks=(
    "frames|frame"
    "nvme-tcp frames|nvme-tcp"
    "${fatal[@]}"
    "nvme error completions|nvme.cqe.status.sc > 0 || nvme.cqe.status.sct > 0"
    "expert warnings|_ws.expert.severity == warning"
    "ICReq|nvme-tcp.type == 0"
    "ICResp|nvme-tcp.type == 1"
    "CapsuleCmd|nvme-tcp.type == 4"
    "CapsuleResp|nvme-tcp.type == 5"
    "H2CData|nvme-tcp.type == 6"
    "C2HData|nvme-tcp.type == 7"
    "R2T|nvme-tcp.type == 9"
    "header digest good|nvme-tcp.hdgst.status == 1"
    "data digest good|nvme-tcp.ddgst.status == 1"
  )
  local zarg='io,stat,0' notable='' c
  for c in "${checks[@]}"; do zarg+=",${c#*|}"; done
  for c in "${fatal[@]}" "nvme error completions|nvme.cqe.status.sc > 0 || nvme.cqe.status.sct > 0"; do
    notable+="${notable:+ || }(${c#*|})"
  done

  # one pass: the notable frames as lines of fields, then the statistics
  local raw=${summary%.txt}.raw.txt t0=$SECONDS
  if ! tshark -r "$pcap" "${topt[@]}" -Y "$notable" -T fields -E separator=' ' \
      -e frame.number -e tcp.stream -e _ws.col.Protocol -e _ws.col.Info -e _ws.expert.message \
      -z "$zarg" -z expert,warn >"$raw" 2>"$raw.err"; then
    log "tshark -r $pcap failed:"; tail_file "$raw.err"; return 1
  fi
  # the io,stat data row: "| 0.000 <> 12.345 | frames1 | bytes1 | frames2 | ..."
  local row
  row=$(grep -E '^\| *[0-9.]+ *<> *(Dur|[0-9.]+) *\|' "$raw" | tail -n 1 || true)
  [ -n "$row" ] || { log "could not parse tshark's io,stat output ($raw)"; return 1; }
  local -a counts
  mapfile -t counts < <(awk -F'|' '{ for (i = 3; i < NF; i += 2) { gsub(/ /, "", $i); print $i } }' <<<"$row")
  [ ${#counts[@]} -eq ${#checks[@]} ] ||
    { log "tshark's io,stat gave ${#counts[@]} columns, expected ${#checks[@]} ($raw)"; return 1; }

  declare -gA CAPTURE_COUNT=()
  local i name
  for i in "${!checks[@]}"; do CAPTURE_COUNT[${checks[$i]%%|*}]=${counts[$i]}; done
  local notable_frames
  notable_frames=$(grep -E '^[0-9]+ ' "$raw" || true)
  {
    echo "capture: $pcap ($(du -h "$pcap" | cut -f1)); decoded as nvme-tcp on port(s): $*; digests verified"
    echo "tshark $(tshark --version 2>/dev/null | head -n 1 | grep -Eo '[0-9]+\.[0-9]+\.[0-9]+' | head -n 1), one pass: $((SECONDS - t0))s"
    echo
    for i in "${!checks[@]}"; do
      printf '%-36s %10s   [%s]\n' "${checks[$i]%%|*}" "${counts[$i]}" "${checks[$i]#*|}"
    done
    echo
    echo "tshark expert info, warnings and above (-z expert,warn):"
    awk '/^\| IO Statistics/ { exit } /^[0-9]+ / { next } { print }' "$raw" | grep -v '^=\{20,\}$' | head -n 60
    echo
    echo "notable frames (frame, tcp stream, protocol, info, expert message) matching:"
    echo "  $notable"
    if [ -n "$notable_frames" ]; then echo "$notable_frames" | head -n 200; else echo "  (none)"; fi
  } >"$summary"

  local bad=0 k
  log "capture: ${CAPTURE_COUNT[frames]} frames, ${CAPTURE_COUNT[nvme-tcp frames]} with NVMe/TCP PDUs" \
    "(ICReq ${CAPTURE_COUNT[ICReq]}, CapsuleCmd ${CAPTURE_COUNT[CapsuleCmd]}, C2HData ${CAPTURE_COUNT[C2HData]}," \
    "H2CData ${CAPTURE_COUNT[H2CData]}, R2T ${CAPTURE_COUNT[R2T]}; good header/data digests:" \
    "${CAPTURE_COUNT[header digest good]}/${CAPTURE_COUNT[data digest good]}); tshark took $((SECONDS - t0))s"
  if [ "${CAPTURE_COUNT[nvme-tcp frames]}" -eq 0 ]; then
    log "capture check FAILED: no NVMe/TCP PDU in the capture"; bad=1
  fi
  capture_gaps "$pcap" "${topt[@]}"
  for c in "${fatal[@]}"; do
    k=${c%%|*}
    if [ "${CAPTURE_COUNT[$k]}" -ne 0 ] && [ "$CAPTURE_GAP_EXCUSED" = 1 ]; then
      log "capture note: ${CAPTURE_COUNT[$k]} frame(s) with $k, all after a gap in the capture itself (not failed)"
    elif [ "${CAPTURE_COUNT[$k]}" -ne 0 ]; then
      log "capture check FAILED: ${CAPTURE_COUNT[$k]} frame(s) with $k [${c#*|}]"; bad=1
      capture_detail "$pcap" "${summary%.txt}.offending.txt" "${c#*|}" "${topt[@]}"
    fi
  done
  if [ "$expect_digests" = 1 ]; then
    if [ "${CAPTURE_COUNT[header digest good]}" -eq 0 ] || [ "${CAPTURE_COUNT[data digest good]}" -eq 0 ]; then
      log "capture check FAILED: expected PDUs with verified header and data digests"; bad=1
    fi
  fi
  if [ "$bad" = 1 ] && [ -n "$notable_frames" ]; then
    echo "  notable frames (first 20; all in $summary):"
    echo "$notable_frames" | head -n 20 | sed 's/^/    /'
  fi
  if [ "${CAPTURE_COUNT[nvme error completions]}" -ne 0 ]; then
    log "note: ${CAPTURE_COUNT[nvme error completions]} frame(s) carry NVMe completions with a non-zero status" \
      "(e.g. AERs aborted at disconnect; listed in $(basename "$summary"))"
  fi
  [ "${CAPTURE_COUNT[expert warnings]}" -eq 0 ] ||
    log "note: ${CAPTURE_COUNT[expert warnings]} frame(s) with expert warnings (TCP window/SACK/RST; see $(basename "$summary"))"
  return "$bad"
}

# capture_detail PCAP OUTFILE FILTER TSHARK-OPTS...: append the full dissection
# of the first 10 frames matching FILTER to OUTFILE (one extra pass)
capture_detail() {
  local pcap=$1 outf=$2 filter=$3 frames
  shift 3
  frames=$(tshark -r "$pcap" "$@" -Y "$filter" -T fields -e frame.number 2>/dev/null | head -n 10 | paste -sd, -)
  [ -n "$frames" ] || return 0
  { echo "===== first frames matching: $filter"
    tshark -r "$pcap" "$@" -Y "frame.number in {$frames}" -V 2>/dev/null; } >>"$outf" || true
  echo "  (full dissection of frames $frames in $outf)"
}

# ---------------------------------------------------------------------------
# targets: `sluice serve` and the Linux kernel target, started the same way by
# every test (artifacts in $OUT_DIR; TARGET_PID / TARGET_NAME set for cleanup)
# ---------------------------------------------------------------------------

# Sets SLUICE: $SLUICE_BIN when given, else the release binary, built here (quietly,
# its log in $OUT_DIR/build.log). Needs REPO and OUT_DIR.
use_sluice_binary() {
  if [ -n "${SLUICE_BIN:-}" ]; then
    SLUICE=$SLUICE_BIN
  else
    SLUICE=${CARGO_TARGET_DIR:-$REPO/target}/release/sluice
    log "cargo build --release -p sluice"
    (cd "$REPO" && cargo build --release -p sluice --bin sluice --quiet) >"$OUT_DIR/build.log" 2>&1 ||
      { tail_file "$OUT_DIR/build.log"; die "building sluice failed"; }
  fi
  [ -x "$SLUICE" ] || die "sluice binary $SLUICE not found (build it with cargo build --release -p sluice)"
}

# write_sluice_config FILE IO_PORT DISC_PORT NQN SIZE_MIB BLOCK_SIZE THREADS [SERIAL]:
# one RAM namespace, I/O + discovery on IO_PORT, discovery only on DISC_PORT
write_sluice_config() {
  local file=$1 io=$2 disc=$3 nqn=$4 size_mib=$5 block_size=$6 threads=$7 serial=${8:-}
  {
    echo "# generated by ${TEST_NAME:-an interop test}"
    printf '[[listener]]\naddress = "127.0.0.1:%s"\n\n' "$io"
    printf '[[listener]]\naddress = "127.0.0.1:%s"\ndiscovery_only = true\n\n' "$disc"
    printf '[[subsystem]]\nnqn = "%s"\nallow_any_host = true\n' "$nqn"
    [ -z "$serial" ] || printf 'serial = "%s"\n' "$serial"
    printf '\n[[subsystem.namespace]]\nnsid = 1\nbackend = "ram"\nsize = "%sMiB"\nblock_size = %s\n\n' \
      "$size_mib" "$block_size"
    printf '[runtime]\nthreads = %s\npoll_mode = "sleep"\n' "$threads"
  } >"$file"
}

# start_sluice BIN CONFIG IO_PORT DISC_PORT: `sluice config check`, then `sluice
# serve` (stdout/log in $OUT_DIR/sluice.stdout / sluice.log); waits at most 30 s
# until both ports listen. (TARGET_* are read by the caller; _sluice_up is called
# through wait_for.)
# shellcheck disable=SC2034,SC2317
start_sluice() {
  local bin=$1 config=$2 io=$3 disc=$4 rc
  "$bin" config check "$config" >"$OUT_DIR/config-check.txt" 2>&1 ||
    { tail_file "$OUT_DIR/config-check.txt"; die "sluice config check rejected $config"; }
  TARGET_NAME=sluice
  log "starting $bin serve --config $config (log: sluice.log)"
  NO_COLOR=1 SLUICE_LOG=${SLUICE_LOG:-info} "$bin" serve --config "$config" \
    >"$OUT_DIR/sluice.stdout" 2>"$OUT_DIR/sluice.log" </dev/null &
  TARGET_PID=$!
  _sluice_up() {
    kill -0 "$TARGET_PID" 2>/dev/null || return 2
    port_listening "$io" && port_listening "$disc"
  }
  if ! wait_for 30 "sluice to listen on ports $io and $disc" _sluice_up; then
    if ! kill -0 "$TARGET_PID" 2>/dev/null; then
      rc=0; wait "$TARGET_PID" || rc=$?
      log "sluice exited before listening, with status $rc"
      TARGET_PID=''
    fi
    tail_file "$OUT_DIR/sluice.stdout"; tail_file "$OUT_DIR/sluice.log"
    die "sluice did not come up (it must listen on 127.0.0.1:$io and :$disc within 30 s)"
  fi
}

# start_linux_target IO_PORT DISC_PORT|'' NQN SIZE_MIB: the Linux kernel target
# (nvmet, brd namespace) in a linux-nvme-peer guest; waits at most 300 s for READY
# shellcheck disable=SC2034,SC2317
start_linux_target() {
  local io=$1 disc=$2 nqn=$3 size_mib=$4 discovery=()
  [ -x "$LNP" ] || die "linux-nvme-peer not found at $LNP (expected in ../shared/ next to the repository)"
  [ -z "$disc" ] || discovery=(--discovery-port "$disc")
  mkdir -p "$OUT_DIR/peer"
  TARGET_NAME=linux-nvmet
  log "starting the Linux kernel target on 127.0.0.1:$io (linux-nvme-peer target; log: target.log)"
  TMPDIR=$OUT_DIR/peer "$LNP" target --port "$io" "${discovery[@]}" --nqn "$nqn" --size-mib "$size_mib" \
    --backend brd --ready-file "$OUT_DIR/target.ready" >"$OUT_DIR/target.log" 2>&1 </dev/null &
  TARGET_PID=$!
  _linux_target_up() {
    kill -0 "$TARGET_PID" 2>/dev/null || return 2
    # grep exits 2 for a missing file, which wait_for would take as "never": -s and
    # an explicit 1 keep waiting until the ready file or log line appears.
    grep -qs READY "$OUT_DIR/target.ready" || grep -qs '^linux-nvme-peer: READY' "$OUT_DIR/target.log" || return 1
  }
  wait_for 300 "the Linux kernel target to be ready" _linux_target_up ||
    { tail_file "$OUT_DIR/target.log"; die "the Linux kernel target did not come up"; }
}

# Exit status of an interop test that could not run on this machine (run-all counts
# it as skipped, not passed).
# shellcheck disable=SC2034
SKIP_STATUS=77

# require_spdk_peer PEER: fails the test (die) when SPDK's prebuilt tools are missing
# or cannot run here. They are built for the x86-64-v2 baseline and `spdk-peer
# self-test` passes on this machine kind, so a missing or broken SPDK is a failure to
# fix, never a skip. A tool that dies of SIGILL names the CPU in the message.
require_spdk_peer() {
  local peer=$1 rc=0 flags
  [ -x "$peer" ] || die "spdk-peer not found at $peer (expected in ../shared/spdk-peer/ next to the repository)"
  "$peer" perf -h >/dev/null 2>&1 || rc=$?
  if [ "$rc" -eq 132 ]; then  # 128 + SIGILL
    flags=$(grep -m1 '^flags' /proc/cpuinfo | grep -o 'x86-64-v[0-9]\|sse4_2\|avx2\|avx512f' | tr '\n' ' ')
    die "SPDK's prebuilt tools die of an illegal instruction on this CPU ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); flags: ${flags:-none}); run $peer self-test"
  fi
}

# record_skip WHAT REASON: logs a loud SKIP line and records it in the artifact root's
# skipped.txt, which run-all prints with its results.
record_skip() {
  log "SKIP $1: $2"
  printf '%s: %s: %s\n' "${TEST_NAME:-interop}" "$1" "$2" >>"$(dirname "$OUT_DIR")/skipped.txt"
}

# start_spdk_target IO_PORT NQN SIZE_MIB [BLOCK_SIZE]: SPDK's nvmf_tgt (../shared/spdk-peer,
# one malloc namespace, any host) on 127.0.0.1:IO_PORT, its reactor on core 0; waits
# at most 120 s for READY. (TARGET_* are read by the caller.)
# shellcheck disable=SC2034,SC2317
start_spdk_target() {
  local io=$1 nqn=$2 size_mib=$3 block_size=${4:-512}
  local peer=${SPDK_PEER:-$INTEROP_REPO/../shared/spdk-peer/spdk-peer}
  [ -x "$peer" ] || die "spdk-peer not found at $peer (expected in ../shared/spdk-peer/ next to the repository)"
  TARGET_NAME=spdk-nvmf_tgt
  log "starting SPDK's target on 127.0.0.1:$io (spdk-peer target; log: spdk-target.log)"
  rm -f "$OUT_DIR/spdk-target.ready"
  "$peer" target --port "$io" --nqn "$nqn" --size-mib "$size_mib" --block-size "$block_size" --core 0 \
    --ready-file "$OUT_DIR/spdk-target.ready" >"$OUT_DIR/spdk-target.log" 2>&1 </dev/null &
  TARGET_PID=$!
  _spdk_target_up() {
    kill -0 "$TARGET_PID" 2>/dev/null || return 2
    grep -qs READY "$OUT_DIR/spdk-target.ready" || grep -qs '^spdk-peer: READY' "$OUT_DIR/spdk-target.log" || return 1
  }
  wait_for 120 "SPDK's target to be ready" _spdk_target_up ||
    { tail_file "$OUT_DIR/spdk-target.log"; die "SPDK's target did not come up"; }
}

# stop_target: stop $TARGET_PID with SIGTERM (at most 20 s) and, for sluice, look
# for panics in its logs. Problems are appended to the caller's `failures` array.
# shellcheck disable=SC2034
stop_target() {
  local rc
  if ! kill -0 "$TARGET_PID" 2>/dev/null; then
    rc=0; wait "$TARGET_PID" || rc=$?
    failures+=("$TARGET_NAME died during the test (exit status $rc)")
  else
    log "stopping $TARGET_NAME with SIGTERM"
    if stop_pid "$TARGET_PID" "$TARGET_NAME" 20 TERM && [ "$STOP_RC" -eq 0 ]; then
      log "$TARGET_NAME exited with status 0"
    else
      failures+=("$TARGET_NAME did not exit cleanly on SIGTERM (status $STOP_RC)")
    fi
  fi
  TARGET_PID=''
  [ "$TARGET_NAME" = sluice ] || return 0
  # drop terminal colour codes, should the log have any
  sed -i 's/\x1b\[[0-9;]*m//g' "$OUT_DIR/sluice.log" "$OUT_DIR/sluice.stdout"
  if grep -q 'panicked at' "$OUT_DIR/sluice.log" "$OUT_DIR/sluice.stdout"; then
    failures+=("sluice panicked (see sluice.log)")
    grep -h -A3 'panicked at' "$OUT_DIR/sluice.log" "$OUT_DIR/sluice.stdout" | head -n 20 | sed 's/^/  | /'
  fi
}

# Writes $OUT_DIR/result.txt from the guest's CHECK lines, the host's checks
# (HOST_OK, HOST_FAILED) and the problems in `failures`, prints the verdict and exits:
# 0 when there is no problem, 1 otherwise.
#   finish_with_verdict NAME PASS_DETAIL ARTIFACTS_HINT
finish_with_verdict() {
  local name=$1 pass_detail=$2 artifacts=$3 n_ok
  local -a failed_checks
  n_ok=$(grep -c '^CHECK .*: ok' "$OUT_DIR/guest.log" || true)
  mapfile -t failed_checks < <(grep '^CHECK .*: FAIL' "$OUT_DIR/guest.log" || true)
  {
    echo "$name interop against sluice ($(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?'))"
    echo "guest checks ok: $n_ok, failed: ${#failed_checks[@]}"
    printf '  %s\n' "${failed_checks[@]}"
    echo "checks on this machine ok: $HOST_OK, failed: ${#HOST_FAILED[@]}"
    printf '  %s\n' "${HOST_FAILED[@]}"
    echo "problems: ${#failures[@]}"
    printf '  %s\n' "${failures[@]}"
  } >"$OUT_DIR/result.txt"
  if [ ${#failures[@]} -eq 0 ]; then
    log "PASS: $n_ok guest checks and $HOST_OK checks on this machine ok$pass_detail (artifacts: $OUT_DIR)"
    exit 0
  fi
  log "FAIL: ${#failures[@]} problem(s):"
  printf '  - %s\n' "${failures[@]}"
  [ ${#failed_checks[@]} -eq 0 ] || { echo "  failed guest checks:"; printf '    %s\n' "${failed_checks[@]}"; }
  echo "  artifacts: $OUT_DIR ($artifacts)"
  exit 1
}

# use_backports_kernel_peer: point linux-nvme-peer (for the rest of this test) at a
# guest image built from Debian bookworm-backports' kernel (6.12). The auth test needs
# it for NVMe in-band authentication (CONFIG_NVME_HOST_AUTH, CONFIG_NVME_TARGET_AUTH),
# which bookworm's 6.1 kernel lacks; the storage test for namespace removal, which
# on 6.1 now and then never finishes (see docs/testing.md). Nothing on the system changes: a private apt configuration
# (the system's sources plus bookworm-backports, a pin for the kernel metapackage
# only, lists in its own directory) is handed to the peer through APT_CONFIG, and
# the image is cached apart from the stock one. SLUICE_GUEST_KERNEL=stock (or the older
# SLUICE_AUTH_KERNEL=stock) keeps the
# stock kernel (the DH-HMAC-CHAP checks of the Linux host then report SKIP).
use_backports_kernel_peer() {
  [ "${SLUICE_GUEST_KERNEL:-${SLUICE_AUTH_KERNEL:-backports}}" = stock ] && { log "SLUICE_GUEST_KERNEL=stock: stock guest kernel"; return 0; }
  local base=${XDG_CACHE_HOME:-$HOME/.cache}/sluice-auth-kernel
  local apt_dir=$base/apt
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/preferences.d"
  printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main\n' \
    >"$apt_dir/backports.list"
  printf 'Package: linux-image-amd64\nPin: release n=bookworm-backports\nPin-Priority: 990\n' \
    >"$apt_dir/preferences.d/backports-kernel.pref"
  {
    printf 'Dir::Etc::SourceList "%s";\n' "$apt_dir/backports.list"
    printf 'Dir::Etc::PreferencesParts "%s";\n' "$apt_dir/preferences.d"
    printf 'Dir::State::Lists "%s";\n' "$apt_dir/lists"
    printf 'Dir::Cache "%s";\n' "$apt_dir/cache"
  } >"$apt_dir/apt.conf"
  export APT_CONFIG=$apt_dir/apt.conf
  export LNP_CACHE_DIR=$base/peer
  if [ ! -s "$LNP_CACHE_DIR/image/image.env" ]; then
    log "building the backports-kernel guest image (one-time; cache: $LNP_CACHE_DIR)"
    # The private lists start empty: fetch them (the system's own stay untouched).
    apt-get update -q >"$base/apt-update.log" 2>&1 || { tail_file "$base/apt-update.log"; die "apt-get update (bookworm-backports) failed"; }
    "$LNP" build >"$base/build.log" 2>&1 || { tail_file "$base/build.log"; die "building the backports-kernel guest image failed"; }
  fi
  log "guest kernel (bookworm-backports): $(sed -n 's/^KERNEL_PKG_VERSION=//p' "$LNP_CACHE_DIR/image/image.env")"
}
