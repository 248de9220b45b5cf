#!/usr/bin/env bash
# How much faster is my database? One command: dyni on a private mariadbd
# under sysbench oltp_read_only, measured side by side on one process.
#
#   sudo bench/mariadb-sysbench.sh [--threads N] [--socket] [--block SECONDS]
#                                  [--groups MIN[:MAX]] [--json FILE] [--build DIR] [--bolt]
#
# It touches nothing but what it starts itself:
# - its own mariadbd (datadir, socket and port under /var/tmp/dyni-sysbench),
#   made with bench/mariadb.sh, with sysbench's 4 x 100,000 rows;
# - its own dynid (config, socket, state and log in the same folder), which
#   lists only that server's executable. The host's license is copied in.
# It refuses to run on a host that already runs mariadbd or mysqld, or a
# dynid: their targets would be in the measurement, or it in theirs.
#
# What it does, printing progress as it goes:
# 1. warms the server up, starts the private dynid, then starts the load;
#    times load start to `dynimized`, and the counting phase (its TPS and CPU
#    per transaction against the profiling phase just before, which runs the
#    original code);
# 2. alternates original and dynimized windows on that one process with
#    `dyni -undo` and `-redo`, in ABBA groups, until the 95 % interval of the
#    TPS ratio is within +-3 % (at least MIN groups, at most MAX; default 6:30);
# 3. with --bolt, the yardstick: offline BOLT (bolt-16) of the same binary,
#    from a sampled profile of the original server under the same load
#    (10 kHz for 30 s, no LBR: -nl; ext-TSP block order: mariadbd has no
#    relocations, so BOLT can neither reorder functions nor instrument it),
#    run as a second server on a copy of the datadir (its own port and
#    socket), and alternated with the original in ABBA groups of its own;
# 4. prints one table, then the same as JSON (also written to --json FILE).
# DYNI_BENCH_OPTIONS: lines added to the private dynid's [options], for
# measuring one lever (e.g. $'counting_duty_percent = 100').
# Ratios are dynimized/original. CPU is mariadbd's: user time is the part dyni
# changes (the kernel's share, loopback TCP, is the same code either way).
set -euo pipefail

THREADS=2; SOCKET=0; BLOCK=5; MIN_GROUPS=6; MAX_GROUPS=30; JSON_OUT=""; BUILD=""; BOLT=0
HALF_WIDTH=0.03      # the interval the ABBA part runs for
WORK=${DYNI_SYSBENCH_DIR:-/var/tmp/dyni-sysbench}
PORT=${DYNI_SYSBENCH_PORT:-3316}
HERE=$(cd "$(dirname "$0")" && pwd)

say() { echo "mariadb-sysbench: $*" >&2; }
die() { echo "mariadb-sysbench: $*" >&2; exit 1; }
usage() { sed -n '4,5p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS=${2:?}; shift ;;
    --threads=*) THREADS=${1#*=} ;;
    --socket) SOCKET=1 ;;
    --bolt) BOLT=1 ;;
    --block) BLOCK=${2:?}; shift ;;
    --block=*) BLOCK=${1#*=} ;;
    --groups) G=${2:?}; shift; MIN_GROUPS=${G%%:*}; [[ $G == *:* ]] && MAX_GROUPS=${G#*:} ;;
    --json) JSON_OUT=${2:?}; shift ;;
    --json=*) JSON_OUT=${1#*=} ;;
    --build) BUILD=${2:?}; shift ;;
    --build=*) BUILD=${1#*=} ;;
    -h|--help) usage ;;
    *) echo "mariadb-sysbench: unknown argument: $1" >&2; usage ;;
  esac
  shift
done
for n in "$THREADS" "$BLOCK" "$MIN_GROUPS" "$MAX_GROUPS"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "--threads, --block and --groups take positive integers, not '$n'"
done
[ "$MIN_GROUPS" -le "$MAX_GROUPS" ] || die "--groups MIN:MAX needs MIN <= MAX"

