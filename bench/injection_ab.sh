#!/usr/bin/env bash
# Live injection's effect on mariadbd under sysbench oltp_read_only, measured
# side by side on one process: dyni-inject profiles and injects once, then
# the entries are undone and redone in ABBA blocks while sysbench runs. Per
# block: queries per second, mariadbd's CPU time per query, and its user CPU
# time per query (dyni changes only user code; the kernel's share, loopback
# TCP, is noise to it); printed as ratios dynimized/original per ABBA group,
# then their means with a 95 % interval. Many short blocks (30 groups of 2 s)
# cancel the host's drift better than a few long ones.
# Experiments: DYNI_ENTRIES=differs, DYNI_NEAR_BRANCHES=1, DYNI_ORIGINAL_ORDER,
# DYNI_HOT_FRACTION, DYNI_EXPERIMENT_VTABLES (tools/dyni-inject/main.cpp).
#
#   bench/injection_ab.sh [GROUPS=6] [BLOCK_SECONDS=10] [BUILD_DIR=build]
# Needs a private mariadbd (bench/mariadb.sh start && bench/mariadb.sh prepare).
set -euo pipefail
GROUPS_N=${1:-6}
BLOCK=${2:-10}
BUILD=${3:-build}
source "$(dirname "$0")/mariadb_env.sh"
TICKS=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
user_ticks() { awk '{print $14}' "/proc/$PID/stat"; }  # dyni changes only user code

# Each block also waits 1 s after its undo/redo, and the stop window and
# the status queries take a little more: sysbench must outlast them all.
total=$(( (GROUPS_N * 4 + 3) * (BLOCK + 2) + 30 ))
sysbench oltp_read_only --db-driver=mysql --mysql-host=127.0.0.1 --mysql-port="$PORT" --mysql-user=sbtest \
  --mysql-password=sbtest --mysql-db=sbtest --tables=4 --table-size=100000 --threads=2 --time="$total" run \
  >/tmp/injection_ab.sysbench 2>&1 &
SB=$!
trap 'kill $SB 2>/dev/null || true' EXIT
sleep 3
coproc INJ { "$INJECT" "$PID" 8 --commands; }
read -r summary <&"${INJ[0]}"
echo "$summary"
# "0 entries patched": a process dynimized before (its entries already hold a
# jump) would be measured against itself. Restart it.
[[ "$summary" == *patched* && "$summary" != *" 0 entries patched"* ]] ||
  { echo "injection failed or patched nothing (a process injected before? restart it): $summary"; exit 1; }

# One block in state $1 (A: original, B: dynimized): "qps cpu_us_per_query user_us_per_query".
block() {
  echo "$([ "$1" = A ] && echo undo || echo redo)" >&"${INJ[1]}"
  read -r answer <&"${INJ[0]}"
  [ "$answer" = ok ] || { echo "dyni-inject: $answer" >&2; exit 1; }
  sleep 1
  local q0 c0 u0 q1 c1 u1
  q0=$(questions); c0=$(cpu_ticks); u0=$(user_ticks)
  sleep "$BLOCK"
  q1=$(questions); c1=$(cpu_ticks); u1=$(user_ticks)
  [ "$q1" -gt "$q0" ] || { echo "no query answered in a block (sysbench ended?)" >&2; exit 1; }
  awk -v q=$((q1 - q0)) -v c=$((c1 - c0)) -v u=$((u1 - u0)) -v s="$BLOCK" -v t="$TICKS" \
    'BEGIN { printf "%.1f %.1f %.1f\n", q / s, (q > 0 ? c / t * 1e6 / q : 0), (q > 0 ? u / t * 1e6 / q : 0) }'
}

echo "group  qps B/A  cpu-per-query B/A  user-cpu-per-query B/A"
RATIOS=$(mktemp /tmp/injection_ab.XXXXXX)
for g in $(seq 1 "$GROUPS_N"); do
  order=$([ $((g % 2)) -eq 1 ] && echo "A B B A" || echo "B A A B")
  qa=0; qb=0; ca=0; cb=0; ua=0; ub=0
  for s in $order; do
    read -r q c u < <(block "$s") || true
    [ -n "$q" ] || { echo "injection_ab: a block measured nothing" >&2; exit 1; }
    if [ "$s" = A ]; then qa=$(echo "$qa + $q" | bc -l); ca=$(echo "$ca + $c" | bc -l); ua=$(echo "$ua + $u" | bc -l)
    else qb=$(echo "$qb + $q" | bc -l); cb=$(echo "$cb + $c" | bc -l); ub=$(echo "$ub + $u" | bc -l); fi
  done
  printf "%5d  %7.3f  %7.3f  %7.3f\n" "$g" "$(echo "$qb / $qa" | bc -l)" "$(echo "$cb / $ca" | bc -l)" \
    "$(echo "$ub / $ua" | bc -l)" | tee -a "$RATIOS"
done
# Mean of each column and its 95 % interval (normal approximation over the groups).
awk '{ for (i = 2; i <= 4; ++i) { s[i] += $i; ss[i] += $i * $i } n++ }
     END { line = "mean "; ci = "95 % "
           for (i = 2; i <= 4; ++i) { m = s[i] / n; sd = n > 1 ? sqrt((ss[i] - n * m * m) / (n - 1)) : 0
                                      line = line sprintf("  %7.3f", m); ci = ci sprintf("  ±%6.3f", 1.96 * sd / sqrt(n)) }
           print line "   (B = dynimized, A = original; CPU per query below 1 is better)"; print ci }' "$RATIOS"
rm -f "$RATIOS"
echo quit >&"${INJ[1]}"
