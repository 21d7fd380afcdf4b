#!/usr/bin/env bash
# Many connections and many namespaces on one target (the target-speed issue's scale
# goal): `sluice serve` (one runtime thread on core 0) with SUBSYSTEMS x NAMESPACES
# RAM namespaces, driven by fio with Sluice's engine (fio/sluice_engine.c) on core 1,
# 4 KiB random read at one total depth, two ways, interleaved for ROUNDS rounds:
#
#   one      one fio job: one controller, one I/O queue on namespace 1 of subsystem 1,
#            at QD JOBS
#   many     JOBS fio jobs (threads), each its own controller (an admin and an I/O
#            connection: 2 x JOBS connections) on its own namespace, spread over
#            every subsystem, QD 1 each
#
# Both ways use host_io=sleep (JOBS spinning threads on one core would measure the
# spinning), and the target runs in POLL_MODE (default sleep: an adaptive thread spins
# between requests that arrive every few tens of microseconds, and its CPU would
# measure the spinning). The initiator may bound the many-connection way; the target's
# CPU per I/O (from /proc) says what the target itself pays. Also reported: the target's RSS,
# threads and open files with one namespace, with all of them idle, and during the
# many-connection run.
#
# With --initiator spdk, SPDK's initiator (spdk_nvme_perf, one polling thread on core
# 1, through ../shared/spdk-peer; SPDK_PEER=path overrides) drives the same two ways,
# and SPDK's own target (spdk-peer target, its reactor on core 0) gets the same load as
# the reference, the two targets interleaved in each round (Sluice then SPDK, the next
# round in reverse order):
#
#   one      one controller, one I/O queue on namespace 1, at QD CONTROLLERS x QD
#   many     CONTROLLERS controllers (one -r each, a host NQN of its own so that perf
#            does not merge controllers of one subsystem), QPAIRS I/O queues each
#            (-P): CONTROLLERS x (1 + QPAIRS) TCP connections; QD per controller,
#            spread round-robin over its queues (default QD = QPAIRS: one command per
#            I/O connection). On Sluice, controller c is on subsystem c mod S + 1,
#            namespace c div S + 1; SPDK's target serves one subsystem with one 1 MiB
#            malloc namespace (all spdk-peer target offers), so there every controller
#            is on that namespace.
#
# --reference picks the reference targets beside Sluice: spdk (the default), responder,
# all (spdk and responder) or none. The responder is tools/minimal-responder (built
# here with cargo into target/minimal-responder unless RESPONDER_BIN is set): one
# io_uring thread on core 0 that answers the same connections with a 4 KiB data PDU and
# a response from memory and no NVMe logic, the kernel path's limit for this load (in
# sleep mode, or busy-poll when --poll-mode is busy-poll). Every target runs interleaved
# in each round (Sluice, SPDK, responder; the next round in reverse order), and the
# summary adds each target's share of the responder's IOPS.
#
# spdk_nvme_perf takes at most 256 -r (controllers), hence 250 x 3 queues by default.
# Also reported: the initiator's CPU over the sample (cores: below 1, the machine's
# other load took part of core 1 from the polling initiator). --profile records the
# Sluice target (perf record -g) during one extra, unreported one and many run each.
#
#   scripts/measure-scale.sh [--subsystems S] [--namespaces N] [--jobs J] [--seconds T]
#                            [--rounds R] [--poll-mode sleep|adaptive|busy-poll] [--out DIR]
#                            [--initiator fio|spdk] [--controllers C] [--qpairs P] [--qd D]
#                            [--reference spdk|responder|all|none] [--profile]
#
# Defaults: 100 subsystems x 100 namespaces (10,000), 500 jobs (1,000 connections),
# 20 s, 2 rounds; with spdk: 250 controllers x 3 I/O queues (1,000 connections), QD 3
# per controller (750 in all), SPDK's target as the reference. fio needs the Sluice
# engine (scripts/build-fio-engine.sh builds it); both need a release build of sluice
# (built here unless SLUICE_BIN is set). Loopback only; prints a Markdown summary.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SUBSYSTEMS=100
NAMESPACES=100
JOBS=500
SECONDS_PER_RUN=20
SAMPLE_SECONDS=4
POLL_MODE="sleep"
ROUNDS=2
OUT=${OUT:-$REPO/target/measure-scale}
INITIATOR=fio
CONTROLLERS=250
QPAIRS=3
QD=''
REFERENCE=spdk
PROFILE=''
SPDK_PEER=${SPDK_PEER:-$REPO/../shared/spdk-peer/spdk-peer}
# SPDK's target (a 1 MiB malloc namespace, its pools, 1,000 connections' buffers) and
# perf (1,000 queues) fit in 3 GiB of 2 MiB pages (measured: about 690 pages in use).
export SPDK_PEER_HUGEPAGES=${SPDK_PEER_HUGEPAGES:-1536}

