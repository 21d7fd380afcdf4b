#!/usr/bin/env bash
# Sluice's RBD gateway data path against Ceph's: `sluice serve` with the rbd backend
# versus SPDK's nvmf_tgt with bdev_rbd (`spdk-peer target --rbd`, the data path of
# Ceph's NVMe-oF gateway), polling and in interrupt mode, on one one-node cluster.
#
#   1. One image per target (same size, same object size, the same random contents
#      imported into each first, so every read reaches a written object). Each target
#      in turn with its reactor / runtime thread on core 0, the initiator on core 1:
#      spdk_nvme_perf, and Sluice's own host (`sluice bench`) as a second column.
#      Each workload runs on every target in turn, each started afresh, the order
#      reversed every other round. Per run: IOPS, mean
#      latency, and CPU per I/O of the target process (all its threads, librbd's
#      included), of the OSD (what the gateway leaves it) and of the initiator, and
#      how busy the machine was.
#   2. MANY_IMAGES images on one target, spdk_nvme_perf over every namespace at once,
#      for each way of MANY_CONNECTIONS (default "shared per-image") to connect the
#      images to the cluster: shared, one RADOS client for all images on both sides
#      (Ceph's gateway registers one cluster handle for up to 32 images; Sluice keeps
#      one connection per cluster); per-image, one client per image on both sides
#      (SPDK: a bdev without a cluster name connects its own; Sluice: each backend
#      with an op timeout of its own, which makes a connection of its own).
#
# Prints per workload the best round of each target and initiator (highest IOPS), the
# ratios of Sluice to SPDK's better mode of that workload, and writes raw.tsv and
# summary.md to the output directory.
#
#   scripts/compare-spdk-rbd.sh [--rounds N] [--seconds S] [--targets "spdk spdk-interrupt sluice"]
#       [--initiators "perf sluice"] [--workloads "randread:4096:1 ... randrw:8192:16:70"]
#       [--many-images N] [--many-workloads "randread:4096:2 ..."] [--image-mib N] [--out DIR]
#
# Targets: spdk (polling reactor), spdk-interrupt (--interrupt), sluice (the runtime's
# default adaptive mode), sluice-sleep, sluice-busy-poll. A workload is
# rw:block_bytes:queue_depth[:read_percent] (read_percent for randrw). --many-images 0
# skips step 2.
#
# Cluster: CEPH_CONF if set (POOL, default "rbd"; CEPH_DIR too, for the OSD's CPU), else
# a fresh ../shared/ceph-single-node.sh cluster for the run (removed at the end), in
# which the images go to a pool of their own whose memstore objects are page sets
# (memstore_page_set): memstore's default object is one buffer list, which random 4 KiB
# overwrites cut into ever more pieces, and within minutes the OSD spent 2-4x the CPU
# per request it did at the start (4 KiB QD16 writes 5,500 -> 2,200 IOPS in 5 minutes).
# Images made here are named sluice-cmp-*; they are removed at the end.
# Needs ../shared/spdk-peer (SPDK_PEER overrides), the rbd tool (scripts/setup.sh), and
# a release build of sluice (built here unless SLUICE_BIN is set). Loopback only.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SPDK_PEER=${SPDK_PEER:-$REPO/../shared/spdk-peer/spdk-peer}
CEPH_SINGLE_NODE=${CEPH_SINGLE_NODE:-$REPO/../shared/ceph-single-node.sh}
ROUNDS=2
SECONDS_PER_RUN=8
IMAGE_MIB=256
MANY_IMAGES=16
MANY_IMAGE_MIB=32
TARGETS="spdk spdk-interrupt sluice"
INITIATORS="perf sluice"
# The issue's profiles: 4 KiB random at QD1, 16 and 32; 128 KiB sequential at QD8;
# 70/30 8 KiB random at QD16.
WORKLOADS="randread:4096:1 randwrite:4096:1 randread:4096:16 randwrite:4096:16 randread:4096:32 randwrite:4096:32 read:131072:8 write:131072:8 randrw:8192:16:70"
# Per namespace: with 16 namespaces, 2 deep each is 32 in flight.
MANY_WORKLOADS="randread:4096:2 randwrite:4096:2"
MANY_CONNECTIONS=${MANY_CONNECTIONS:-shared per-image}
# Sluice's host as the second initiator: the default adaptive mode.
HOST_IO=${HOST_IO:-adaptive}
OUT=${OUT:-$REPO/target/compare-spdk-rbd}
NQN=nqn.2026-11.io.sluice:compare-rbd
BLOCK_SIZE=4096
POOL=${POOL:-rbd}

