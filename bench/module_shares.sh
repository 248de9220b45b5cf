#!/usr/bin/env bash
# How much of a program's CPU runs in dyni's copies, module by module and in
# all (issue 22 item 6): a private dynid with [options] all_hot_modules =
# true dynimizes each PROGRAM running its CPU-bound script, then
# `dyni -profile=PID` prints its modules line (each module's share of the
# samples, and of all sampled CPU in its copies).
#
#   sudo bench/module_shares.sh [--build DIR] [PROGRAM...]
#
# PROGRAM: python3 gawk mawk php sqlite3 (interpreter_env.sh; default: all).
# It uses the host's license, like mariadb-sysbench.sh, and its own dynid
# (config, socket, state and log under /var/tmp/dyni-shares); it refuses to
# run beside another dynid.
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=""
WORK=${DYNI_SHARES_DIR:-/var/tmp/dyni-shares}
say() { echo "module-shares: $*" >&2; }
die() { echo "module-shares: $*" >&2; exit 1; }

PROGRAMS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=${2:?}; shift ;;
    --build=*) BUILD=${1#*=} ;;
    -h|--help) sed -n '9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    *) PROGRAMS+=("$1") ;;
  esac
  shift
done
[ ${#PROGRAMS[@]} -gt 0 ] || PROGRAMS=(python3 gawk mawk php sqlite3)
[ "$(id -u)" = 0 ] || die "run as root (dynid ptraces the programs)"
if [ -n "$BUILD" ]; then DYNI=$(cd "$BUILD" && pwd)/dyni-cli/dyni; else DYNI=$(command -v dyni || true); fi
[ -x "$DYNI" ] || die "no dyni CLI (install dyni, or give --build DIR)"
dynids=$(pgrep -x dynid | tr '\n' ' ' || true)
[ -z "$dynids" ] || die "dynid already runs (pid $dynids): stop it first (sudo dyni -stop)"

HOST_CONFIG=${DYNI_CONFIG:-/etc/dyni.conf}
HOST_STATE=${DYNI_STATE_DIR:-/var/lib/dyni}
[ -f "$HOST_STATE/license.json" ] ||
  die "this host has no dyni license ($HOST_STATE/license.json): bind one first (sudo dyni -license=start -token=TOKEN)"
public_key=$( [ -f "$HOST_CONFIG" ] && awk -F= '/^\[/ { s = $0 } s == "[license]" && $1 ~ /^ *public_key *$/ {
                gsub(/^ +| +$/, "", $2); sub(/ +;.*/, "", $2); print $2 }' "$HOST_CONFIG" || true)
dyni() { DYNI_CONFIG=$WORK/dyni.conf DYNI_RUN_DIR=$WORK/run DYNI_STATE_DIR=$WORK/state "$DYNI" "$@"; }

state_of() {  # PID: its target state, or ""
  dyni -status -json 2>/dev/null | python3 -c '
import json, sys
for t in json.load(sys.stdin).get("targets", []):
    if t.get("pid") == int(sys.argv[1]): print(t.get("state", ""))' "$1"
}

for PROGRAM in "${PROGRAMS[@]}"; do
  rm -rf "$WORK" && mkdir -p "$WORK/run" "$WORK/state" && chmod 0700 "$WORK/state"
  cp "$HOST_STATE/license.json" "$WORK/state/license.json"
  unset DYNI_MODULE
  # shellcheck source=bench/interpreter_env.sh
  BUILD=${BUILD:-build} source "$SRC/bench/interpreter_env.sh"
  exe=${EXE:-${CMD[0]}}
  [ "${CMD[0]}" != /usr/bin/stdbuf ] || exe=${CMD[2]}
  cat > "$WORK/dyni.conf" <<CONF
; written by bench/module_shares.sh
[exeList]
$(basename "$(readlink -f "$exe")")
[options]
log_file = $WORK/dynid.log
metrics_textfile =
all_hot_modules = true
[license]
$([ -n "$public_key" ] && echo "public_key = $public_key")
CONF
  if [ ${#FEED[@]} -gt 0 ]; then "${FEED[@]}" | "${CMD[@]}" >/dev/null 2>&1 & else "${CMD[@]}" >/dev/null 2>&1 & fi
  job=$!
  sleep 1
  pid=$(pgrep -n -x "$(basename "$(readlink -f "$exe")" | cut -c1-15)" || true)
  [ -n "$pid" ] || die "$PROGRAM did not start"
  dyni -start >/dev/null || die "dyni -start failed: $(tail -3 "$WORK/dynid.log" 2>/dev/null)"
  state=""
  for _ in $(seq 1 120); do
    state=$(state_of "$pid")
    case $state in dynimized|failed|unsupported) break ;; esac
    sleep 1
  done
  line=$(dyni -profile="$pid" 2>/dev/null | grep '^modules:' || true)
  printf '%-8s %-11s %s\n' "$PROGRAM" "$state" "${line:-no modules line (see $WORK/dynid.log)}"
  grep -E 'dynimized .* too|not optimized' "$WORK/dynid.log" | sed 's/^/           /' || true
  dyni -stop >/dev/null 2>&1 || true
  pkill -P "$job" 2>/dev/null || true
  kill "$job" "$pid" 2>/dev/null || true
  wait "$job" 2>/dev/null || true
done