while [ $# -gt 0 ]; do
  case $1 in
    --subsystems) SUBSYSTEMS=$2; shift 2 ;;
    --namespaces) NAMESPACES=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --poll-mode) POLL_MODE=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --initiator) INITIATOR=$2; shift 2 ;;
    --controllers) CONTROLLERS=$2; shift 2 ;;
    --qpairs) QPAIRS=$2; shift 2 ;;
    --qd) QD=$2; shift 2 ;;
    --reference) REFERENCE=$2; shift 2 ;;
    --profile) PROFILE=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "measure-scale: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

log() { echo "[measure-scale] $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"

[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs (target on 0, initiator on 1)"
case $INITIATOR in
  fio)
    command -v fio >/dev/null || die "fio is missing: scripts/setup.sh installs it"
    [ "$JOBS" -le 1024 ] || die "--jobs is at most 1024 (the one-connection way runs at QD JOBS)"
    [ "$JOBS" -le $(( SUBSYSTEMS * NAMESPACES )) ] || die "--jobs is at most the number of namespaces"
    ENGINE=$("$REPO/scripts/build-fio-engine.sh" --print-path) || die "the Sluice fio engine did not build (scripts/build-fio-engine.sh)"
    ;;
  spdk)
    [ -x "$SPDK_PEER" ] || die "$SPDK_PEER not found (set SPDK_PEER)"
    command -v ss >/dev/null || die "ss (iproute2) is missing"
    QD=${QD:-$QPAIRS}
    (( CONTROLLERS >= 1 && CONTROLLERS <= 256 )) || die "--controllers is 1..256 (spdk_nvme_perf takes at most 256 -r)"
    [ "$CONTROLLERS" -le $(( SUBSYSTEMS * NAMESPACES )) ] || die "--controllers is at most the number of namespaces"
    (( QPAIRS >= 1 && QD >= 1 )) || die "--qpairs and --qd are at least 1"
    # The one-connection way runs at QD CONTROLLERS x QD on one queue (Sluice: 1,024 entries).
    [ $(( CONTROLLERS * QD )) -le 1023 ] || die "--controllers x --qd is at most 1023 (one queue holds the total depth)"
    case $REFERENCE in
      spdk) REFERENCES=spdk ;;
      responder) REFERENCES=responder ;;
      all) REFERENCES="spdk responder" ;;
      none) REFERENCES='' ;;
      *) die "--reference is spdk, responder, all or none" ;;
    esac
    ;;
  *) die "--initiator is fio or spdk" ;;
esac
mkdir -p "$OUT"
if [ -z "${SLUICE_BIN:-}" ]; then
  (cd "$REPO" && cargo build --release -p sluice --bin sluice --quiet)
  SLUICE_BIN=$REPO/target/release/sluice
fi
if [[ " ${REFERENCES:-} " == *" responder "* ]] && [ -z "${RESPONDER_BIN:-}" ]; then
  # Its own workspace: its own target directory, beside the workspace's.
  RESPONDER_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}/minimal-responder
  CARGO_TARGET_DIR=$RESPONDER_TARGET_DIR cargo build --release --quiet \
    --manifest-path "$REPO/tools/minimal-responder/Cargo.toml"
  RESPONDER_BIN=$RESPONDER_TARGET_DIR/release/minimal-responder
fi
CONNECTIONS=$(( 2 * JOBS ))
[ "$INITIATOR" = fio ] || CONNECTIONS=$(( CONTROLLERS * (1 + QPAIRS) ))
PORT=$(free_port)
NQN_PREFIX=nqn.2026-11.io.sluice:scale

