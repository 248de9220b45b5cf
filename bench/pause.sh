#!/usr/bin/env bash
# How long injection stops a target's threads: the longest patch window
# (and its phases) for a target with 100 busy threads, and for mariadbd
# under sysbench oltp_read_only; also the time from the first sample to the
# last entry patched. Goals (issue 11): <= 20 ms with 100 threads, <= 10 ms
# for mariadbd.
#
#   bench/pause.sh [ROUNDS=3] [BUILD_DIR=build]
# mariadbd: a private one (bench/mariadb.sh start && bench/mariadb.sh prepare
# with the same DYNI_MARIADB_DIR / DYNI_MARIADB_PORT); skipped when none runs.
set -euo pipefail
ROUNDS=${1:-3}
BUILD=${2:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
INJECT=$HERE/../$BUILD/tools/dyni-inject/dyni-inject
HOT=$HERE/../$BUILD/tests/programs/dyni-test-hot
DIR=${DYNI_MARIADB_DIR:-/var/tmp/dyni-mariadb}
PORT=${DYNI_MARIADB_PORT:-3307}
PROFILE_S=6

# One injection of PID, undone a second later: its summary and window lines.
inject_once() {
  local start end
  start=$(date +%s.%N)
  "$INJECT" "$1" "$PROFILE_S" --undo-after 1 2>&1 | grep -E 'longest patch window:|entries patched' | sed 's/^/    /'
  end=$(date +%s.%N)
  echo "    first sample to undone: $(echo "$end - $start" | bc) s (profile ${PROFILE_S} s, injection, 1 s dynimized)"
}

echo "== 100 busy threads (dyni-test-hot 100 workers)"
for r in $(seq 1 "$ROUNDS"); do
  # A fresh target each round: an injected one keeps its cache (I8).
  "$HOT" $((PROFILE_S + 20)) 100 & pid=$!
  sleep 1
  echo "  round $r"
  inject_once "$pid"
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
done

if [ -f "$DIR/mysqld.pid" ] && kill -0 "$(cat "$DIR/mysqld.pid")" 2>/dev/null; then
  echo "== mariadbd under sysbench oltp_read_only, 2 threads"
  sysbench oltp_read_only --db-driver=mysql --mysql-host=127.0.0.1 --mysql-port="$PORT" --mysql-user=sbtest \
    --mysql-password=sbtest --mysql-db=sbtest --tables=4 --table-size=100000 --threads=2 \
    --time=$(( (PROFILE_S + 6) * ROUNDS + 10 )) run >/dev/null 2>&1 &
  sb=$!
  sleep 2
  for r in $(seq 1 "$ROUNDS"); do
    echo "  round $r (each round maps one more cache: the earlier ones stay, I8)"
    inject_once "$(cat "$DIR/mysqld.pid")"
  done
  kill "$sb" 2>/dev/null || true
else
  echo "== mariadbd: none running in $DIR (bench/mariadb.sh start && bench/mariadb.sh prepare)"
fi
