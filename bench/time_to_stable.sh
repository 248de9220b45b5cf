#!/usr/bin/env bash
# How long dynid's profiler takes to call mariadbd's hot set stable under
# sysbench oltp_read_only (issue 3 goal: <= 10 s), RUNS times.
#   bench/time_to_stable.sh [RUNS=5] [HZ=250] [BUILD_DIR=build]
set -euo pipefail
RUNS=${1:-5} HZ=${2:-250}
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${3:-$SRC/build}
DB="$SRC/bench/mariadb.sh"
"$DB" start >/dev/null
"$DB" prepare >/dev/null
PID=$(cat "${DYNI_MARIADB_DIR:-/var/tmp/dyni-mariadb}/mysqld.pid")
for i in $(seq 1 "$RUNS"); do
  "$DB" run 45 2 >/dev/null &
  sleep 3
  "$BUILD/bench/dyni-bench-profile" "$PID" "$HZ" 2>/dev/null
  wait
done