write_config() {  # write_config FILE SUBSYSTEMS NAMESPACES
  local s n
  {
    printf '[[listener]]\naddress = "127.0.0.1:%s"\n\n' "$PORT"
    # Every job's admin and I/O connection, all under the library's one host NQN.
    printf '[target]\nmax_connections_per_host = %s\n\n' $(( CONNECTIONS + 64 ))
    for s in $(seq 1 "$2"); do
      printf '[[subsystem]]\nnqn = "%s%s"\nallow_any_host = true\n\n' "$NQN_PREFIX" "$s"
      for n in $(seq 1 "$3"); do
        printf '[[subsystem.namespace]]\nnsid = %s\nbackend = "ram"\nsize = "1MiB"\nblock_size = 4096\n\n' "$n"
      done
    done
    printf '[runtime]\nthreads = 1\npoll_mode = "%s"\n' "$POLL_MODE"
  } >"$1"
}

SERVE_PID='' SPDK_TGT_WRAPPER='' RESPONDER_PID='' PERF_PID=''
cleanup() {
  local pid
  for pid in "$PERF_PID" "$SPDK_TGT_WRAPPER" "$RESPONDER_PID" "$SERVE_PID"; do
    [ -n "$pid" ] && { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; }
  done
  return 0
}
trap cleanup EXIT

READY_SECONDS=0
start_serve() {  # start_serve CONFIG: sets SERVE_PID and READY_SECONDS (not in a subshell)
  local started=$SECONDS
  taskset -c 0 "$SLUICE_BIN" serve --config "$1" --no-rpc-socket --log-level warn >"$OUT/serve.log" 2>&1 &
  SERVE_PID=$!
  for _ in $(seq 1 1200); do
    grep -q '^sluice: ready' "$OUT/serve.log" && { READY_SECONDS=$(( SECONDS - started )); return 0; }
    kill -0 "$SERVE_PID" 2>/dev/null || { cat "$OUT/serve.log" >&2; die "sluice serve exited"; }
    sleep 0.1
  done
  die "sluice serve not ready within 120 s"
}
stop_serve() { kill "$SERVE_PID"; wait "$SERVE_PID" || true; SERVE_PID=''; }
stats() {  # stats: "rss_kib threads fds" of the target
  echo "$(awk '/^VmRSS:/{print $2}' "/proc/$SERVE_PID/status") $(awk '/^Threads:/{print $2}' "/proc/$SERVE_PID/status") $(find "/proc/$SERVE_PID/fd" -mindepth 1 | wc -l)"
}

write_config "$OUT/one.toml" 1 1
write_config "$OUT/scale.toml" "$SUBSYSTEMS" "$NAMESPACES"
start_serve "$OUT/one.toml"
read -r rss_one _ fds_one < <(stats)
stop_serve
start_serve "$OUT/scale.toml"
ready_s=$READY_SECONDS
read -r rss_idle threads_idle fds_idle < <(stats)
total_ns=$(( SUBSYSTEMS * NAMESPACES ))
log "target with $total_ns namespaces ready in ${ready_s} s: RSS ${rss_idle} KiB (one namespace: ${rss_one} KiB)"

