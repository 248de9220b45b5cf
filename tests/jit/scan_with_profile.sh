#!/usr/bin/env bash
# The jit on a real profile (issue 4, item 7): a private mariadbd under
# sysbench oltp_read_only is sampled by dyni-record, then dyni-scan runs the
# whole pipeline on that profile. Passes when >= 98 % of the sampled CPU in
# mariadbd's functions is accepted, >= 95 % stays in the cache (issue 12) and
# the verifier finds nothing (dyni-scan exits 1 on any verifier failure). Skips (exit 77) when a tool is missing.
#   tests/jit/scan_with_profile.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$1 SRC=$2
for tool in mariadbd sysbench; do
  command -v $tool >/dev/null || { echo "SKIP: $tool not installed (apt-get install mariadb-server sysbench)"; exit 77; }
done
WORK=$(mktemp -d /var/tmp/dyni-scan-profile.XXXXXX)
export DYNI_MARIADB_DIR=$WORK/mariadb DYNI_MARIADB_PORT=3318
cleanup() { "$SRC/bench/mariadb.sh" stop >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT
"$SRC/bench/mariadb.sh" start >/dev/null
"$SRC/bench/mariadb.sh" prepare >/dev/null
"$SRC/bench/mariadb.sh" run 16 2 >/dev/null &
sleep 3
pid=$(cat "$DYNI_MARIADB_DIR/mysqld.pid")
"$BUILD/tools/dyni-record/dyni-record" "$pid" 10 "$WORK/profile.json" --module mariadbd
wait
"$BUILD/tools/dyni-scan/dyni-scan" "$(readlink -f /proc/$pid/exe)" --profile "$WORK/profile.json" --leaving |
  tee "$WORK/scan.txt"
accepted=$(sed -n 's/.*accepted [0-9]* (\([0-9.]*\)% of sampled CPU).*/\1/p' "$WORK/scan.txt")
staying=$(sed -n 's/.*staying in the cache [0-9]* (\([0-9.]*\)% of sampled CPU).*/\1/p' "$WORK/scan.txt")
echo "mariadbd: accepted $accepted % (at least 98), staying $staying % (at least 95)"
awk -v a="$accepted" -v s="$staying" 'BEGIN { exit !(a != "" && s != "" && a >= 98.0 && s >= 95.0) }'
