#!/usr/bin/env bash
# Sluice's one test command: what CI runs (.ci/run) and what a developer runs.
#
# Stages, in order, failing fast (the failing stage is named at the end):
#   setup       scripts/setup.sh (installs missing tools; no-op when present)
#   fmt         cargo fmt --all --check (rustfmt.toml: one style for the workspace)
#   build       cargo build --release --workspace --all-targets, cargo check of
#               tools/runtime-compare and cargo test of tools/minimal-responder (their
#               own workspaces, so nothing else builds them),
#               then the fio engines (scripts/build-fio-engine.sh) for the bench's fio
#               driver test; "release" here is the checked build below, in
#               target/checked
#   cluster     a one-node Ceph cluster (../shared/ceph-single-node.sh, memstore) for
#               the RBD backend's tests, here and in interop; stopped when this exits
#   test        cargo test --release --workspace
#   clippy      cargo clippy --workspace --all-targets -- -D warnings
#   csi         scripts/csi-sanity.sh: the CSI conformance suite (Identity, Controller;
#               a pool pass, and an RBD pass with snapshots and clones on the cluster)
#               against sluice-csi and a sluice serve over the network API; its Node
#               suite runs in the interop stage's guest (tests/interop/csi-node.sh)
#   sim         scripts/sim.sh: sluice-sim over 2000 seeds, and its canaries caught
#   harness     ShellCheck on scripts/, tests/interop/, .ci/run, the package's
#               maintainer scripts (dist/debian/), the
#               self-test of the interop capture check (tshark filters), and the
#               Prometheus rules (promtool check and unit tests:
#               scripts/test-alert-rules.sh)
#   fuzz        every cargo-fuzz target in fuzz/ for FUZZ_SECONDS each
#   report      a sample benchmark report rendered in headless Chromium (screenshot)
#   interop     tests/interop/run-all.sh (Linux kernel host vs sluice, in QEMU)
#
# Environment (CI sets none of these):
#   SKIP_FUZZ=1      skip the fuzz stage
#   SKIP_INTEROP=1   skip the interop stage
#   FUZZ_SECONDS=N   libFuzzer -max_total_time per target (default 20)
#   OUT=DIR          interop artifacts (default target/interop)
#   CARGO_TARGET_DIR the checked build goes to its checked/ subdirectory (default
#                    target/checked)
#
# The checked build: every stage runs the release profile without LTO and with debug
# assertions and overflow checks on (the CARGO_PROFILE_RELEASE_* variables below), so
# unit tests, the simulator and the interop peers run the code with its assertions
# (an I/O thread that reaches blocking work panics, for one), and the build takes
# about a third of the LTO build's time. It has its own target directory, so a
# developer's target/release (the README's main job, LTO) is not rebuilt back and
# forth. The fuzz stage keeps cargo-fuzz's own settings.
# See docs/testing.md.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
if [ -d "$HOME/.cargo/bin" ] && [[ ":$PATH:" != *":$HOME/.cargo/bin:"* ]]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}/checked
TARGET_DIR=$CARGO_TARGET_DIR
CHECKED_PROFILE=(CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
  CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true
  CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true)
export "${CHECKED_PROFILE[@]}"

STAGES=(setup fmt build cluster test clippy csi sim harness fuzz report interop)
declare -A RESULT=() TOOK=()
run_start=$SECONDS

# elapsed seconds since $1 (an $EPOCHREALTIME value), one decimal
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

summary() {
  local s n_pass=0 n_fail=0 n_skip=0
  echo
  echo "==== scripts/test.sh summary ($((SECONDS - run_start))s in all)"
  for s in "${STAGES[@]}"; do
    case ${RESULT[$s]:-not run} in
      ok) n_pass=$((n_pass + 1)) ;;
      FAILED) n_fail=$((n_fail + 1)) ;;
      skipped*) n_skip=$((n_skip + 1)) ;;
    esac
    printf '  %-11s %-28s %s\n' "$s" "${RESULT[$s]:-not run}" "${TOOK[$s]:+${TOOK[$s]}s}"
  done
  echo "stages: $n_pass passed, $n_fail failed, $n_skip skipped"
}