if [ "$INITIATOR" = spdk ]; then
  # SPDK's initiator against Sluice and, as the reference, SPDK's target.
  SPDK_NQN=nqn.2016-06.io.spdk:cnode1
  TOTAL_QD=$(( CONTROLLERS * QD ))
  HZ=$(getconf CLK_TCK)
  WINDOW=$(( SECONDS_PER_RUN > 4 ? SECONDS_PER_RUN - 3 : 1 ))
  LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
  SPDK_PORT='' SPDK_TGT_PID=''
  start_spdk_target() {  # sets SPDK_TGT_WRAPPER, SPDK_TGT_PID (nvmf_tgt, from READY) and SPDK_PORT
    SPDK_PORT=$(free_port)
    "$SPDK_PEER" target --port "$SPDK_PORT" --size-mib 1 --block-size 4096 --core 0 >"$OUT/spdk-target.log" 2>&1 &
    SPDK_TGT_WRAPPER=$!
    for _ in $(seq 1 600); do
      SPDK_TGT_PID=$(sed -n 's/^spdk-peer: READY .*, pid \([0-9]*\))$/\1/p' "$OUT/spdk-target.log")
      [ -n "$SPDK_TGT_PID" ] && return 0
      kill -0 "$SPDK_TGT_WRAPPER" 2>/dev/null || { cat "$OUT/spdk-target.log" >&2; die "spdk-peer target exited"; }
      sleep 0.1
    done
    die "spdk-peer target not ready within 60 s"
  }
  stop_spdk_target() { kill "$SPDK_TGT_WRAPPER"; wait "$SPDK_TGT_WRAPPER" || true; SPDK_TGT_WRAPPER=''; }
  # The minimal responder: any subsystem NQN, one 1 GiB namespace; same core as the others.
  RESPONDER_NQN=nqn.2026-12.io.sluice:responder
  RESPONDER_PORT=''
  RESPONDER_POLL_MODE='sleep'
  [ "$POLL_MODE" = busy-poll ] && RESPONDER_POLL_MODE=busy-poll
  start_responder() {  # sets RESPONDER_PID and RESPONDER_PORT
    RESPONDER_PORT=$(free_port)
    taskset -c 0 "$RESPONDER_BIN" --address "127.0.0.1:$RESPONDER_PORT" --core 0 \
      --poll-mode "$RESPONDER_POLL_MODE" >"$OUT/responder.log" 2>&1 &
    RESPONDER_PID=$!
    for _ in $(seq 1 100); do
      grep -q '^READY ' "$OUT/responder.log" && return 0
      kill -0 "$RESPONDER_PID" 2>/dev/null || { cat "$OUT/responder.log" >&2; die "minimal-responder exited"; }
      sleep 0.1
    done
    die "minimal-responder not ready within 10 s"
  }
  stop_responder() { kill "$RESPONDER_PID"; wait "$RESPONDER_PID" || true; RESPONDER_PID=''; }
  established() { ss -Htn state established "( sport = :$1 )" | wc -l; }
  hostnqn() { printf 'nqn.2014-08.org.nvmexpress:uuid:5d899820-a9a5-4def-bb57-%012x' "$1"; }
  RAW=$OUT/raw.tsv
  printf 'round\ttarget\tway\tconnections\tdepth\tiops\tavg_us\ttarget_cpu_us_per_io\tinitiator_cores\ttarget_rss_kib\n' >"$RAW"
  # run_spdk_way ROUND TARGET WAY [PROFILE_FILE]: one spdk_nvme_perf run, a row in RAW
  # (with a profile file: perf record -g of the target over the sample, no row).
  run_spdk_way() {
    local round=$1 target=$2 way=$3 profile=${4:-} port pid args=() c sub ns trid expect
    local before after ibefore iafter t0 t1 rss=- line
    local nqn=$SPDK_NQN   # the references' one subsystem
    case $target in
      sluice) port=$PORT pid=$SERVE_PID nqn=${NQN_PREFIX}1 ;;
      spdk) port=$SPDK_PORT pid=$SPDK_TGT_PID ;;
      responder) port=$RESPONDER_PORT pid=$RESPONDER_PID nqn=$RESPONDER_NQN ;;
    esac
    if [ "$way" = one ]; then
      trid=$("$SPDK_PEER" trid 127.0.0.1 "$port" "$nqn")
      args=(-q "$TOTAL_QD" -P 1 --io-queue-size $(( TOTAL_QD + 1 )) -r "$trid ns:1")
      expect=2
    else
      for c in $(seq 0 $(( CONTROLLERS - 1 ))); do
        if [ "$target" = sluice ]; then sub=$NQN_PREFIX$(( c % SUBSYSTEMS + 1 )) ns=$(( c / SUBSYSTEMS + 1 ))
        else sub=$nqn ns=1; fi
        args+=(-r "$("$SPDK_PEER" trid 127.0.0.1 "$port" "$sub" "$(hostnqn "$c")") ns:$ns")
      done
      # 128 entries per queue: Linux's default queue size and SPDK's target's maximum.
      args=(-q "$QD" -P "$QPAIRS" --io-queue-size 128 "${args[@]}")
      expect=$CONNECTIONS
    fi
    local log=$OUT/perf-$round-$target-$way.log
    # stdbuf: perf's lines reach the log as they are printed (the log shows progress).
    stdbuf -oL "$SPDK_PEER" perf -c 0x2 -o 4096 -w randread -t "$SECONDS_PER_RUN" "${args[@]}" >"$log" 2>&1 &
    PERF_PID=$!   # spdk-peer execs spdk_nvme_perf: this is the initiator's PID
    # The measured time starts once every queue is connected; the target's CPU is
    # sampled from 1 s after that for WINDOW seconds, inside the run.
    for _ in $(seq 1 1800); do
      [ "$(established "$port")" -ge "$expect" ] && break
      kill -0 "$PERF_PID" 2>/dev/null || break
      sleep 0.1
    done
    [ "$(established "$port")" -ge "$expect" ] || { tail -20 "$log" >&2; die "spdk_nvme_perf ($target $way) did not connect $expect queues"; }
    sleep 1
    t0=$(date +%s.%N)
    before=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
    ibefore=$(awk '{ print $14 + $15 }' "/proc/$PERF_PID/stat")
    if [ -n "$profile" ]; then
      # Counts per I/O (perf stat, in the same window): io_uring_enter calls, SQEs,
      # recvs that found no data and armed a poll, context switches (sleeps), packets
      # the target put on loopback (responses and ACKs).
      perf stat -x, -o "$profile.stat" -p "$pid" -e syscalls:sys_enter_io_uring_enter,io_uring:io_uring_submit_req \
        -e io_uring:io_uring_poll_arm,sched:sched_switch,net:net_dev_xmit -- sleep "$WINDOW" >/dev/null 2>&1 &
      local stat_pid=$!
      perf record -q -g -p "$pid" -o "$profile" -- sleep "$WINDOW" >/dev/null 2>&1 || log "perf record failed"
      wait "$stat_pid" || log "perf stat failed"
    else
      sleep "$WINDOW"
    fi
    after=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
    iafter=$(awk '{ print $14 + $15 }' "/proc/$PERF_PID/stat")
    t1=$(date +%s.%N)   # the sample's real length (perf record takes a while to stop)
    [ "$target" = sluice ] && read -r rss _ _ < <(stats)
    wait "$PERF_PID" || { tail -20 "$log" >&2; die "spdk_nvme_perf ($target $way) failed"; }
    PERF_PID=''
    # Total : IOPS MiB/s avg min max (perf logs each I/O queue's disconnection at its
    # teardown as an error, against either target: not a failure)
    line=$(grep '^Total' "$log") || { tail -20 "$log" >&2; die "spdk_nvme_perf ($target $way): no Total line"; }
    local dest=$RAW
    [ -z "$profile" ] || dest=$OUT/profile.tsv
    awk -F: -v r="$round" -v t="$target" -v w="$way" -v conn="$expect" -v qd="$TOTAL_QD" \
        -v ticks=$(( after - before )) -v iticks=$(( iafter - ibefore )) -v hz="$HZ" -v t0="$t0" -v t1="$t1" -v rss="$rss" \
        '{ s = t1 - t0; split($2, f, " "); printf "%s\t%s\t%s\t%s\t%s\t%.0f\t%.1f\t%.2f\t%.2f\t%s\n", r, t, w, conn, qd,
           f[1], f[3], ticks / hz * 1e6 / (f[1] * s), iticks / hz / s, rss }' <<<"$line" >>"$dest"
    log "round $round $target $way: $(tail -1 "$dest")"
  }
  run_target() {  # run_target ROUND TARGET: both ways, one then many in odd rounds
    case $2 in spdk) start_spdk_target ;; responder) start_responder ;; esac
    if [ $(( $1 % 2 )) -eq 1 ]; then run_spdk_way "$1" "$2" one; run_spdk_way "$1" "$2" many
    else run_spdk_way "$1" "$2" many; run_spdk_way "$1" "$2" one; fi
    case $2 in spdk) stop_spdk_target ;; responder) stop_responder ;; esac
    return 0
  }
  targets="sluice${REFERENCES:+ $REFERENCES}"
  log "machine load before: $LOAD_BEFORE"
  for round in $(seq 1 "$ROUNDS"); do
    order=$targets
    [ $(( round % 2 )) -eq 0 ] && order=$(tr ' ' '\n' <<<"$targets" | tac | tr '\n' ' ')
    for target in $order; do run_target "$round" "$target"; done
  done
  if [ -n "$PROFILE" ]; then
    command -v perf >/dev/null || die "--profile needs perf (linux-perf)"
    head -1 "$RAW" >"$OUT/profile.tsv"
    for way in one many; do
      run_spdk_way profile sluice "$way" "$OUT/profile-$way.data"
      perf report -i "$OUT/profile-$way.data" --no-children --sort dso,sym -g none --percent-limit 0.5 --stdio \
        >"$OUT/profile-$way.txt" 2>/dev/null || true
      perf script -i "$OUT/profile-$way.data" -F ip,sym,dso >"$OUT/profile-$way.script" 2>/dev/null || true
      log "profile of Sluice's target ($way): $OUT/profile-$way.txt"
    done
  fi
  stop_serve
  LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
  python3 - "$RAW" "$SUBSYSTEMS" "$NAMESPACES" "$CONTROLLERS" "$QPAIRS" "$QD" "$rss_one" "$rss_idle" "$ready_s" \
      "$LOAD_BEFORE" "$LOAD_AFTER" <<'PY' | tee "$OUT/summary.md"
