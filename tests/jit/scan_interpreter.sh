#!/usr/bin/env bash
# The jit on a live interpreter's profile (issue 12, item 3): a Debian
# interpreter runs its CPU-bound script from tests/programs/scripts,
# dyni-record samples it, and dyni-scan runs the whole pipeline on that
# profile. Passes when the sampled CPU accepted and staying in the cache
# reach the given shares and the verifier finds nothing (dyni-scan exits 1
# on any verifier failure). Skips (exit 77) when the interpreter is missing.
#   tests/jit/scan_interpreter.sh BUILD_DIR SOURCE_DIR PROGRAM MIN_ACCEPTED MIN_STAYING
#   PROGRAM: python3 | gawk | mawk | perl
set -euo pipefail
BUILD=$1 SRC=$2 PROGRAM=$3 MIN_ACCEPTED=$4 MIN_STAYING=$5
S=$SRC/tests/programs/scripts
case $PROGRAM in
  python3) CMD=(/usr/bin/python3.11 -u "$S/work.py" 0) PACKAGE=python3.11 ;;
  gawk) CMD=(/usr/bin/gawk -v rounds=0 -f "$S/work.awk") PACKAGE=gawk ;;
  mawk) CMD=(/usr/bin/mawk -v rounds=0 -f "$S/work_posix.awk") PACKAGE=mawk ;;
  perl) CMD=(/usr/bin/perl "$S/work.pl" 0) PACKAGE=perl-base ;;
  *) echo "unknown program $PROGRAM" >&2; exit 2 ;;
esac
[ -x "${CMD[0]}" ] || { echo "SKIP: ${CMD[0]} not installed (apt-get install $PACKAGE)"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: dyni-record needs root (perf_event on another process)"; exit 77; }
WORK=$(mktemp -d /var/tmp/dyni-scan-interpreter.XXXXXX)
pid=
cleanup() { [ -z "$pid" ] || kill "$pid" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
"${CMD[@]}" >/dev/null &
pid=$!
sleep 1
exe=$(readlink -f "/proc/$pid/exe")
"$BUILD/tools/dyni-record/dyni-record" "$pid" 6 "$WORK/profile.json" --module "$(basename "$exe")"
"$BUILD/tools/dyni-scan/dyni-scan" "$exe" --profile "$WORK/profile.json" --leaving | tee "$WORK/scan.txt"
accepted=$(sed -n 's/.*accepted [0-9]* (\([0-9.]*\)% of sampled CPU).*/\1/p' "$WORK/scan.txt")
staying=$(sed -n 's/.*staying in the cache [0-9]* (\([0-9.]*\)% of sampled CPU).*/\1/p' "$WORK/scan.txt")
echo "$PROGRAM: accepted $accepted % (at least $MIN_ACCEPTED), staying $staying % (at least $MIN_STAYING)"
awk -v a="$accepted" -v s="$staying" -v ma="$MIN_ACCEPTED" -v ms="$MIN_STAYING" \
  'BEGIN { exit !(a != "" && s != "" && a >= ma && s >= ms) }'
