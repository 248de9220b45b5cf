# A CPU-bound round of awk (arithmetic, strings, associative arrays,
# functions), repeated: one checksum per round, the same in every round.
# usage: gawk -v rounds=N -f work.awk (0: forever)
function mix(acc, i) {
  acc = (acc * 31 + i * i) % 1000000007
  if (i % 3 == 0) acc = xor(acc, int(acc / 8))
  return acc
}
function one_round(   acc, i, key, words, n, keys, k) {
  acc = 7
  for (i = 0; i < 150000; i++) acc = mix(acc, i)
  for (i = 0; i < 30000; i++) {
    key = "w" (i * 7919 % 5003)
    words[key] += i
  }
  n = asorti(words, keys)
  for (k = 1; k <= n; k++) acc = (acc + length(keys[k]) * words[keys[k]]) % 1000000007
  for (i = 0; i < 20000; i++) acc = (acc + length(sprintf("%d-%s", i, substr("abcdefgh", i % 8 + 1)))) % 1000000007
  return acc
}
BEGIN {
  for (done = 0; rounds == 0 || done < rounds; done++) {
    print one_round()
    fflush()
  }
}
