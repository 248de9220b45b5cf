#!/usr/bin/env bash
# An interpreter's speed dynimized, measured side by side: two copies of the
# same interpreter run the same CPU-bound script (one checksum line per
# round), one per core; dyni-inject profiles and injects one of them (B),
# the other stays original (A). Then, per window, rounds per CPU second of
# each (CPU time from /proc, so the other core's load does not count), and
# the ratio B/A. A pair is started afresh for each repetition, the roles
# swapped (the first-started process is B in odd pairs), so that neither
# core nor start order favours one side.
#
# Interpreter loops that switch through jump tables now stay in the cache
# (issue 12): this shows what that is worth.
#
#   bench/interpreter_ab.sh PROGRAM [PAIRS=2] [WINDOWS=4] [WINDOW_SECONDS=5] [BUILD_DIR=build]
#   PROGRAM: python3 | gawk | mawk | php | perl
# Do not run it beside builds, CI or scans: both cores are measured.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$HERE/..
PROGRAM=${1:?usage: bench/interpreter_ab.sh python3|gawk|mawk|php|perl [PAIRS] [WINDOWS] [WINDOW_SECONDS] [BUILD_DIR]}
PAIRS=${2:-2} WINDOWS=${3:-4} WINDOW=${4:-5} BUILD=${5:-build}
source "$HERE/interpreter_env.sh"
[ ${#FEED[@]} -eq 0 ] || { echo "interpreter_ab.sh: $PROGRAM reads its work on stdin; use interpreter_abba.sh" >&2; exit 2; }
TICKS=$(getconf CLK_TCK)
WORK=$(mktemp -d /tmp/dyni-interp-ab.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
lines() { wc -l < "$1"; }

echo "pair  window  rounds/CPU-s A  rounds/CPU-s B  B/A   ($PROGRAM; B = dynimized)"
all=()
for pair in $(seq 1 "$PAIRS"); do
  "${CMD[@]}" > "$WORK/first.$pair" 2>&1 & first=$!
  "${CMD[@]}" > "$WORK/second.$pair" 2>&1 & second=$!
  PIDS+=("$first" "$second")
  if [ $((pair % 2)) -eq 1 ]; then a=$second; b=$first; oa=$WORK/second.$pair; ob=$WORK/first.$pair
  else a=$first; b=$second; oa=$WORK/first.$pair; ob=$WORK/second.$pair; fi
  sleep 1
  report=$("$INJECT" "$b" 6 2>&1 | tail -3)
  grep -q "entries patched" <<< "$report" || { echo "dyni-inject did not patch: $report" >&2; exit 1; }
  patched=$(sed -n 's/.* \([0-9]*\) entries patched.*/\1/p' <<< "$report" | tail -1)
  [ "${patched:-0}" -gt 0 ] || { echo "dyni-inject patched 0 entries: $report" >&2; exit 1; }
  sleep 1
  for w in $(seq 1 "$WINDOWS"); do
    la=$(lines "$oa"); lb=$(lines "$ob"); ca=$(cpu_ticks "$a"); cb=$(cpu_ticks "$b")
    sleep "$WINDOW"
    la=$(($(lines "$oa") - la)); lb=$(($(lines "$ob") - lb))
    ca=$(($(cpu_ticks "$a") - ca)); cb=$(($(cpu_ticks "$b") - cb))
    ra=$(awk -v l="$la" -v c="$ca" -v t="$TICKS" 'BEGIN { printf "%.3f", (c ? l * t / c : 0) }')
    rb=$(awk -v l="$lb" -v c="$cb" -v t="$TICKS" 'BEGIN { printf "%.3f", (c ? l * t / c : 0) }')
    r=$(awk -v a="$ra" -v b="$rb" 'BEGIN { printf "%.3f", (a > 0 ? b / a : 0) }')
    printf "%4d  %6d  %14s  %14s  %s\n" "$pair" "$w" "$ra" "$rb" "$r"
    all+=("$r")
  done
  kill "$first" "$second" 2>/dev/null || true; wait "$first" "$second" 2>/dev/null || true
  # Both must have printed the same checksum every round (the script's own
  # check); the last line may be cut by the kill.
  for f in "$oa" "$ob"; do
    [ "$(head -n -1 "$f" | sort -u | wc -l)" -le 1 ] || { echo "WRONG: $f holds different checksums" >&2; exit 3; }
  done
done
printf '%s\n' "${all[@]}" | sort -n | awk '{ v[NR] = $1; s += $1 } END {
  printf "median B/A %.3f, mean %.3f, range %.3f-%.3f over %d windows (above 1: dynimized is faster)\n",
         (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), s / NR, v[1], v[NR], NR }'
