#!/usr/bin/env bash
# An interpreter's speed dynimized, measured as the database is: one process
# runs a CPU-bound script (one checksum line per round), dyni-inject profiles
# and injects it once (with DYNI_COUNTING=SECONDS, counting copies first and
# the layout by their counts), then its entries are undone and redone in
# ABBA groups on that one process. Per block: rounds per second and rounds
# per user CPU second (dyni changes only user code); printed as ratios
# dynimized/original per group, then their means with a 95 % interval.
#
#   bench/interpreter_abba.sh PROGRAM [GROUPS=8] [BLOCK_SECONDS=4] [BUILD_DIR=build]
#   PROGRAM: python3 | gawk | mawk | php | perl | sqlite3 (sqlite3:
#   its library, libsqlite3, is the module copied)
# Do not run it beside builds, CI or scans: the other core's load moves the figures.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$HERE/..
PROGRAM=${1:?usage: bench/interpreter_abba.sh python3|gawk|mawk|php|perl|sqlite3 [GROUPS] [BLOCK_SECONDS] [BUILD_DIR]}
GROUPS_N=${2:-8} BLOCK=${3:-4} BUILD=${4:-build}
source "$HERE/interpreter_env.sh"
command -v bc >/dev/null || { echo "needs bc: apt-get install bc" >&2; exit 2; }
TICKS=$(getconf CLK_TCK)
OUT=$(mktemp /tmp/dyni-interp-abba.XXXXXX)
RATIOS=$(mktemp /tmp/dyni-interp-abba-ratios.XXXXXX)
if [ ${#FEED[@]} -gt 0 ]; then "${FEED[@]}" | "${CMD[@]}" > "$OUT" 2>&1 & else "${CMD[@]}" > "$OUT" 2>&1 & fi
PID=$!  # a pipeline's last command: the program
cleanup() { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; rm -f "$OUT" "$RATIOS"; }
trap cleanup EXIT
sleep 1
coproc INJ { "$INJECT" "$PID" 8 --commands; }
summary=""
read -r summary <&"${INJ[0]}" || true  # dyni-inject failed before its first line: said below
echo "$summary"
[[ "$summary" == *patched* && "$summary" != *" 0 entries patched"* ]] ||
  { echo "injection failed or patched nothing: $summary" >&2; exit 1; }

user_ticks() { awk '{ print $14 }' "/proc/$PID/stat"; }
now() { date +%s.%N; }
# One block in state $1 (A: original, B: dynimized): "rounds_per_s rounds_per_user_cpu_s".
block() {
  echo "$([ "$1" = A ] && echo undo || echo redo)" >&"${INJ[1]}"
  read -r answer <&"${INJ[0]}"
  [ "$answer" = ok ] || { echo "dyni-inject: $answer" >&2; exit 1; }
  sleep 1
  local l0 u0 t0 l1 u1 t1
  l0=$(wc -l < "$OUT"); u0=$(user_ticks); t0=$(now)
  sleep "$BLOCK"
  l1=$(wc -l < "$OUT"); u1=$(user_ticks); t1=$(now)
  awk -v l=$((l1 - l0)) -v u=$((u1 - u0)) -v a="$t0" -v b="$t1" -v t="$TICKS" \
    'BEGIN { printf "%.3f %.3f\n", l / (b - a), (u > 0 ? l * t / u : 0) }'
}

echo "group  rounds/s B/A  rounds per user CPU second B/A   ($PROGRAM; B = dynimized)"
for g in $(seq 1 "$GROUPS_N"); do
  order=$([ $((g % 2)) -eq 1 ] && echo "A B B A" || echo "B A A B")
  ra=0; rb=0; ca=0; cb=0
  for s in $order; do
    read -r r c < <(block "$s") || true
    awk -v x="${r:-0}" 'BEGIN { exit !(x > 0) }' || { echo "interpreter_abba: a block ran no round" >&2; exit 1; }
    if [ "$s" = A ]; then ra=$(echo "$ra + $r" | bc -l); ca=$(echo "$ca + $c" | bc -l)
    else rb=$(echo "$rb + $r" | bc -l); cb=$(echo "$cb + $c" | bc -l); fi
  done
  printf "%5d  %7.3f  %7.3f\n" "$g" "$(echo "$rb / $ra" | bc -l)" "$(echo "$cb / $ca" | bc -l)" | tee -a "$RATIOS"
done
echo quit >&"${INJ[1]}"
# The script's own check: one checksum, the same every round (the last line may be cut).
[ "$(head -n -1 "$OUT" | sort -u | wc -l)" -le 1 ] || { echo "WRONG: the rounds' checksums differ" >&2; exit 3; }
awk '{ for (i = 2; i <= 3; ++i) { s[i] += $i; ss[i] += $i * $i } n++ }
     END { line = "mean "; ci = "95 % "
           for (i = 2; i <= 3; ++i) { m = s[i] / n; sd = n > 1 ? sqrt((ss[i] - n * m * m) / (n - 1)) : 0
                                      line = line sprintf("  %7.3f", m); ci = ci sprintf("  ±%6.3f", 1.96 * sd / sqrt(n)) }
           print line "   (B = dynimized, A = original; above 1 is faster)"; print ci }' "$RATIOS"