import csv, sys
raw, subsystems, namespaces, controllers, qpairs, qd, rss_one, rss_idle, ready_s, load_before, load_after = sys.argv[1:12]
rows = list(csv.DictReader(open(raw), delimiter="\t"))
targets = [t for t in ("sluice", "spdk", "responder") if any(r["target"] == t for r in rows)]
rounds = sorted({r["round"] for r in rows}, key=int)
def get(target, way, round_=None):
    sel = [r for r in rows if r["target"] == target and r["way"] == way and (round_ is None or r["round"] == round_)]
    return max(sel, key=lambda r: float(r["iops"]))
total_ns = int(subsystems) * int(namespaces)
name = {"sluice": f"Sluice ({subsystems} subsystems x {namespaces} namespaces)",
        "spdk": "SPDK nvmf_tgt (1 subsystem, 1 namespace)",
        "responder": "minimal responder (kernel path, no NVMe logic)"}
print(f"| target | way | TCP connections | total depth | IOPS (best of {len(rounds)}) | avg us | target CPU us/IO | initiator cores | loss vs one |")
print("| --- | --- | --: | --: | --: | --: | --: | --: | --: |")
for t in targets:
    one, many = get(t, "one"), get(t, "many")
    for way, row in (("one controller, 1 queue", one), (f"{controllers} controllers x {qpairs} queues", many)):
        loss = "" if row is one else f"{(1 - float(many['iops']) / float(one['iops'])) * 100:.1f} %"
        print(f"| {name[t]} | {way} | {row['connections']} | {row['depth']} | {float(row['iops']):.0f} | "
              f"{row['avg_us']} | {row['target_cpu_us_per_io']} | {row['initiator_cores']} | {loss} |")
