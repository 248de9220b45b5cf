# The CPU-bound round of work.awk in POSIX awk (no gawk extensions), for
# mawk and other awks: one checksum per round, the same in every round.
# usage: mawk -v rounds=N -f work_posix.awk (0: forever)
function mix(acc, i) { return (acc * 31 + i * i) % 1000000007 }
function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2) }
BEGIN {
  for (round = 1; rounds == 0 || round <= rounds; round++) {
    acc = 0
    split("", seen)
    for (i = 1; i <= 20000; i++) {
      acc = mix(acc, i)
      key = "k" (i % 977)
      seen[key] += i
      s = sprintf("%d-%s", i, key)
      if (index(s, "7") > 0) acc += length(s)
      if (substr(s, 1, 1) == "9") acc -= 3
    }
    for (k in seen) acc = (acc + seen[k]) % 1000000007
    acc += fib(15)
    printf "%d\n", acc
    fflush()  # one line per round, as it happens (awk buffers a file)
  }
}
