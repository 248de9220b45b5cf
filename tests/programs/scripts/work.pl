# A CPU-bound round of pure Perl (arithmetic, strings, hashes, arrays, sorting,
# subs), repeated: one checksum per round, the same in every round.
# usage: perl work.pl ROUNDS (0: forever)
$| = 1;  # one line per round, as it happens
my $n = shift // 0;
for (my $round = 1; $n == 0 || $round <= $n; $round++) {
  my %h; my @a; my $s = 0;
  for my $i (1 .. 20000) { $h{"k$i"} = $i * 3; push @a, ($i * 7919) % 10007; }
  for my $k (keys %h) { $s += $h{$k} if $k =~ /7/; }
  my @sorted = sort { $a <=> $b } @a;
  sub fib { my $x = shift; return $x < 2 ? $x : fib($x - 1) + fib($x - 2); }
  $s += fib(18) + $sorted[100] + length(join(",", @sorted[0 .. 50]));
  print "$s\n";
}
