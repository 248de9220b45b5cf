#!/usr/bin/env bash
# What a C++ throw costs once dyni has registered a cache's unwind tables
# with the target's libgcc (__register_frame): from then on every
# _Unwind_Find_FDE takes libgcc's object_mutex and searches the registered
# objects before the lock-free _dl_find_object path.
#
# Two copies of dyni-bench-throw run side by side (one thread each); only
# the first is dynimized (dyni-inject). Each phase prints the first's
# exceptions per second over the second's, so machine drift cancels:
#   before    neither touched (calibration, ideally 1.00)
#   dynimized frames registered, the throwing functions run as copies
#   undone    frames still registered, the original code runs again
#   redone    copies again
#
#   sudo bench/throw_cost.sh [PHASE_SECONDS=4] [BUILD_DIR=build] [THREADS=1]
set -euo pipefail
PHASE=${1:-4}
BUILD=${2:-build}
THREADS=${3:-1}
HERE=$(cd "$(dirname "$0")/.." && pwd)
[ -d "$BUILD" ] || BUILD=$HERE/$BUILD
BENCH=$BUILD/bench/dyni-bench-throw
INJECT=$BUILD/tools/dyni-inject/dyni-inject
OUT=$(mktemp -d)
trap 'kill $A $B 2>/dev/null || true; rm -rf "$OUT"' EXIT

"$BENCH" "$THREADS" >"$OUT/a" & A=$!
"$BENCH" "$THREADS" >"$OUT/b" & B=$!
sleep 1

# Mean rate of file $1 over the lines printed during the next $PHASE seconds.
rates() {
  local na nb
  na=$(wc -l <"$OUT/a"); nb=$(wc -l <"$OUT/b")
  sleep "$PHASE"
  local ra rb
  ra=$(tail -n +"$((na + 1))" "$OUT/a" | awk '{s += $2; n++} END {print (n ? s / n : 0)}')
  rb=$(tail -n +"$((nb + 1))" "$OUT/b" | awk '{s += $2; n++} END {print (n ? s / n : 0)}')
  awk -v a="$ra" -v b="$rb" -v p="$1" 'BEGIN { printf "%-10s %10.0f %10.0f   %.3f\n", p, a, b, (b > 0 ? a / b : 0) }'
}

echo "phase       throws/s   control/s  ratio"
rates before
coproc INJ { "$INJECT" "$A" 2 --commands 2>/dev/null; }
read -r summary <&"${INJ[0]}"
echo "# $summary"
# "0 entries patched": a process dynimized before (its entries already hold a
# jump) would be measured against itself. Restart it.
[[ "$summary" == *patched* && "$summary" != *" 0 entries patched"* ]] ||
  { echo "injection failed or patched nothing (a process injected before? restart it): $summary"; exit 1; }
rates dynimized
echo undo >&"${INJ[1]}"; read -r answer <&"${INJ[0]}"
rates undone
echo redo >&"${INJ[1]}"; read -r answer <&"${INJ[0]}"
rates redone
echo quit >&"${INJ[1]}"
grep -m1 'model name' /proc/cpuinfo | sed 's/^/# /'
