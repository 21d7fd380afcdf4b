#!/usr/bin/env bash
# Restarts every gateway of a gateway group in turn without taking a path away from
# the group's hosts: a member is stopped only while the group is whole, and the next
# one only once it is back in the group, serving the group's current configuration,
# and every ANA group is optimized on some member again.
#
# For each member, in the order given:
#   1. the group is whole: every member alive (holds its lease), every ANA group
#      optimized on some member, as the member's management API and the members'
#      own ANA logs say (`sluice gateway status -o json` through another member);
#   2. DRAIN (`sluice gateway drain`, through another member): its ANA groups move to
#      the other members while it still runs, each through an ANA change; the drain
#      answers once it owns none (it is refused, and the script stops, when no other
#      member could take them);
#   3. STOP: wait until its management socket stops answering and every ANA group is
#      optimized on another member;
#   4. START; wait until it serves (phase "serving", the same group configuration
#      version as the others when it lives in the cluster; it comes back drained:
#      the state is in the cluster), then UNDRAIN it and wait until the group is whole
#      again (with failback its preferred groups come back to it), and as many host
#      controllers are connected to it as before the stop (hosts reconnect on their
#      own schedule: Linux retries every 10 s), so that no host is left with one path
#      when the next member stops.
# A step that does not finish within the timeout stops the script (status 1) with
# the group as it is: nothing else is restarted.
#
# Usage: scripts/rolling-restart.sh --stop CMD --start CMD --socket PATTERN NAME...
#   CMD and PATTERN have %n replaced by the member's name, e.g. with systemd units
#   sluice-gw-a, sluice-gw-b and sockets /run/sluice/gw-a.sock:
#     scripts/rolling-restart.sh --stop 'systemctl stop sluice-gw-%n' \
#       --start 'systemctl start sluice-gw-%n' --socket /run/sluice/gw-%n.sock a b
# Environment:
#   SLUICE=PATH        the sluice binary (default: sluice on PATH)
#   STEP_TIMEOUT=S     bound for each wait (default 60)
set -euo pipefail

SLUICE=${SLUICE:-sluice}
STEP_TIMEOUT=${STEP_TIMEOUT:-60}
stop_cmd='' start_cmd='' socket_pattern=''
while [ $# -gt 0 ]; do
  case $1 in
    --stop) stop_cmd=$2; shift 2 ;;
    --start) start_cmd=$2; shift 2 ;;
    --socket) socket_pattern=$2; shift 2 ;;
    --) shift; break ;;
    -*) echo "rolling-restart: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ -z "$stop_cmd" ] || [ -z "$start_cmd" ] || [ -z "$socket_pattern" ] || [ $# -lt 2 ]; then
  echo "usage: $0 --stop CMD --start CMD --socket PATTERN NAME NAME..." >&2
  exit 2
fi
members=("$@")

log() { printf '[rolling-restart %s] %s\n' "$(date +%T)" "$*"; }
socket_of() { printf '%s' "${socket_pattern//%n/$1}"; }

# status_json NAME: `gateway status -o json` through member NAME (fails if it does
# not answer)
status_json() { "$SLUICE" gateway status -o json --socket "$(socket_of "$1")" 2>/dev/null; }

# whole VIA [EXCEPT]: through member VIA, every member but EXCEPT is alive and every
# ANA group is reported optimized by some member other than EXCEPT; with the group's
# configuration in the cluster, VIA runs the same version as every other member
# asked. Prints why not.
whole() {
  local via=$1 except=${2:-} json versions=() member
  json=$(status_json "$via") || { echo "$via does not answer"; return 1; }
  for member in "${members[@]}"; do
    [ "$member" = "$except" ] && continue
    versions+=("$(status_json "$member" | python3 -c 'import json, sys; print(json.load(sys.stdin)["config"].get("version", "file"))' 2>/dev/null || echo "?")")
  done
  python3 -c "$WHOLE_CHECK" "$json" "$except" "${versions[@]}"
}

# The check of `whole`, on a gateway status (JSON), the member left out and the
# configuration versions the members run.
WHOLE_CHECK=$(cat <<'PY'
import json, sys
status = json.loads(sys.argv[1])
except_name, versions = sys.argv[2], sys.argv[3:]
problems = []
if status["phase"] != "serving":
    problems.append(f"{status['name']} is {status['phase']}")
for member in status["members"]:
    if member["name"] != except_name and not member["alive"]:
        problems.append(f"{member['name']} holds no lease")
groups = {str(group["ana_group"]) for group in status["ana_groups"]}
for group in sorted(groups):
    owners = [m["name"] for m in status["members"] if m["name"] != except_name
              and isinstance(m.get("reported"), dict) and m["reported"].get(group) == "optimized"]
    if not owners:
        problems.append(f"ANA group {group} optimized nowhere")
if len(set(versions)) > 1:
    problems.append(f"configuration versions differ: {' '.join(versions)}")
print("; ".join(problems))
sys.exit(1 if problems else 0)
PY
)

# wait_until WHAT COMMAND...: runs COMMAND every 200 ms until it succeeds, at most
# STEP_TIMEOUT seconds
wait_until() {
  local what=$1 deadline=$((SECONDS + STEP_TIMEOUT)) why=''
  shift
  while ! why=$("$@"); do
    if [ $SECONDS -ge $deadline ]; then
      log "FAILED: $what within ${STEP_TIMEOUT} s: $why"
      exit 1
    fi
    sleep 0.2
  done
}

# controllers NAME: host controllers connected to member NAME's subsystems
controllers() {
  "$SLUICE" subsystem list -o json --socket "$(socket_of "$1")" 2>/dev/null |
    python3 -c 'import json, sys; print(sum(s.get("controllers", 0) for s in json.load(sys.stdin)["subsystems"]))'
}
# reconnected NAME COUNT: at least COUNT controllers on NAME
reconnected() {
  local now
  now=$(controllers "$1") || { echo "$1 does not answer"; return 1; }
  [ "$now" -ge "$2" ] || { echo "$now of $2 host controllers back"; return 1; }
}

other_than() { local member; for member in "${members[@]}"; do [ "$member" != "$1" ] && { echo "$member"; return; }; done; }
gone() { ! status_json "$1" >/dev/null; }

for member in "${members[@]}"; do
  peer=$(other_than "$member")
  wait_until "the group to be whole before stopping $member" whole "$peer"
  before=$(controllers "$member")
  log "draining $member ($before host controller(s) connected)"
  t0=$SECONDS
  if ! drained=$("$SLUICE" gateway drain "$member" --socket "$(socket_of "$peer")" 2>&1); then
    log "FAILED: draining $member: $drained"
    exit 1
  fi
  log "$drained"
  log "stopping $member"
  bash -c "${stop_cmd//%n/$member}"
  wait_until "$member to stop" gone "$member"
  wait_until "every ANA group optimized on another member than $member" whole "$peer" "$member"
  log "$member stopped; its groups are served by the others ($((SECONDS - t0)) s)"
  bash -c "${start_cmd//%n/$member}"
  wait_until "$member to serve again with the group" whole "$member"
  "$SLUICE" gateway undrain "$member" --socket "$(socket_of "$peer")" >/dev/null
  wait_until "the group to be whole again" whole "$peer"
  wait_until "the hosts to reconnect to $member" reconnected "$member" "$before"
  log "$member is back with its hosts ($((SECONDS - t0)) s in all)"
done
log "every member restarted"