# ---- What it needs, and what it must not touch -----------------------------
[ "$(id -u)" = 0 ] || die "must be run as root: it starts its own mariadbd and dynid"
need() { command -v "$1" >/dev/null || die "needs $1: apt-get install $2"; }
need mariadbd mariadb-server; need mariadb-install-db mariadb-server; need mariadb mariadb-client
need sysbench sysbench; need jq jq
if [ -n "$BUILD" ]; then DYNI=$(cd "$BUILD" && pwd)/dyni-cli/dyni
else DYNI=$(command -v dyni || true); fi
[ -x "$DYNI" ] || die "needs dyni: install it (sudo ./install/install.sh) or pass --build DIR"
MARIADBD=$(readlink -f "$(command -v mariadbd)")
PERF2BOLT=/usr/lib/llvm-16/bin/perf2bolt   # perf2bolt-16 misbehaves under that name (MEASUREMENTS.md)
if [ "$BOLT" = 1 ]; then
  need llvm-bolt-16 bolt-16; need perf linux-perf
  [ -x "$PERF2BOLT" ] || die "needs $PERF2BOLT: apt-get install bolt-16"
fi

SERVER_DIR=$WORK/mariadb
BOLT_DIR=$WORK/mariadb-bolt; BOLT_PORT=$((PORT + 1)); BOLT_SOCK=$BOLT_DIR/mysqld.sock; BOLT_PID=""
export DYNI_MARIADB_DIR=$SERVER_DIR DYNI_MARIADB_PORT=$PORT
bolt_server() { DYNI_MARIADB_DIR=$BOLT_DIR DYNI_MARIADB_PORT=$BOLT_PORT DYNI_MARIADBD=$WORK/bolt/mariadbd "$HERE/mariadb.sh" "$@"; }
"$HERE/mariadb.sh" stop >/dev/null 2>&1 || true   # ours, left by an interrupted run
bolt_server stop >/dev/null 2>&1 || true
others=$(pgrep -x 'mariadbd|mysqld' | tr '\n' ' ' || true)
[ -z "$others" ] || die "a database already runs on this host (pid $others): this benchmark starts its own mariadbd and measures only that; run it where no other mariadbd or mysqld runs"
dynids=$(pgrep -x dynid | tr '\n' ' ' || true)
[ -z "$dynids" ] || die "dynid already runs (pid $dynids): its targets would be undone and redone with this benchmark's; stop it first (sudo dyni -stop), the benchmark runs its own"

# ---- The private dynid, with the host's license ----------------------------
HOST_CONFIG=${DYNI_CONFIG:-/etc/dyni.conf}
HOST_STATE=${DYNI_STATE_DIR:-/var/lib/dyni}
mkdir -p "$WORK/run" "$WORK/state"
chmod 0700 "$WORK/state"
rm -f "$WORK/state/license.json"
[ -f "$HOST_STATE/license.json" ] ||
  die "this host has no dyni license ($HOST_STATE/license.json): without one dyni optimizes nothing and every ratio would be 1.000. Bind one first: sudo dyni -license=start -token=TOKEN"
cp "$HOST_STATE/license.json" "$WORK/state/license.json"
public_key=$( [ -f "$HOST_CONFIG" ] && awk -F= '/^\[/ { s = $0 } s == "[license]" && $1 ~ /^ *public_key *$/ {
                gsub(/^ +| +$/, "", $2); sub(/ +;.*/, "", $2); print $2 }' "$HOST_CONFIG" || true)
cat > "$WORK/dyni.conf" <<CONF
; written by bench/mariadb-sysbench.sh: a private dynid for its own mariadbd
[exeList]
$MARIADBD
[options]
log_file = $WORK/dynid.log
metrics_textfile =
${DYNI_BENCH_OPTIONS:-}
[license]
$([ -n "$public_key" ] && echo "public_key = $public_key")
CONF
dyni() { DYNI_CONFIG=$WORK/dyni.conf DYNI_RUN_DIR=$WORK/run DYNI_STATE_DIR=$WORK/state "$DYNI" "$@"; }
license=$(dyni -license=status 2>&1) ||
  die "dyni's license is not active on this host ($license): without one every ratio would be 1.000"

