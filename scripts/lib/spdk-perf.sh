# shellcheck shell=bash
# The measuring loop scripts/compare-spdk.sh and compare-spdk-tls.sh share (sourced):
# spdk_nvme_perf on core 1 against the target under test, the target's CPU over each
# run from /proc, one TSV row per workload. The caller sets SPDK_PEER, OUT, RAW,
# WORKLOADS ("rw:size:depth ..."), SECONDS_PER_RUN, PORT, TARGET_NQN, TARGET_PID,
# TARGET_CPU_PID, defines log(), and may set PERF_HOSTNQN and PERF_EXTRA_ARGS (an
# array, e.g. (-S ssl --psk-path KEY)).

# cpu_ticks PID: user + system clock ticks of a process so far.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# stop_target: SIGTERM to $TARGET_PID, SIGKILL after 10 s.
stop_target() {
  kill -TERM "$TARGET_PID" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$TARGET_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$TARGET_PID" 2>/dev/null || true
  wait "$TARGET_PID" 2>/dev/null || true
}

# write_raw_header: the TSV header run_workloads appends under.
write_raw_header() {
  printf 'round\ttarget\tworkload\tiops\tmib_s\tavg_us\tmin_us\tmax_us\ttarget_cpu_us_per_io\n' >"$RAW"
}

# precondition NAME: unless PRECONDITION_SECONDS is 0, one pass of 128 KiB sequential writes over the namespace before any
# workload, so every workload meets written memory on both targets (SPDK's malloc
# namespace is preallocated in hugepages; Sluice's RAM namespace is sparse and
# allocates a chunk on its first write) and reads return data, not zeroes. The field
# reports precondition with writes too.
precondition() {
  [ "${PRECONDITION_SECONDS:-0}" = 0 ] && return 0
  "$SPDK_PEER" perf "${PERF_EXTRA_ARGS[@]}" -c 0x2 -q 8 -o 131072 -w write -t "$PRECONDITION_SECONDS" \
    -r "$("$SPDK_PEER" trid 127.0.0.1 "$PORT" "$TARGET_NQN" ${PERF_HOSTNQN:+"$PERF_HOSTNQN"})" >"$OUT/precondition.log" 2>&1 ||
    log "precondition of $1 failed (see $OUT/precondition.log)"
}

# run_workloads ROUND NAME: every workload once against the running target.
run_workloads() {
  local round=$1 name=$2 spec workload size depth line before after iops mib avg min max cpu_us hz
  hz=$(getconf CLK_TCK)
  for spec in $WORKLOADS; do
    IFS=: read -r workload size depth <<<"$spec"
    before=$(cpu_ticks "$TARGET_CPU_PID")
    line=$("$SPDK_PEER" perf "${PERF_EXTRA_ARGS[@]}" -c 0x2 -q "$depth" -o "$size" -w "$workload" \
      -t "$SECONDS_PER_RUN" -r "$("$SPDK_PEER" trid 127.0.0.1 "$PORT" "$TARGET_NQN" ${PERF_HOSTNQN:+"$PERF_HOSTNQN"})" \
      2>"$OUT/perf-err.log" | grep '^Total' || true)
    after=$(cpu_ticks "$TARGET_CPU_PID")
    if [ -z "$line" ]; then
      log "round $round $name $spec: no Total line"; tail -n 5 "$OUT/perf-err.log" >&2
      continue
    fi
    # Total : IOPS MiB/s avg min max
    read -r iops mib avg min max < <(echo "$line" | awk -F: '{ print $2 }' | awk '{ print $1, $2, $3, $4, $5 }')
    cpu_us=$(awk -v t=$((after - before)) -v hz="$hz" -v iops="$iops" -v s="$SECONDS_PER_RUN" \
      'BEGIN { ios = iops * s; if (ios > 0) printf "%.2f", t / hz * 1e6 / ios; else print "nan" }')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$name" "$spec" "$iops" "$mib" "$avg" "$min" "$max" "$cpu_us" >>"$RAW"
    log "round $round $name $spec: $iops IOPS, avg $avg us, target $cpu_us us CPU/IO"
  done
}