while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --targets) TARGETS=$2; shift 2 ;;
    --initiators) INITIATORS=$2; shift 2 ;;
    --workloads) WORKLOADS=$2; shift 2 ;;
    --many-images) MANY_IMAGES=$2; shift 2 ;;
    --many-workloads) MANY_WORKLOADS=$2; shift 2 ;;
    --image-mib) IMAGE_MIB=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "compare-spdk-rbd: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

die() { echo "compare-spdk-rbd: $*" >&2; exit 1; }
log() { echo "[compare-spdk-rbd] $*" >&2; }
[ -x "$SPDK_PEER" ] || die "$SPDK_PEER not found (set SPDK_PEER)"
[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs (target on 0, initiator on 1)"
command -v rbd >/dev/null || die "the rbd tool is missing: scripts/setup.sh installs ceph-common"
for target in $TARGETS; do
  case $target in spdk|spdk-interrupt|sluice|sluice-sleep|sluice-busy-poll) ;; *) die "unknown target $target" ;; esac
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [ -z "${SLUICE_BIN:-}" ]; then
  (cd "$REPO" && cargo build --release -p sluice --bin sluice --quiet)
  SLUICE_BIN=$REPO/target/release/sluice
fi

# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"

OWN_CLUSTER='' TARGET_PID='' IMAGES_MADE=()
cleanup() {
  # A target that died already makes kill fail: that must not end the cleanup.
  [ -n "$TARGET_PID" ] && { kill -TERM "$TARGET_PID" 2>/dev/null || true; wait "$TARGET_PID" 2>/dev/null || true; }
  local image
  for image in ${IMAGES_MADE[@]+"${IMAGES_MADE[@]}"}; do rbd -c "$CEPH_CONF" rm "$image" >/dev/null 2>&1 || true; done
  [ -z "$OWN_CLUSTER" ] || "$CEPH_SINGLE_NODE" down "$OWN_CLUSTER" >/dev/null 2>&1 || true
  rm -f "$OUT/contents.bin"
}
trap cleanup EXIT

if [ -z "${CEPH_CONF:-}" ]; then
  log "no CEPH_CONF: bringing up a one-node cluster"
  eval "$("$CEPH_SINGLE_NODE" up)"
  OWN_CLUSTER=$CEPH_DIR
  # Collections (placement groups) created from now on keep page sets (see the top).
  ceph -c "$CEPH_CONF" daemon osd.0 config set memstore_page_set true >/dev/null
  POOL=sluice-cmp
  ceph -c "$CEPH_CONF" osd pool create "$POOL" 8 8 >/dev/null 2>&1
  ceph -c "$CEPH_CONF" osd pool set "$POOL" size 1 --yes-i-really-mean-it >/dev/null 2>&1
  ceph -c "$CEPH_CONF" osd pool application enable "$POOL" rbd >/dev/null 2>&1
fi
OSD_PID=''
[ -n "${CEPH_DIR:-}" ] && [ -f "$CEPH_DIR/pids/osd.0" ] && OSD_PID=$(<"$CEPH_DIR/pids/osd.0")
[ -n "$OSD_PID" ] || log "CEPH_DIR not set: the OSD's CPU is not reported"

