# Sourced by the interpreter benches (interpreter_ab.sh, interpreter_abba.sh):
# dyni-inject of build dir $BUILD as INJECT, and PROGRAM's command running its
# CPU-bound script forever (one checksum line per round) as CMD. Set SRC,
# BUILD and PROGRAM before sourcing; it exits with a reason when either is missing.
INJECT=$SRC/$BUILD/tools/dyni-inject/dyni-inject
[ -x "$INJECT" ] || INJECT=$BUILD/tools/dyni-inject/dyni-inject
[ -x "$INJECT" ] || { echo "no dyni-inject under $BUILD (cmake --build $BUILD)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run as root (ptrace and perf_event on the interpreter)" >&2; exit 2; }
S=$SRC/tests/programs/scripts
case $PROGRAM in
  python3) CMD=(/usr/bin/python3.11 -u "$S/work.py" 0) ;;
  gawk) CMD=(/usr/bin/gawk -v rounds=0 -f "$S/work.awk") ;;
  mawk) CMD=(/usr/bin/mawk -v rounds=0 -f "$S/work_posix.awk") ;;
  php) CMD=(/usr/bin/php8.2 "$S/work.php" 0) ;;
  perl) CMD=(/usr/bin/perl "$S/work.pl" 0) ;;
  *) echo "unknown program $PROGRAM" >&2; exit 2 ;;
esac
[ -x "${CMD[0]}" ] || { echo "${CMD[0]} is not installed" >&2; exit 2; }
