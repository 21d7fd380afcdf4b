#!/usr/bin/env bash
# Runs a fio job file from fio/jobs/ through the Sluice fio engine, with defaults
# for the variables the job files use (override any of them in the environment):
#
#   SLUICE_FIO_ENGINE  [<repo>/target/fio/libsluice_fio.so; scripts/build-fio-engine.sh]
#   SLUICE_TRADDR      [127.0.0.1]
#   SLUICE_TRSVCID     [4420]
#   SLUICE_SUBNQN      [nqn.2026-11.io.sluice:default, the NQN of `sluice serve`
#                       without --config]
#   SLUICE_NSID        [1]
#   SLUICE_SIZE        [64m]
#   SLUICE_RUNTIME     [3]  (seconds per time-based profile)
#
# Usage: fio/run-job.sh JOBFILE [fio options...]
#   e.g. fio/run-job.sh fio/jobs/four-corners.fio --section=4k-randread-16x32
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ $# -ge 1 ] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

export SLUICE_FIO_ENGINE=${SLUICE_FIO_ENGINE:-$REPO/target/fio/libsluice_fio.so}
export SLUICE_TRADDR=${SLUICE_TRADDR:-127.0.0.1}
export SLUICE_TRSVCID=${SLUICE_TRSVCID:-4420}
export SLUICE_SUBNQN=${SLUICE_SUBNQN:-nqn.2026-11.io.sluice:default}
export SLUICE_NSID=${SLUICE_NSID:-1}
export SLUICE_SIZE=${SLUICE_SIZE:-64m}
export SLUICE_RUNTIME=${SLUICE_RUNTIME:-3}

if [ ! -f "$SLUICE_FIO_ENGINE" ]; then
  echo "run-job: no engine at $SLUICE_FIO_ENGINE: build it with scripts/build-fio-engine.sh" >&2
  exit 1
fi
exec "${FIO:-fio}" "$@"
