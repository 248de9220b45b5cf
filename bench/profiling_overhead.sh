#!/usr/bin/env bash
# Cost of dyni's profiler on mariadbd under sysbench oltp_read_only, measured
# side by side: blocks of WINDOW seconds in ABBA order, A = sysbench alone,
# B = sysbench while dyni's sampler (dyni-bench-sampler, the same code as
# dynid's profiler) samples mariadbd. Prints each block's TPS and mariadbd's
# CPU time per transaction (steadier than TPS on this host: sampling
# interrupts are charged to the process they interrupt), the paired ratios
# B/A per ABBA group with mean and 95 % CI, and the sampler's CPU and RSS.
#
#   sudo bench/profiling_overhead.sh [GROUPS=6] [WINDOW=10] [BUILD_DIR=build]
# PROBE_ARGS (default "500", dynid's default rate) picks the sampler's mode:
#   HZ [per-cpu|per-thread [callchains|no-callchains]]
set -euo pipefail
GROUPS_N=${1:-6} WINDOW=${2:-10}
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${3:-$SRC/build}
PROBE=$BUILD/bench/dyni-bench-sampler
DB="$SRC/bench/mariadb.sh"
[ -x "$PROBE" ] || { echo "build first: $PROBE missing" >&2; exit 1; }

"$DB" start >/dev/null
"$DB" prepare >/dev/null
PID=$(cat "${DYNI_MARIADB_DIR:-/var/tmp/dyni-mariadb}/mysqld.pid")
"$DB" run 10 2 >/dev/null  # warm up

# mariadbd's utime+stime in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$PID/stat"; }

# One window: prints "TPS CPU-microseconds-per-transaction".
window() {
  local c0 c1 tps
  c0=$(cpu_ticks)
  tps=$("$DB" run "$WINDOW" 2 | awk '{print $1}')
  c1=$(cpu_ticks)
  awk -v t="$tps" -v c="$((c1 - c0))" -v w="$WINDOW" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "%s %.1f\n", t, c / hz * 1e6 / (t * w) }'
}

run_a() { window; }
run_b() {
  # PROBE_ARGS: HZ [per-cpu|per-thread [callchains|no-callchains]], to compare modes.
  # The probe reads mariadbd's symbols first (~0.3 s of CPU, once per profile
  # in dynid); let that finish before the window so only sampling is measured.
  "$PROBE" "$PID" "$((WINDOW + 2))" ${PROBE_ARGS:-500} > /tmp/dyni-probe.json &
  local probe=$!
  sleep 1.5
  window
  wait "$probe"
  cat /tmp/dyni-probe.json >&2
}

ratios=() cpu_ratios=()
for g in $(seq 1 "$GROUPS_N"); do
  read -r a1 ca1 < <(run_a); read -r b1 cb1 < <(run_b 2>>/tmp/dyni-probe.all)
  read -r b2 cb2 < <(run_b 2>>/tmp/dyni-probe.all); read -r a2 ca2 < <(run_a)
  r=$(awk -v a1="$a1" -v a2="$a2" -v b1="$b1" -v b2="$b2" 'BEGIN{printf "%.4f", (b1+b2)/(a1+a2)}')
  c=$(awk -v a1="$ca1" -v a2="$ca2" -v b1="$cb1" -v b2="$cb2" 'BEGIN{printf "%.4f", (b1+b2)/(a1+a2)}')
  ratios+=("$r") cpu_ratios+=("$c")
  echo "group $g: TPS A $a1 / B $b1 / B $b2 / A $a2  ratio B/A $r;  CPU us/tx A $ca1 / B $cb1 / B $cb2 / A $ca2  ratio B/A $c"
done
summary() {  # NAME, then the ratios
  local name=$1; shift
  printf '%s\n' "$@" | awk -v name="$name" '{s+=$1; ss+=$1*$1; n++} END {
    m=s/n; sd=sqrt((ss-n*m*m)/(n-1)); h=2.571*sd/sqrt(n); if (n>6) h=2.0*sd/sqrt(n)
    printf "profiling/plain %s ratio: %.4f  (95%% CI %.4f .. %.4f, %d groups)\n", name, m, m-h, m+h, n }'
}
summary "TPS" "${ratios[@]}"
summary "CPU per transaction" "${cpu_ratios[@]}"
awk -F'[:,}]' '{for(i=1;i<=NF;i++){if($i~/cpu_percent_of_core/)c+=$(i+1); if($i~/max_rss_mb/){r=($(i+1)>r)?$(i+1):r}} n++}
  END {printf "sampler: %.2f %% of a core on average, peak RSS %.1f MB (%d windows)\n", c/n, r, n}' /tmp/dyni-probe.all
rm -f /tmp/dyni-probe.all /tmp/dyni-probe.json
