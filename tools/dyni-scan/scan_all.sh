#!/usr/bin/env bash
# dyni-scan over every ELF file in /usr/bin, /usr/sbin and
# /usr/lib/x86_64-linux-gnu/*.so* (each file once, symlinks resolved) plus
# mariadbd: the one-off run whose totals docs/jit.md records.
#   tools/dyni-scan/scan_all.sh DYNI_SCAN OUT_DIR [dyni-scan options...]
# OUT_DIR gets one output file per binary and summary.txt: per binary its
# functions, accepted, verifier failures or the reason it was not scanned.
# A binary already in summary.txt is not scanned again (an interrupted run
# goes on where it stopped).
set -uo pipefail
SCAN=$1 OUT=$2
shift 2
mkdir -p "$OUT"
summary=$OUT/summary.txt
touch "$summary"
sed -i '/^binaries scanned:/d' "$summary"
{ ls /usr/bin/* /usr/sbin/* /usr/lib/x86_64-linux-gnu/*.so*; command -v mariadbd; } 2>/dev/null |
  xargs -r readlink -f | sort -u | while read -r f; do
  [ -f "$f" ] && head -c4 "$f" 2>/dev/null | grep -q $'\x7fELF' || continue
  grep -q -F " $f " "$summary" && continue
  out=$OUT/$(echo "$f" | tr / _).txt
  timeout 900 "$SCAN" "$f" "$@" > "$out" 2>&1
  rc=$?
  funcs=$(sed -n 's/^functions: \([0-9]*\), accepted \([0-9]*\).*/\1 \2/p' "$out")
  fails=$(sed -n 's/^verifier failures: \([0-9]*\)/\1/p' "$out")
  if [ -n "$fails" ]; then
    echo "scanned $f ${funcs:-0 0} $fails rc=$rc" >> "$summary"
  elif grep -q "module failed" "$out"; then
    echo "module-failure $f $(grep -m1 'module failed' "$out")" >> "$summary"
  else
    echo "not-scanned $f rc=$rc $(head -c 200 "$out" | tr '\n' ' ')" >> "$summary"
  fi
done
awk '$1 == "scanned" { n++; f += $3; a += $4; v += $5 }
     $1 == "module-failure" { m++ }
     $1 == "not-scanned" { s++ }
     END { printf "binaries scanned: %d, functions: %d, accepted: %d, verifier failures: %d, module failures: %d, not scanned: %d\n", n, f, a, v, m, s }' \
  "$summary" | tee -a "$summary"
