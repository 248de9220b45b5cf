# Sourced by the interpreter benches (interpreter_ab.sh, interpreter_abba.sh):
# dyni-inject of build dir $BUILD as INJECT, and PROGRAM's command running its
# CPU-bound script forever (one checksum line per round) as CMD, with FEED's
# output as its standard input where it reads its work there (sqlite3: one
# query a line, its answers line-buffered). A program whose hot code is in a
# shared library (sqlite3's libsqlite3) exports DYNI_MODULE,
# so that dyni-inject copies that library, as dynid would choose it. Set SRC,
# BUILD and PROGRAM before sourcing; it exits with a reason when either is missing.
INJECT=$SRC/$BUILD/tools/dyni-inject/dyni-inject
[ -x "$INJECT" ] || INJECT=$BUILD/tools/dyni-inject/dyni-inject
[ -x "$INJECT" ] || { echo "no dyni-inject under $BUILD (cmake --build $BUILD)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run as root (ptrace and perf_event on the interpreter)" >&2; exit 2; }
S=$SRC/tests/programs/scripts
FEED=() EXE=""
case $PROGRAM in
  python3) CMD=(/usr/bin/python3.11 -u "$S/work.py" 0) ;;
  gawk) CMD=(/usr/bin/gawk -v rounds=0 -f "$S/work.awk") ;;
  mawk) CMD=(/usr/bin/mawk -v rounds=0 -f "$S/work_posix.awk") ;;
  php) CMD=(/usr/bin/php8.2 "$S/work.php" 0) ;;
  perl) CMD=(/usr/bin/perl "$S/work.pl" 0) ;;
  sqlite3)
    Q="WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000) "
    Q+="SELECT sum(x * x % 7), count(*), max(length(printf('%x', x))), sum(instr(x, '99') > 0) FROM c;"
    EXE=/usr/bin/sqlite3 FEED=(yes "$Q") CMD=(/usr/bin/stdbuf -oL /usr/bin/sqlite3 :memory:)
    export DYNI_MODULE=libsqlite3 ;;
  *) echo "unknown program $PROGRAM" >&2; exit 2 ;;
esac
[ -x "${EXE:-${CMD[0]}}" ] || { echo "${EXE:-${CMD[0]}} is not installed" >&2; exit 2; }