# ---- The private server and the load ---------------------------------------
SB_PID=""
# A load started as `sysbench_run ... &` is a subshell with sysbench its
# child: both are stopped (killing the subshell alone leaves sysbench running).
stop_load() {  # PID
  pkill -P "$1" 2>/dev/null || true
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
cleanup() {
  [ -n "$SB_PID" ] && stop_load "$SB_PID"
  [ -n "${SAMPLER:-}" ] && kill "$SAMPLER" 2>/dev/null || true
wait "$SAMPLER" 2>/dev/null || true
SAMPLER=""
  [ -n "${BOLT_LOAD:-}" ] && stop_load "$BOLT_LOAD"
  dyni -stop >/dev/null 2>&1 || true
  "$HERE/mariadb.sh" stop >/dev/null 2>&1 || true
  [ "$BOLT" = 1 ] && bolt_server stop >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
say "starting a private mariadbd in $SERVER_DIR (port $PORT)"
"$HERE/mariadb.sh" start >/dev/null
SOCK=$SERVER_DIR/mysqld.sock
PID=$(cat "$SERVER_DIR/mysqld.pid")
sql_on() { mariadb --socket="$1" -uroot -N -e "$2"; }  # SOCKET STATEMENT
sql() { sql_on "$SOCK" "$1"; }
if [ "$(sql "select count(*) from information_schema.tables where table_schema='sbtest'")" != 4 ]; then
  say "creating sysbench's tables (4 x 100,000 rows)"
  "$HERE/mariadb.sh" prepare >/dev/null
fi
sql "CREATE USER IF NOT EXISTS sbtest@localhost IDENTIFIED BY 'sbtest'; GRANT ALL ON sbtest.* TO sbtest@localhost"
if [ "$SOCKET" = 1 ]; then VIA="a Unix socket"; else VIA="TCP on 127.0.0.1"; fi
sysbench_on() {  # PORT SOCKET SECONDS: the load on one server
  local connect=(--mysql-host=127.0.0.1 --mysql-port="$1")
  [ "$SOCKET" = 1 ] && connect=(--mysql-socket="$2")
  sysbench oltp_read_only --db-driver=mysql "${connect[@]}" --mysql-user=sbtest --mysql-password=sbtest \
    --mysql-db=sbtest --tables=4 --table-size=100000 --threads="$THREADS" --time="$3" run
}
sysbench_run() { sysbench_on "$PORT" "$SOCK" "$1"; }  # SECONDS, on the server dyni optimizes
TICK=$(getconf CLK_TCK)
now() { date +%s.%N; }
# "time commits utime stime": one sample of a server (SOCKET PID).
sample_of() {
  echo "$(now) $(sql_on "$1" "show global status like 'Com_commit'" | awk '{print $2}') $(awk '{print $14, $15}' "/proc/$2/stat")"
}
sample() { sample_of "$SOCK" "$PID"; }
# Ratio line of two samples: "tps user_us_per_txn cpu_us_per_txn".
rate() {
  awk -v t="$TICK" 'NR == 1 { t0 = $1; c0 = $2; u0 = $3; s0 = $4 } NR == 2 {
    n = $2 - c0; if (n <= 0) { print "0 0 0"; exit }
    printf "%.2f %.2f %.2f\n", n / ($1 - t0), ($3 - u0) / t * 1e6 / n, ($3 + $4 - u0 - s0) / t * 1e6 / n }'
}

say "warming the server up (10 s of load)"
sysbench_run 10 >/dev/null 2>&1 || die "sysbench failed against the private server (see $SERVER_DIR/error.log)"

# ---- With --bolt: the BOLTed binary and its server --------------------------
# Built from the original server's profile under the same load, before dynid
# starts; its server runs on a copy of the datadir made while ours is stopped.
make_bolt() {
  local dir=$WORK/bolt log=$WORK/bolt/bolt.log
  rm -rf "$dir"; mkdir -p "$dir"
  say "BOLT: profiling the original server (30 s at 10 kHz, cpu-clock)"
  sysbench_run 33 >/dev/null 2>&1 &
  BOLT_LOAD=$!
  sleep 1
  perf record -q -e cpu-clock -F 10000 -p "$PID" -o "$dir/perf.data" -- sleep 30 >>"$log" 2>&1 ||
    die "BOLT: perf record failed (see $log)"
  wait "$BOLT_LOAD" || true
  BOLT_LOAD=""
  say "BOLT: converting the profile and optimizing $MARIADBD (a few minutes)"
  "$PERF2BOLT" -nl -p "$dir/perf.data" -o "$dir/perf.fdata" "$MARIADBD" >>"$log" 2>&1 ||
    die "BOLT: perf2bolt failed (see $log)"
  llvm-bolt-16 "$MARIADBD" -o "$dir/mariadbd" -data "$dir/perf.fdata" -reorder-blocks=ext-tsp -icf=1 \
    -use-gnu-stack >>"$log" 2>&1 || die "BOLT: llvm-bolt-16 failed (see $log)"
  say "BOLT: a second server on a copy of the datadir (port $BOLT_PORT)"
  "$HERE/mariadb.sh" stop >/dev/null
  rm -rf "$BOLT_DIR"; mkdir -p "$BOLT_DIR"
  cp -a "$SERVER_DIR/data" "$BOLT_DIR/data"
  rm -f "$BOLT_DIR"/data/*.pid "$BOLT_DIR"/data/*.sock
  "$HERE/mariadb.sh" start >/dev/null
  PID=$(cat "$SERVER_DIR/mysqld.pid")
  bolt_server start >/dev/null || die "BOLT: its server did not start (see $BOLT_DIR/error.log)"
  BOLT_PID=$(cat "$BOLT_DIR/mysqld.pid")
  sysbench_run 10 >/dev/null 2>&1 || die "sysbench failed against the private server after its restart"
}
[ "$BOLT" = 1 ] && make_bolt

# ---- 1. Load start to dynimized --------------------------------------------
say "starting the private dynid"
dyni -start >/dev/null || die "dyni -start failed: $(tail -3 "$WORK/dynid.log" 2>/dev/null)"
DYNID_PID=$(pgrep -f "dynid --config=$WORK/dyni.conf" | head -1)
# The server's entry in -status -json; empty when dynid did not answer in time
# (it is named in dynid's log then: DYNID-WARN main loop).
target() { dyni -status -json 2>/dev/null | jq -c --argjson pid "$PID" '.targets[] | select(.pid == $pid)' || true; }
sysbench_run 36000 >/dev/null 2>&1 &
SB_PID=$!
LOAD_START=$(now)
say "load started: sysbench oltp_read_only, $THREADS threads over $VIA"
# The server's counters every 0.25 s ("time commits utime stime"), and each
# -status answer ("time state phase"), for the phases' rates below.
SAMPLES=$WORK/samples.txt
TIMELINE=$WORK/timeline.txt
: > "$TIMELINE"
(while :; do sample; sleep 0.25; done) > "$SAMPLES" &
SAMPLER=$!
last=""
while :; do
  t=$(target)
  if [ -z "$t" ]; then
    say "  dynid did not answer -status in time; asking again"
    awk -v a="$LOAD_START" -v b="$(now)" 'BEGIN { exit !(b - a > 180) }' && die "dynid stopped answering -status"
    continue
  fi
  state=$(jq -r '.state' <<<"$t")
  phase=$(jq -r '.counting.phase // ""' <<<"$t")
  at=$(now)
  echo "$at $state ${phase// /_}" >> "$TIMELINE"
  shown="$state${phase:+ ($phase)}"
  elapsed=$(awk -v a="$LOAD_START" -v b="$at" 'BEGIN { printf "%.1f", b - a }')
  [ "$shown" != "$last" ] && say "  ${elapsed} s: $shown" && last=$shown
  case "$state" in
    dynimized*) break ;;
    failed*|unsupported*|unlicensed|undone) die "the server ended $(jq -r '.status' <<<"$t"); see $WORK/dynid.log" ;;
  esac
  awk -v e="$elapsed" 'BEGIN { exit !(e > 180) }' && die "not dynimized 180 s after the load started (state: $shown)"
  kill -0 "$SB_PID" 2>/dev/null || die "sysbench stopped"
  sleep 0.5
done
TO_DYNIMIZED=$elapsed
kill "$SAMPLER" 2>/dev/null || true
wait "$SAMPLER" 2>/dev/null || true
SAMPLER=""
# The counting phase against the profiling just before it (original code):
# the server's rates between the first -status answer in a phase and the
# first one after it.
phase_rate() {  # FIELD VALUE: field 2 is the state, 3 the counting phase
  local span
  span=$(awk -v f="$1" -v v="$2" '$f == v && !a { a = $1 } a && $f != v { print a, $1; exit }' "$TIMELINE")
  [ -n "$span" ] || { echo "0 0 0"; return; }
  awk -v a="${span% *}" -v b="${span#* }" '$1 >= a && $1 <= b' "$SAMPLES" | sed -n '1p;$p' | rate
}
read -r p_tps p_user p_cpu < <(phase_rate 2 profiling)
read -r c_tps c_user c_cpu < <(phase_rate 3 counting)
t=$(target)
COUNT_SECONDS=$(jq -r '(.counting.seconds // 0) * 10 | round / 10' <<<"$t")
LONGEST_STOP=$(jq -r '.dynimized.longest_stop_ms // 0' <<<"$t")
LAYOUT=$(jq -r '.dynimized.layout // ""' <<<"$t")
FUNCTIONS=$(jq -r '.dynimized.functions_patched // 0' <<<"$t")

# ---- 2. ABBA on one process ------------------------------------------------
say "alternating original (A) and dynimized (B) windows of $BLOCK s: ABBA groups, ratios B/A"
# One switch, asked again once when dynid did not answer in time (a second
# -undo or -redo of one already done says so and succeeds). A switch that
# was late is named in the progress: its block still measures what it says.
switch() {  # undo|redo
  local out
  out=$(dyni -"$1" 2>&1) && return 0
  grep -q "did not answer in time" <<<"$out" || { echo "$out" >&2; return 1; }
  say "  dyni -$1: dynid did not answer in 10 s; asking again (see $WORK/dynid.log)"
  dyni -"$1" >/dev/null
}
block() {  # A|B: switch, settle 1 s, measure BLOCK s; prints "tps user cpu"
  if [ "$1" = A ]; then switch undo || die "dyni -undo failed"
  else switch redo || die "dyni -redo failed"; fi
  sleep 1
  local a b; a=$(sample); sleep "$BLOCK"; b=$(sample)
  printf '%s\n%s\n' "$a" "$b" | rate
}
stats() {  # COLUMN FILE: "mean half_width n" of the groups' ratios, the half width 1.96 sd / sqrt(n)
  awk -v c="$1" '{ s += $c; ss += $c * $c; n++ } END { m = s / n; sd = n > 1 ? sqrt((ss - n * m * m) / (n - 1)) : 0
                   printf "%.4f %.4f %d\n", m, 1.96 * sd / sqrt(n), n }' "$2"
}
add3() { awk -v a="$1" -v b="$2" 'BEGIN { split(a, x); split(b, y); print x[1] + y[1], x[2] + y[2], x[3] + y[3] }'; }
# ABBA groups of arms FIRST and SECOND, BLOCKFN ARM measuring one block
# ("tps user cpu"), until the 95 % interval of the TPS ratio is within
# HALF_WIDTH (at least MIN_GROUPS, at most MAX_GROUPS); the ratios
# SECOND/FIRST per group go to FILE ("group tps user cpu") and the progress.
abba() {  # BLOCKFN FIRST SECOND FILE
  local fn=$1 first=$2 second=$3 file=$4 g s order tps user cpu hw
  : > "$file"
  say "  group   TPS   user CPU/txn   CPU/txn"
  for g in $(seq 1 "$MAX_GROUPS"); do
    order="$first $second $second $first"; [ $((g % 2)) = 0 ] && order="$second $first $first $second"
    local sa=(0 0 0) sb=(0 0 0)
    for s in $order; do
      read -r tps user cpu < <("$fn" "$s")
      awk -v x="$tps" 'BEGIN { exit !(x > 0) }' || die "a window served no transaction (sysbench stopped?)"
      if [ "$s" = "$first" ]; then sa=($(add3 "${sa[*]}" "$tps $user $cpu"))
      else sb=($(add3 "${sb[*]}" "$tps $user $cpu")); fi
    done
    awk -v g="$g" -v a="${sa[*]}" -v b="${sb[*]}" 'BEGIN { split(a, x); split(b, y)
      printf "%d %.4f %.4f %.4f\n", g, y[1] / x[1], y[2] / x[2], y[3] / x[3] }' | tee -a "$file" |
      awk '{ printf "mariadb-sysbench:   %5d  %6.3f  %6.3f  %6.3f\n", $1, $2, $3, $4 }' >&2
    read -r _ hw _ < <(stats 2 "$file")
    [ "$g" -ge "$MIN_GROUPS" ] && [ "$g" -gt 1 ] && awk -v h="$hw" -v w="$HALF_WIDTH" 'BEGIN { exit !(h <= w) }' && break
  done
  return 0
}
RATIOS=$WORK/ratios.txt
abba block A B "$RATIOS"
dyni -redo >/dev/null 2>&1 || true   # the last block of a group ending in A leaves it undone

# ---- 3. With --bolt: BOLT against the original, ABBA on two servers --------
# One server loaded at a time (2 threads of sysbench each block, started
# before its settling second); ours runs its original code throughout.
bolt_block() {  # A|X: prints "tps user cpu" of the original (A) or BOLT (X) server
  local port=$PORT sock=$SOCK pid=$PID
  [ "$1" = X ] && port=$BOLT_PORT sock=$BOLT_SOCK pid=$BOLT_PID
  sysbench_on "$port" "$sock" $((BLOCK + 2)) >/dev/null 2>&1 &
  local load=$! a b
  sleep 1
  a=$(sample_of "$sock" "$pid"); sleep "$BLOCK"; b=$(sample_of "$sock" "$pid")
  wait "$load" || true
  printf '%s\n%s\n' "$a" "$b" | rate
}
BOLT_RATIOS=$WORK/bolt-ratios.txt
if [ "$BOLT" = 1 ]; then
  stop_load "$SB_PID"; SB_PID=""
  switch undo || die "dyni -undo failed"
  say "BOLT: warming its server up (10 s of load)"
  sysbench_on "$BOLT_PORT" "$BOLT_SOCK" 10 >/dev/null 2>&1 || die "sysbench failed against the BOLT server"
  say "alternating the original (A) and the BOLTed server (X), windows of $BLOCK s: ABBA groups, ratios X/A"
  abba bolt_block A X "$BOLT_RATIOS"
  switch redo >/dev/null 2>&1 || true
fi

# ---- 4. The table and JSON -------------------------------------------------
read -r DYNID_CPU DYNID_RSS < <(awk -v t="$TICK" '{ printf "%.1f ", ($14 + $15) / t }' "/proc/$DYNID_PID/stat";
                                 awk '/^VmHWM/ { printf "%.0f\n", $2 / 1024 }' "/proc/$DYNID_PID/status")
CPU_NAME=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
HYPERVISOR=$(systemd-detect-virt --vm 2>/dev/null || echo "no hypervisor")
read -r TPS TPS_HW N < <(stats 2 "$RATIOS")
read -r USER USER_HW _ < <(stats 3 "$RATIOS")
read -r CPU CPU_HW _ < <(stats 4 "$RATIOS")
BOLT_JSON=null
if [ "$BOLT" = 1 ]; then
  read -r BOLT_TPS BOLT_TPS_HW BOLT_N < <(stats 2 "$BOLT_RATIOS")
  read -r BOLT_USER BOLT_USER_HW _ < <(stats 3 "$BOLT_RATIOS")
  read -r BOLT_CPU BOLT_CPU_HW _ < <(stats 4 "$BOLT_RATIOS")
  BOLT_JSON=$(jq -n --argjson n "$BOLT_N" --argjson tps "$BOLT_TPS" --argjson tps_hw "$BOLT_TPS_HW" \
    --argjson user "$BOLT_USER" --argjson user_hw "$BOLT_USER_HW" --argjson cpu "$BOLT_CPU" --argjson cpu_hw "$BOLT_CPU_HW" \
    '{abba_groups: $n, profile: "perf cpu-clock 10 kHz, 30 s, -nl",
      options: "-reorder-blocks=ext-tsp -icf=1 -use-gnu-stack",
      tps_ratio: {mean: $tps, ci95: $tps_hw}, user_cpu_per_txn_ratio: {mean: $user, ci95: $user_hw},
      cpu_per_txn_ratio: {mean: $cpu, ci95: $cpu_hw}}')
fi
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b > 0) ? a / b : 0 }'; }
C_TPS=$(ratio "$c_tps" "$p_tps"); C_USER=$(ratio "$c_user" "$p_user")
meets() { awk -v x="$1" -v op="$2" -v g="$3" 'BEGIN { ok = op == ">=" ? x >= g : x <= g; print ok ? "met" : "not met" }'; }
TPS_LOW=$(awk -v m="$TPS" -v h="$TPS_HW" 'BEGIN { printf "%.4f", m - h }')
{
echo
echo "dyni on mariadbd ($MARIADBD), sysbench oltp_read_only, $THREADS threads over $VIA"
echo "CPU: $CPU_NAME ($(nproc) CPUs, $HYPERVISOR); $N ABBA groups of 4 x $BLOCK s on pid $PID"
echo
printf "%-40s %-22s %s\n" "" "dynimized/original" "goal"
printf "%-40s %6.3f  (±%.3f)       >= 1.10, interval above 1: %s\n" "transactions per second" "$TPS" "$TPS_HW" \
  "$( [ "$(meets "$TPS" '>=' 1.10)" = met ] && awk -v l="$TPS_LOW" 'BEGIN { exit !(l > 1) }' && echo met || echo "not met")"
printf "%-40s %6.3f  (±%.3f)       <= 0.85: %s\n" "mariadbd user CPU per transaction" "$USER" "$USER_HW" "$(meets "$USER" '<=' 0.85)"
printf "%-40s %6.3f  (±%.3f)\n" "mariadbd CPU per transaction" "$CPU" "$CPU_HW"
if [ "$BOLT" = 1 ]; then
  echo
  printf "%-40s %-22s\n" "offline BOLT (sampled profile)" "BOLTed/original ($BOLT_N groups)"
  printf "%-40s %6.3f  (±%.3f)       dynimized above it: %s\n" "transactions per second" "$BOLT_TPS" "$BOLT_TPS_HW" \
    "$(awk -v d="$TPS" -v b="$BOLT_TPS" 'BEGIN { print (d > b) ? "met" : "not met" }')"
  printf "%-40s %6.3f  (±%.3f)\n" "mariadbd user CPU per transaction" "$BOLT_USER" "$BOLT_USER_HW"
  printf "%-40s %6.3f  (±%.3f)\n" "mariadbd CPU per transaction" "$BOLT_CPU" "$BOLT_CPU_HW"
fi
echo
printf "%-40s %s s   (goal <= 30 s: %s)\n" "load start to dynimized" "$TO_DYNIMIZED" "$(meets "$TO_DYNIMIZED" '<=' 30)"
printf "%-40s %s s; TPS x%s, user CPU per transaction x%s of profiling (goal: <= 5 s at >= x0.7)\n" \
  "counting phase" "$COUNT_SECONDS" "$C_TPS" "$C_USER"
printf "%-40s %s functions, layout: %s\n" "dynimized" "$FUNCTIONS" "$LAYOUT"
printf "%-40s %s s of CPU, peak RSS %s MB\n" "dynid" "$DYNID_CPU" "$DYNID_RSS"
printf "%-40s %s ms\n" "longest stop window" "$LONGEST_STOP"
} 
JSON=$(jq -n --arg cpu "$CPU_NAME" --arg hv "$HYPERVISOR" --arg via "$VIA" --arg exe "$MARIADBD" \
  --argjson threads "$THREADS" --argjson groups "$N" --argjson block "$BLOCK" \
  --argjson tps "$TPS" --argjson tps_hw "$TPS_HW" --argjson user "$USER" --argjson user_hw "$USER_HW" \
  --argjson cpu_r "$CPU" --argjson cpu_hw "$CPU_HW" --argjson to_dyn "$TO_DYNIMIZED" \
  --argjson count_s "$COUNT_SECONDS" --argjson count_tps "$C_TPS" --argjson count_user "$C_USER" \
  --argjson dynid_cpu "$DYNID_CPU" --argjson dynid_rss "$DYNID_RSS" --argjson stop "$LONGEST_STOP" \
  --argjson functions "$FUNCTIONS" --arg layout "$LAYOUT" --argjson bolt "$BOLT_JSON" \
  '{cpu: $cpu, hypervisor: $hv, server: $exe, threads: $threads, connection: $via, abba_groups: $groups,
    block_seconds: $block,
    tps_ratio: {mean: $tps, ci95: $tps_hw}, user_cpu_per_txn_ratio: {mean: $user, ci95: $user_hw},
    cpu_per_txn_ratio: {mean: $cpu_r, ci95: $cpu_hw}, seconds_to_dynimized: $to_dyn,
    counting: {seconds: $count_s, tps_ratio: $count_tps, user_cpu_per_txn_ratio: $count_user},
    dynid: {cpu_seconds: $dynid_cpu, peak_rss_mb: $dynid_rss}, longest_stop_ms: $stop,
    functions_patched: $functions, layout: $layout, bolt: $bolt}')
echo
echo "$JSON"
[ -z "$JSON_OUT" ] || echo "$JSON" > "$JSON_OUT"