print()
print("| round | target | one IOPS | many IOPS | loss | target CPU us/IO one / many |")
print("| --: | --- | --: | --: | --: | --: |")
for r in rounds:
    for t in targets:
        one, many = get(t, "one", r), get(t, "many", r)
        print(f"| {r} | {t} | {float(one['iops']):.0f} | {float(many['iops']):.0f} | "
              f"{(1 - float(many['iops']) / float(one['iops'])) * 100:.1f} % | "
              f"{one['target_cpu_us_per_io']} / {many['target_cpu_us_per_io']} |")
if "responder" in targets:
    # The responder does the least work per I/O the kernel path allows: each target's
    # share of its rate (best rounds) says how much of that limit the target reaches.
    print()
    print("| target | share of the responder's IOPS, one | many | CPU us/IO vs the responder's, one | many |")
    print("| --- | --: | --: | --: | --: |")
    reference = {way: get("responder", way) for way in ("one", "many")}
    for t in targets:
        if t == "responder":
            continue
        cells = [f"{float(get(t, w)['iops']) / float(reference[w]['iops']) * 100:.1f} %" for w in ("one", "many")]
        cells += [f"{float(get(t, w)['target_cpu_us_per_io']) / max(float(reference[w]['target_cpu_us_per_io']), 1e-9):.2f}x"
                  for w in ("one", "many")]
        print(f"| {t} | " + " | ".join(cells) + " |")
