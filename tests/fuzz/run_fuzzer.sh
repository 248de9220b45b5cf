#!/usr/bin/env bash
# Short fuzz run for the test suite: seeds are real binaries (small ones, and
# the headers of large ones); fails on any crash, sanitizer report or trap.
#   run_fuzzer.sh FUZZER SECONDS SEED_FILE...
# Longer runs: FUZZER -max_len=262144 CORPUS_DIR (see README.md, "Fuzzing").
set -euo pipefail
fuzzer=$1 seconds=$2; shift 2
work=$(mktemp -d /tmp/dyni-fuzz-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
for seed in "$@"; do
  head -c 262144 "$seed" > "$work/corpus/$(basename "$seed")"
done
cd "$work"
"$fuzzer" -max_total_time="$seconds" -max_len=262144 -seed=1 -print_final_stats=1 corpus 2>&1 | tail -20
