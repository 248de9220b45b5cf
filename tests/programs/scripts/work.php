<?php
// A CPU-bound round of PHP (integers, strings, arrays, sorting, calls,
// exceptions), repeated: one checksum per round, the same in every round.
// usage: php work.php ROUNDS (0: forever)
function mix($acc, $i) {
  $acc = ($acc * 31 + $i * $i) % 1000000007;
  if ($i % 3 == 0) $acc ^= $acc >> 3;
  return $acc;
}
function one_round() {
  $acc = 7;
  for ($i = 0; $i < 300000; $i++) $acc = mix($acc, $i);
  $words = [];
  for ($i = 0; $i < 40000; $i++) {
    $key = "w" . ($i * 7919 % 5003);
    $words[$key] = ($words[$key] ?? 0) + $i;
  }
  ksort($words);
  foreach ($words as $k => $v) $acc = ($acc + strlen($k) * $v) % 1000000007;
  for ($i = 0; $i < 5000; $i++) {
    try {
      if ($i % 7 == 0) throw new Exception((string)$i);
      $acc += (int)strrev((string)$i);
    } catch (Exception $e) {
      $acc ^= (int)$e->getMessage();
    }
  }
  return $acc;
}
$rounds = (int)$argv[1];
for ($done = 0; $rounds == 0 || $done < $rounds; $done++) {
  echo one_round(), "\n";
  fflush(STDOUT);
}