print()
print(f"many: {controllers} controllers x (1 admin + {qpairs} I/O queues), QD {qd} per controller over its queues; "
      f"one: 1 controller, 1 I/O queue at the same total depth. spdk_nvme_perf on core 1 (one thread), targets on core 0.")
rss_many = max(int(r["target_rss_kib"]) for r in rows if r["target"] == "sluice" and r["way"] == "many")
print(f"Sluice with {total_ns} namespaces: ready in {ready_s} s, RSS {int(rss_idle) / 1024:.1f} MiB idle "
      f"(one namespace: {int(rss_one) / 1024:.1f} MiB), {rss_many / 1024:.1f} MiB during the many-connection run")
print(f"machine load (1/5/15 min) before: {load_before}, after: {load_after}")
PY
  if [ -n "$PROFILE" ]; then
    python3 - "$OUT" "$WINDOW" <<'PY' | tee -a "$OUT/summary.md"
import csv, sys
out, window = sys.argv[1], int(sys.argv[2])
rows = {r["way"]: r for r in csv.DictReader(open(f"{out}/profile.tsv"), delimiter="\t")}
print()
print(f"Profile of Sluice's target (one more run of each way, perf record -g and perf stat over {window} s; "
      "not in the tables above):")
print()
print("| per I/O | one | many |")
print("| --- | --: | --: |")
print(f"| IOPS (while profiled) | {rows['one']['iops']} | {rows['many']['iops']} |")
print(f"| target CPU us | {rows['one']['target_cpu_us_per_io']} | {rows['many']['target_cpu_us_per_io']} |")
names = {"syscalls:sys_enter_io_uring_enter": "io_uring_enter calls", "io_uring:io_uring_submit_req": "SQEs submitted",
         "io_uring:io_uring_poll_arm": "recvs that armed a poll (no data yet)",
         "sched:sched_switch": "context switches (sleeps)", "net:net_dev_xmit": "packets sent on loopback (responses, ACKs)"}
counts = {}
for way in ("one", "many"):
    for line in open(f"{out}/profile-{way}.data.stat"):
        f = line.strip().split(",")
        if len(f) > 2 and f[2] in names and f[0].replace(".", "").isdigit():
            counts[(way, f[2])] = float(f[0]) / (float(rows[way]["iops"]) * window)
for event, name in names.items():
    print(f"| {name} | " + " | ".join(f"{counts[(w, event)]:.3f}" if (w, event) in counts else "-"
                                      for w in ("one", "many")) + " |")
print()
PY
    python3 "$REPO/scripts/lib/profile-breakdown.py" \
      "one=$OUT/profile-one.script:$(awk -F'\t' '$3 == "one" { print $8 }' "$OUT/profile.tsv")" \
      "many=$OUT/profile-many.script:$(awk -F'\t' '$3 == "many" { print $8 }' "$OUT/profile.tsv")" | tee -a "$OUT/summary.md"
  fi
  log "raw rounds: $RAW"
  exit 0
fi

