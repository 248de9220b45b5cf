#!/usr/bin/env bash
# What the counting phase costs mariadbd while it runs, and how long it
# takes (issue 19: goal <= 5 s at >= 0.7 of the original QPS). sysbench
# oltp_read_only runs throughout; the server's Questions counter is read
# once a second. dyni-inject profiles for 8 s, runs counting copies for
# COUNT_SECONDS (DYNI_COUNTING), then injects the code laid out by the
# counts. Printed: QPS before (5 s before dyni-inject starts), while counting
# (from the counting entries patched to their counters turned off, the
# switch included), and after (10 s on the optimized code), each as a
# ratio to before, and the server's CPU per query (utime + stime) the same
# way, which is steadier. A single run on a noisy host: run it several times. It
# leaves the server dynimized: restart it (bench/mariadb.sh stop, start)
# before the next run.
#
#   [THREADS=2] bench/counting_cost.sh [COUNT_SECONDS=5] [BUILD_DIR=build]
# Needs a private mariadbd (bench/mariadb.sh start && bench/mariadb.sh prepare).
set -euo pipefail
COUNT=${1:-5}
BUILD=${2:-build}
source "$(dirname "$0")/mariadb_env.sh"
LOG=$(mktemp /tmp/counting_cost.XXXXXX)
trap 'rm -f "$LOG"; kill $SB 2>/dev/null || true' EXIT

cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; }  # the server's utime + stime, in ticks
now() { date +%s.%N; }

sysbench oltp_read_only --db-driver=mysql --mysql-host=127.0.0.1 --mysql-port="$PORT" --mysql-user=sbtest \
  --mysql-password=sbtest --mysql-db=sbtest --tables=4 --table-size=100000 --threads="${THREADS:-2}" --time=$((COUNT + 80)) run \
  >/dev/null 2>&1 &
SB=$!
sleep 15  # a freshly started server warms up for about that long
t0=$(now); q0=$(questions); c0=$(cpu)
sleep 5
t1=$(now); q1=$(questions); c1=$(cpu)
DYNI_COUNTING=$COUNT "$INJECT" "$PID" 8 >/dev/null 2>"$LOG" &
INJ=$!
until grep -q "counting: .* entries patched" "$LOG"; do sleep 0.05; kill -0 $INJ 2>/dev/null || { cat "$LOG"; exit 1; }; done
t2=$(now); q2=$(questions); c2=$(cpu)
until grep -q "counter sites turned off\|counters not turned off" "$LOG"; do sleep 0.05; kill -0 $INJ 2>/dev/null || { cat "$LOG"; exit 1; }; done
t3=$(now); q3=$(questions); c3=$(cpu)
wait $INJ || true
sleep 1
t4=$(now); q4=$(questions); c4=$(cpu)
sleep 10
t5=$(now); q5=$(questions); c5=$(cpu)
grep "counting:" "$LOG" | sed 's/^/  /'
awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" -v e="$t4" -v f="$t5" \
    -v qa="$q0" -v qb="$q1" -v qc="$q2" -v qd="$q3" -v qe="$q4" -v qf="$q5" \
    -v ca="$c0" -v cb="$c1" -v cc="$c2" -v cd="$c3" -v ce="$c4" -v cf="$c5" 'BEGIN {
  before = (qb - qa) / (b - a); counting = (qd - qc) / (d - c); after = (qf - qe) / (f - e)
  printf "QPS before %.0f; while counting %.0f (x%.3f, %.1f s); after, laid out by counts %.0f (x%.3f)\n",
         before, counting, counting / before, d - c, after, after / before
  cpu_before = (cb - ca) / (qb - qa); cpu_counting = (cd - cc) / (qd - qc); cpu_after = (cf - ce) / (qf - qe)
  printf "CPU per query while counting x%.3f, after x%.3f (against before)\n", cpu_counting / cpu_before, cpu_after / cpu_before }'