# stage NAME HINT CMD...: run one stage with a header and its duration
stage() {
  local name=$1 hint=$2 t0 rc
  shift 2
  echo
  echo "==== [$name] $*"
  t0=$EPOCHREALTIME
  set +e
  "$@"
  rc=$?
  set -e
  TOOK[$name]=$(since "$t0")
  if [ "$rc" -eq 0 ]; then
    RESULT[$name]=ok
    echo "==== [$name] ok (${TOOK[$name]}s)"
    return 0
  fi
  RESULT[$name]=FAILED
  echo "==== [$name] FAILED with exit status $rc after ${TOOK[$name]}s"
  summary
  echo
  echo "scripts/test.sh: FAILED in stage '$name': $hint" >&2
  # CI keeps only the tail of the output: the interop failures' own lines go last.
  if [ "$name" = interop ] && [ -s "${OUT:-$REPO/target/interop}/failed-checks.txt" ]; then
    cat "${OUT:-$REPO/target/interop}/failed-checks.txt" >&2
  fi
  exit 1
}

skip() {  # skip NAME WHY
  RESULT[$1]="skipped ($2)"
  echo
  echo "==== [$1] skipped: $2"
}

# One Ceph cluster for the whole run: the RBD tests (cargo tests and interop) read
# CEPH_CONF, and SLUICE_REQUIRE_CEPH makes them fail rather than skip without it.
CEPH_SCRIPT=${CEPH_SCRIPT:-$REPO/../shared/ceph-single-node.sh}
ceph_cluster() {
  [ -x "$CEPH_SCRIPT" ] || { echo "ceph-single-node.sh not found at $CEPH_SCRIPT (expected in ../shared/ next to the repository)"; return 1; }
  local dir env_file
  # Short path: the daemons' admin sockets live under it (sun_path has 108 bytes).
  dir=$(mktemp -d /tmp/sluice-ceph.XXXXXX)
  env_file=$dir.env
  trap 'ceph_down' EXIT
  CEPH_CLUSTER_DIR=$dir
  # A short watch timeout: after a SIGKILL the next opener of an image waits this long.
  CEPH_WATCH_TIMEOUT=5 "$CEPH_SCRIPT" up "$dir" > "$env_file" || return 1
  # shellcheck disable=SC1090
  . "$env_file"
  export CEPH_DIR CEPH_CONF SLUICE_REQUIRE_CEPH=1
  echo "ceph cluster up: CEPH_CONF=$CEPH_CONF"
}
CEPH_CLUSTER_DIR=''
ceph_down() {
  [ -n "$CEPH_CLUSTER_DIR" ] || return 0
  "$CEPH_SCRIPT" down "$CEPH_CLUSTER_DIR" >/dev/null 2>&1 || true
  rm -rf "$CEPH_CLUSTER_DIR" "$CEPH_CLUSTER_DIR.env"
  CEPH_CLUSTER_DIR=''
}

harness_checks() {
  local files=()
  mapfile -t files < <(find scripts tests/interop tests/report -type f -name '*.sh' | LC_ALL=C sort)
  files+=(.ci/run tests/interop/lib/lnp-retry dist/debian/postinst dist/debian/prerm dist/debian/postrm)
  echo "+ shellcheck -x (${#files[@]} files)"
  shellcheck -x "${files[@]}" || return 1
  echo "+ tests/interop/tools/capture-selftest.sh"
  tests/interop/tools/capture-selftest.sh || return 1
  echo "+ scripts/test-alert-rules.sh"
  scripts/test-alert-rules.sh
}

