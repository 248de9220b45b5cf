#!/usr/bin/env bash
# CPU time of the whole jit for mariadbd's hot set (issue 4 goal: <= 1 s).
# Records a profile of the benchmark mariadbd under sysbench (bench/mariadb.sh,
# port 3307) with dyni-record unless one is given, then runs dyni-bench-jit.
#   bench/jit_speed.sh [BUILD_DIR] [PROFILE.json]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${1:-$HERE/../build}
PROFILE=${2:-}
if [[ -z $PROFILE ]]; then
  PROFILE=$(mktemp /tmp/dyni-mariadbd-profile.XXXXXX.json)
  "$HERE/mariadb.sh" start >/dev/null
  "$HERE/mariadb.sh" prepare >/dev/null
  "$HERE/mariadb.sh" run 15 2 >/dev/null &
  sleep 3
  DIR=${DYNI_MARIADB_DIR:-/var/tmp/dyni-mariadb}
  "$BUILD/tools/dyni-record/dyni-record" "$(cat "$DIR/mysqld.pid")" 10 "$PROFILE" --module mariadbd
  wait
fi
"$BUILD/bench/dyni-bench-jit" /usr/sbin/mariadbd "$PROFILE"