# ---- images: the same random contents in every image -----------------------------
head -c "$((IMAGE_MIB * 1024 * 1024))" /dev/urandom >"$OUT/contents.bin"
make_image() {  # make_image NAME MIB: a fresh image holding the first MIB of the contents
  rbd -c "$CEPH_CONF" rm "$POOL/$1" >/dev/null 2>&1 || true
  head -c "$(($2 * 1024 * 1024))" "$OUT/contents.bin" | rbd -c "$CEPH_CONF" import --no-progress - "$POOL/$1" >/dev/null
  IMAGES_MADE+=("$POOL/$1")
}
log "importing $IMAGE_MIB MiB of random data into one image per target"
make_image sluice-cmp-spdk "$IMAGE_MIB"
make_image sluice-cmp-sluice "$IMAGE_MIB"
if [ "$MANY_IMAGES" -gt 0 ]; then
  log "importing $MANY_IMAGE_MIB MiB into $MANY_IMAGES images per target"
  for n in $(seq 1 "$MANY_IMAGES"); do
    make_image "sluice-cmp-spdk-$n" "$MANY_IMAGE_MIB"
    make_image "sluice-cmp-sluice-$n" "$MANY_IMAGE_MIB"
  done
fi

# ---- targets -----------------------------------------------------------------------
PORT='' TARGET_NQN='' TARGET_CPU_PID=''
wait_ready() {  # wait_ready NAME LOG PATTERN
  local waited=0
  until grep -q "$3" "$2" 2>/dev/null; do
    sleep 0.2; waited=$((waited + 1))
    if [ $waited -ge 300 ] || ! kill -0 "$TARGET_PID" 2>/dev/null; then
      tail -n 20 "$2" >&2; die "target $1 did not start"
    fi
  done
}

# start_target NAME IMAGES: NAME on core 0 serving IMAGES images (1: the single one).
start_target() {
  local name=$1 images=$2 log_file=$OUT/target-$1.log
  PORT=$(free_port)
  case $name in
    spdk|spdk-interrupt)
      TARGET_NQN=nqn.2016-06.io.spdk:cnode1
      local interrupt=()
      [ "$name" = spdk-interrupt ] && interrupt=(--interrupt)
      if [ "$images" -eq 1 ]; then
        "$SPDK_PEER" target --port "$PORT" --rbd "$POOL/sluice-cmp-spdk" --ceph-conf "$CEPH_CONF" \
          --block-size "$BLOCK_SIZE" --core 0 ${interrupt[@]+"${interrupt[@]}"} >"$log_file" 2>&1 &
        TARGET_PID=$!
        wait_ready "$name" "$log_file" 'spdk-peer: READY'
        TARGET_CPU_PID=$(pgrep -n -f 'bin/nvmf_tgt_rbd' || true)
      else
        start_spdk_many "$name" "$images" "$log_file" ${interrupt[@]+"${interrupt[@]}"}
      fi
      ;;
    sluice*)
      TARGET_NQN=$NQN
      local mode=adaptive
      [ "$name" = sluice ] || mode=${name#sluice-}
      local config=$OUT/sluice-$name-$images.toml n
      {
        printf '[[listener]]\naddress = "127.0.0.1:%s"\n\n' "$PORT"
        if [ "$images" -eq 1 ]; then
          printf '[[backend]]\nname = "vol1"\nkind = "rbd"\npool = "%s"\nimage = "sluice-cmp-sluice"\nblock_size = %s\nceph_conf = "%s"\n\n' \
            "$POOL" "$BLOCK_SIZE" "$CEPH_CONF"
        else
          for n in $(seq 1 "$images"); do
            printf '[[backend]]\nname = "vol%s"\nkind = "rbd"\npool = "%s"\nimage = "sluice-cmp-sluice-%s"\nblock_size = %s\nceph_conf = "%s"\n' \
              "$n" "$POOL" "$n" "$BLOCK_SIZE" "$CEPH_CONF"
            # A connection is shared by backends of the same conf, user and op timeout.
            [ "$CONNECTIONS" = per-image ] && printf 'op_timeout_ms = %s\n' $((20000 + n))
            printf '\n'
          done
        fi
        printf '[[subsystem]]\nnqn = "%s"\nallow_any_host = true\n\n' "$NQN"
        for n in $(seq 1 "$images"); do printf '[[subsystem.namespace]]\nnsid = %s\ndevice = "vol%s"\n\n' "$n" "$n"; done
        # One runtime thread pinned to core 0, as SPDK's reactor is; librbd's threads
        # float over both cores on both sides.
        printf '[runtime]\nthreads = 1\npin_threads = true\npoll_mode = "%s"\n' "$mode"
      } >"$config"
      SLUICE_LOG=warn "$SLUICE_BIN" serve --config "$config" --no-rpc-socket >"$log_file" 2>&1 &
      TARGET_PID=$!
      wait_ready "$name" "$log_file" '^sluice: ready'
      TARGET_CPU_PID=$TARGET_PID
      ;;
  esac
  [ -n "$TARGET_CPU_PID" ] || TARGET_CPU_PID=$TARGET_PID
}