# In a subshell: cargo-fuzz builds with its own profile and target directory.
fuzz_smoke() (
  unset CARGO_TARGET_DIR "${CHECKED_PROFILE[@]%%=*}"
  if [ ! -f fuzz/Cargo.toml ]; then
    echo "fuzz/Cargo.toml does not exist yet: no fuzz targets to run"
    return 0
  fi
  local targets=() t failed=() corpus
  mapfile -t targets < <(cargo +nightly fuzz list)
  if [ ${#targets[@]} -eq 0 ]; then
    echo "fuzz/Cargo.toml lists no fuzz targets"
    return 0
  fi
  echo "fuzz targets (${#targets[@]}): ${targets[*]}; ${FUZZ_SECONDS}s each"
  echo "+ cargo +nightly fuzz build"
  cargo +nightly fuzz build || { echo "cargo +nightly fuzz build failed"; return 1; }
  for t in "${targets[@]}"; do
    echo
    echo "---- fuzz target $t (${FUZZ_SECONDS}s)"
    corpus=(fuzz/corpus/"$t")
    mkdir -p "fuzz/corpus/$t"
    # checked-in seeds, if any, are read (new inputs go to fuzz/corpus/<t>)
    [ -d "fuzz/seeds/$t" ] && corpus+=("fuzz/seeds/$t")
    # libFuzzer's per-input progress lines (NEW/REDUCE/pulse) are dropped from the log
    cargo +nightly fuzz run "$t" "${corpus[@]}" -- -max_total_time="$FUZZ_SECONDS" \
      -print_final_stats=1 2>&1 | { grep --line-buffered -Ev '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)' || true; }
    if [ "${PIPESTATUS[0]}" -ne 0 ]; then
      failed+=("$t")
      echo "fuzz target $t FAILED; reproduce with: cargo +nightly fuzz run $t fuzz/artifacts/$t/<crash-file>"
      find "fuzz/artifacts/$t" -type f 2>/dev/null | sed 's/^/  /' || true
    fi
  done
  [ ${#failed[@]} -eq 0 ] || { echo "failing fuzz targets: ${failed[*]}"; return 1; }
)

echo "scripts/test.sh in $REPO ($(git rev-parse --short HEAD 2>/dev/null || echo 'no git')), CI=${CI:-}"
[ -z "${SKIP_FUZZ:-}${SKIP_INTEROP:-}" ] || echo "note: SKIP_FUZZ='${SKIP_FUZZ:-}' SKIP_INTEROP='${SKIP_INTEROP:-}' (CI sets neither)"

stage setup "see the message above; scripts/setup.sh --check lists what is missing" \
  scripts/setup.sh
echo "rustc $(rustc --version | cut -d' ' -f2), $(cargo +nightly --version 2>/dev/null | cut -d' ' -f1-2 || echo 'no nightly'), tshark $(tshark --version 2>/dev/null | head -n1 | awk '{print $3}'), $(qemu-system-x86_64 --version | head -n1 | awk '{print $1, $4}')"
build_all() {
  echo "+ cargo build --release --workspace --all-targets"
  cargo build --release --workspace --all-targets || return 1
  echo "+ cargo check --manifest-path tools/runtime-compare/Cargo.toml"
  cargo check --manifest-path tools/runtime-compare/Cargo.toml || return 1
  # The scale measurements' kernel-limit reference (issue 46): its PDU tests.
  echo "+ cargo test --release --manifest-path tools/minimal-responder/Cargo.toml"
  cargo test --release --manifest-path tools/minimal-responder/Cargo.toml || return 1
  # The fio engines, before the test stage: the bench's fio driver test needs them,
  # and SLUICE_REQUIRE_FIO makes it fail rather than skip without them.
  echo "+ scripts/build-fio-engine.sh"
  scripts/build-fio-engine.sh || return 1
  export SLUICE_REQUIRE_FIO=1
}
stage fmt "run cargo fmt --all (the diff above is what it changes)" \
  cargo fmt --all --check
stage build "fix the compile errors above" \
  build_all
stage cluster "the one-node Ceph cluster did not come up: see above and its log directory" \
  ceph_cluster
stage test "a unit/integration test failed: see its output above" \
  cargo test --release --workspace
stage clippy "fix the clippy warnings above (they are errors here)" \
  cargo clippy --workspace --all-targets -- -D warnings
stage csi "a CSI conformance test failed: see csi-sanity's output above" \
  env SLUICE_BIN="$TARGET_DIR/release/sluice" SLUICE_CSI_BIN="$TARGET_DIR/release/sluice-csi" scripts/csi-sanity.sh
stage sim "a simulated seed broke an invariant: replay it with the command printed above" \
  scripts/sim.sh
stage harness "fix the ShellCheck findings / capture-check self-test / alert rule test failures above" \
  harness_checks
if [ "${SKIP_FUZZ:-0}" = 1 ]; then skip fuzz "SKIP_FUZZ=1"
else
  stage fuzz "a fuzz target crashed or did not build: see above and fuzz/artifacts/" \
    fuzz_smoke
fi
stage report "the benchmark HTML report did not render in headless Chromium: see above" \
  tests/report/render-check.sh
if [ "${SKIP_INTEROP:-0}" = 1 ]; then skip interop "SKIP_INTEROP=1"
else
  # the binary the build stage made (no rebuild inside the interop tests)
  export SLUICE_BIN=$TARGET_DIR/release/sluice SLUICE_CSI_BIN=$TARGET_DIR/release/sluice-csi
  stage interop "see the interop output above and its artifacts in ${OUT:-target/interop}/" \
    tests/interop/run-all.sh
fi
summary