# fio job files: [global] shared, then one job (one) or JOBS jobs (many).
fio_global() {
  printf '[global]\nioengine=external:%s\nthread=1\nrw=randread\nbs=4k\ntime_based=1\n' "$ENGINE"
  printf 'runtime=%s\nramp_time=1\nnorandommap=1\ntraddr=127.0.0.1\ntrsvcid=%s\n' "$SECONDS_PER_RUN" "$PORT"
  printf 'host_io=sleep\ngroup_reporting=1\n\n'
}
{ fio_global; printf '[one]\nsubnqn=%s1\nnsid=1\niodepth=%s\n' "$NQN_PREFIX" "$JOBS"; } >"$OUT/one.fio"
{
  fio_global
  for j in $(seq 0 $(( JOBS - 1 ))); do
    # Job j: subsystem j mod S, namespace j div S (every subsystem carries load).
    printf '[job%s]\nsubnqn=%s%s\nnsid=%s\niodepth=1\n' "$j" "$NQN_PREFIX" $(( j % SUBSYSTEMS + 1 )) $(( j / SUBSYSTEMS + 1 ))
  done
} >"$OUT/many.fio"
RAW=$OUT/raw.tsv
printf 'round\tway\tconnections\tiops\tavg_us\ttarget_rss_kib\ttarget_cpu_us_per_io\n' >"$RAW"
run_way() {  # run_way ROUND WAY
  local target_rss=- before after
  taskset -c 1 fio --output-format=json --output="$OUT/fio-$1-$2.json" "$OUT/$2.fio" >"$OUT/fio-$1-$2.log" 2>&1 &
  local fio_pid=$!
  # The target's CPU is sampled over SAMPLE_SECONDS in the middle of the run, after
  # the jobs connected (500 controllers take seconds to come up) and before they stop.
  sleep $(( SECONDS_PER_RUN / 2 ))
  before=$(awk '{ print $14 + $15 }' "/proc/$SERVE_PID/stat")
  sleep "$SAMPLE_SECONDS"
  after=$(awk '{ print $14 + $15 }' "/proc/$SERVE_PID/stat")
  read -r target_rss _ _ < <(stats)
  wait "$fio_pid" || { tail -20 "$OUT/fio-$1-$2.log" >&2; die "fio ($2) failed"; }
  python3 - "$OUT/fio-$1-$2.json" "$1" "$2" "$([ "$2" = one ] && echo 2 || echo "$CONNECTIONS")" "$target_rss" \
    "$(( after - before ))" "$(getconf CLK_TCK)" "$SAMPLE_SECONDS" >>"$RAW" <<'PY'
import json, sys
path, round_, way, connections, rss, ticks, ticks_per_s, seconds = sys.argv[1:9]
job = json.load(open(path))["jobs"][0]["read"]
# the target's CPU over the sampled seconds, at the run's mean rate
cpu = int(ticks) / int(ticks_per_s) * 1e6 / (job["iops"] * int(seconds))
print(f"{round_}\t{way}\t{connections}\t{job['iops']:.0f}\t{job['lat_ns']['mean'] / 1000:.2f}\t{rss}\t{cpu:.2f}")
PY
  log "round $1 $2: $(tail -1 "$RAW")"
}
for round in $(seq 1 "$ROUNDS"); do
  if [ $(( round % 2 )) -eq 1 ]; then run_way "$round" one; run_way "$round" many; else run_way "$round" many; run_way "$round" one; fi
done
stop_serve

python3 - "$RAW" "$total_ns" "$CONNECTIONS" "$rss_one" "$rss_idle" "$threads_idle" "$fds_one" "$fds_idle" "$ready_s" <<'EOF' | tee "$OUT/summary.md"
import csv, sys
raw, total_ns, connections, rss_one, rss_idle, threads, fds_one, fds_idle, ready_s = sys.argv[1:10]
rows = list(csv.DictReader(open(raw), delimiter="\t"))
best = {}
for row in rows:
    if row["way"] not in best or float(row["iops"]) > float(best[row["way"]]["iops"]):
        best[row["way"]] = row
one, many = best["one"], best["many"]
per_ns = (int(rss_idle) - int(rss_one)) / max(int(total_ns) - 1, 1)
rss_many = max(int(row["target_rss_kib"]) for row in rows if row["way"] == "many")
per_connection = (rss_many - int(rss_idle)) / int(connections)
print(f"| way | connections | total depth | IOPS (best of {len(rows) // 2}) | avg us | target CPU us/IO |")
print("| --- | --: | --: | --: | --: | --: |")
print(f"| one controller | 2 | {int(connections) // 2} | {float(one['iops']):.0f} | {one['avg_us']} | {one['target_cpu_us_per_io']} |")
print(f"| {int(connections) // 2} controllers | {connections} | {int(connections) // 2} | {float(many['iops']):.0f} | {many['avg_us']} | {many['target_cpu_us_per_io']} |")
print()
print(f"many / one: {float(many['iops']) / float(one['iops']):.3f}x IOPS")
print(f"target with {total_ns} namespaces: ready in {ready_s} s, RSS {int(rss_idle) / 1024:.1f} MiB idle "
      f"(one namespace: {int(rss_one) / 1024:.1f} MiB; {per_ns:.2f} KiB per namespace), {threads} threads, "
      f"{fds_idle} open files (one namespace: {fds_one})")
print(f"during the {connections}-connection run: RSS {rss_many / 1024:.1f} MiB "
      f"({per_connection:.1f} KiB per connection over idle)")
EOF
log "raw rounds: $RAW"