# start_spdk_many NAME IMAGES LOG [--interrupt]: SPDK's nvmf_tgt_rbd from spdk-peer's
# bundle with the configuration `spdk-peer target --rbd` writes, but IMAGES bdevs on
# one registered cluster (Ceph's gateway shares one handle among up to 32 images).
start_spdk_many() {
  local name=$1 images=$2 log_file=$3 root dir n bdevs='' namespaces=''
  root=$(dirname "$("$SPDK_PEER" info | awk '/^tools:/{print $2}')")
  dir=$OUT/spdk-many
  mkdir -p "$dir"
  local cluster='"cluster_name": "cmp", '
  # Without a cluster name, bdev_rbd_create connects a client of its own for the bdev,
  # configured from librados' default file ($CEPH_CONF, set for the process below).
  [ "$CONNECTIONS" = per-image ] && cluster=''

  for n in $(seq 1 "$images"); do
    bdevs+=",
  {\"method\": \"bdev_rbd_create\", \"params\": {\"name\": \"Rbd$n\", $cluster\"pool_name\": \"$POOL\", \"rbd_name\": \"sluice-cmp-spdk-$n\", \"block_size\": $BLOCK_SIZE}}"
    namespaces+=",
  {\"method\": \"nvmf_subsystem_add_ns\", \"params\": {\"nqn\": \"$TARGET_NQN\", \"namespace\": {\"bdev_name\": \"Rbd$n\"}}}"
  done
  cat >"$dir/config.json" <<JSON
{"subsystems": [
 {"subsystem": "bdev", "config": [
  {"method": "bdev_rbd_register_cluster", "params": {"name": "cmp", "config_file": "$CEPH_CONF", "config_param": {"client_mount_timeout": "20"}}}$bdevs]},
 {"subsystem": "nvmf", "config": [
  {"method": "nvmf_create_transport", "params": {"trtype": "TCP"}},
  {"method": "nvmf_create_subsystem", "params": {"nqn": "$TARGET_NQN", "allow_any_host": true,
    "serial_number": "SPDK00000000000001", "model_number": "SPDK peer", "max_namespaces": $images}}$namespaces,
  {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "$TARGET_NQN",
    "listen_address": {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "$PORT"}}}]}
]}
JSON
  local mode=()
  [ $# -ge 4 ] && mode=(--interrupt-mode)
  rm -f "$dir/spdk.sock"
  CEPH_CONF=$CEPH_CONF LD_LIBRARY_PATH=$root/lib "$root/bin/nvmf_tgt_rbd" -m 0x1 ${mode[@]+"${mode[@]}"} --json "$dir/config.json" \
    -r "$dir/spdk.sock" >"$log_file" 2>&1 &
  TARGET_PID=$! TARGET_CPU_PID=$TARGET_PID
  local waited=0
  until (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; do
    sleep 0.2; waited=$((waited + 1))
    if [ $waited -ge 300 ] || ! kill -0 "$TARGET_PID" 2>/dev/null; then tail -n 20 "$log_file" >&2; die "$name with $images images did not start"; fi
  done
}

stop_target() {
  kill -TERM "$TARGET_PID" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$TARGET_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$TARGET_PID" 2>/dev/null || true
  wait "$TARGET_PID" 2>/dev/null || true
  TARGET_PID=''
  # SPDK releases the image's lock as it closes; give librbd a moment on both sides.
  sleep 1
}

# ---- one measured run ----------------------------------------------------------------
cpu_ticks() { [ -n "$1" ] && [ -r "/proc/$1/stat" ] && awk '{ print $14 + $15 }' "/proc/$1/stat" || echo 0; }
# busy and total jiffies of the whole machine (every CPU)
machine_ticks() { awk '/^cpu /{ busy = $2 + $3 + $4 + $7 + $8; print busy, busy + $5 + $6 }' /proc/stat; }

RAW=$OUT/raw.tsv
printf 'step\tround\ttarget\tinitiator\tworkload\tiops\tavg_us\ttarget_cpu_us_per_io\tosd_cpu_us_per_io\tinitiator_cpu_us_per_io\tmachine_busy_percent\n' >"$RAW"
HZ=$(getconf CLK_TCK)
# per_io TICKS IOPS: microseconds of CPU per I/O over a run
per_io() { awk -v t="$1" -v hz="$HZ" -v iops="$2" -v s="$SECONDS_PER_RUN" \
  'BEGIN { ios = iops * s; if (ios > 0) printf "%.2f", t / hz * 1e6 / ios; else print "nan" }'; }

# run_one STEP ROUND TARGET INITIATOR SPEC
run_one() {
  local step=$1 round=$2 target=$3 initiator=$4 spec=$5 workload size depth percent
  IFS=: read -r workload size depth percent <<<"$spec"
  local t0 o0 m0busy m0total t1 o1 m1busy m1total iops='' avg='' initiator_cpu=''
  t0=$(cpu_ticks "$TARGET_CPU_PID") o0=$(cpu_ticks "$OSD_PID")
  read -r m0busy m0total < <(machine_ticks)
  case $initiator in
    perf)
      local mix=()
      [ -n "$percent" ] && mix=(-M "$percent")
      local line
      line=$("$SPDK_PEER" perf -c 0x2 -q "$depth" -o "$size" -w "$workload" ${mix[@]+"${mix[@]}"} -t "$SECONDS_PER_RUN" \
        -r "$("$SPDK_PEER" trid 127.0.0.1 "$PORT" "$TARGET_NQN")" 2>"$OUT/perf-err.log" | grep '^Total' || true)
      if [ -n "$line" ]; then
        read -r iops avg < <(echo "$line" | awk -F: '{ print $2 }' | awk '{ print $1, $3 }')
        # perf polls its core: all of it is the initiator's
        initiator_cpu=$(awk -v iops="$iops" 'BEGIN { if (iops > 0) printf "%.2f", 1e6 / iops; else print "nan" }')
      else
        tail -n 5 "$OUT/perf-err.log" >&2
      fi
      ;;
    sluice)
      local pattern=random read_percent=100
      case $workload in read|write) pattern=sequential ;; esac
      case $workload in *write) read_percent=0 ;; randrw) read_percent=$percent ;; esac
      printf '[[job]]\nname = "%s"\npattern = "%s"\nread_percent = %s\nblock_size = %s\nthreads = 1\nqueue_depth = %s\nduration = "%ss"\n' \
        "$spec" "$pattern" "$read_percent" "$size" "$depth" "$SECONDS_PER_RUN" >"$OUT/job.toml"
      if taskset -c 1 "$SLUICE_BIN" bench --target "tcp://127.0.0.1:$PORT/$TARGET_NQN" --suite-file "$OUT/job.toml" \
        --size "${IMAGE_MIB}MiB" --no-baseline --host-io "$HOST_IO" --json "$OUT/bench.json" >"$OUT/bench-err.log" 2>&1; then
        read -r iops avg initiator_cpu < <(python3 -c '
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
print("%.0f %.2f %.2f" % (run["iops"], run["latency_us"]["mean"], run["cpu"]["initiator_us_per_io"]))' "$OUT/bench.json")
      else
        tail -n 5 "$OUT/bench-err.log" >&2
      fi
      ;;
  esac
  t1=$(cpu_ticks "$TARGET_CPU_PID") o1=$(cpu_ticks "$OSD_PID")
  read -r m1busy m1total < <(machine_ticks)
  if [ -z "$iops" ]; then
    log "$step round $round $target/$initiator $spec: no result"
    return 0
  fi
  local target_cpu osd_cpu busy
  target_cpu=$(per_io $((t1 - t0)) "$iops")
  osd_cpu=$(per_io $((o1 - o0)) "$iops")
  [ -n "$OSD_PID" ] || osd_cpu=nan
  busy=$(awk -v b=$((m1busy - m0busy)) -v t=$((m1total - m0total)) 'BEGIN { if (t > 0) printf "%.0f", 100 * b / t; else print "nan" }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$step" "$round" "$target" "$initiator" "$spec" "$iops" "$avg" \
    "$target_cpu" "$osd_cpu" "$initiator_cpu" "$busy" >>"$RAW"
  log "$step round $round $target/$initiator $spec: $iops IOPS, avg $avg us, CPU us/IO target $target_cpu osd $osd_cpu, machine $busy % busy"
}

# ---- the rounds ------------------------------------------------------------------------
log "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $(rbd -c "$CEPH_CONF" info "$POOL/sluice-cmp-sluice" | grep -E 'order|size' | tr -s ' \n' ' ')"
echo "load_before $(cut -d' ' -f1-3 /proc/loadavg)" >"$OUT/machine.txt"
# Every workload runs on each target in turn (a fresh start each time), the order
# reversed every other round, so a cluster or machine that drifts over the run moves
# each workload's targets alike.
for round in $(seq 1 "$ROUNDS"); do
  order=$TARGETS
  [ $((round % 2)) -eq 0 ] && order=$(echo "$TARGETS" | tr ' ' '\n' | tac | tr '\n' ' ')
  for spec in $WORKLOADS; do
    for target in $order; do
      start_target "$target" 1
      for initiator in $INITIATORS; do run_one single "$round" "$target" "$initiator" "$spec"; done
      stop_target
    done
  done
done
CONNECTIONS=shared
if [ "$MANY_IMAGES" -gt 0 ]; then
  for CONNECTIONS in $MANY_CONNECTIONS; do
    step=images-$MANY_IMAGES
    [ "$CONNECTIONS" = shared ] || step+=-$CONNECTIONS-connections
    for round in $(seq 1 "$ROUNDS"); do
      order=$TARGETS
      [ $((round % 2)) -eq 0 ] && order=$(echo "$TARGETS" | tr ' ' '\n' | tac | tr '\n' ' ')
      for target in $order; do
        start_target "$target" "$MANY_IMAGES"
        for spec in $MANY_WORKLOADS; do run_one "$step" "$round" "$target" perf "$spec"; done
        stop_target
      done
    done
  done
fi
echo "load_after $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.txt"

python3 "$REPO/scripts/lib/rbd-ratios.py" "$RAW" | tee "$OUT/summary.md"
log "raw rounds: $RAW"
