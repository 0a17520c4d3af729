#!/usr/bin/env bash
# count-guest-functions.sh: count-guest.sh by function. Instructions and L1
# instruction-cache misses of each guest function per request, counted by
# valgrind's callgrind and charged to functions through the perf map that
# wazero writes when built with -tags perfmap (the code must be compiled
# afresh, under valgrind: a few minutes). The counts include the VM's start
# and the benchmark's first requests, spread over n; with n of a thousand
# they are within a percent of one request's. A function whose misses
# approach the cache lines it runs times its calls is fetched afresh at each
# call: on the fixed path most code is.
#
# Usage (from the repository root):
#   e2e/wasmbench/count-guest-functions.sh 'FilterFixed/disagg' [n] [top] [module.wasm]
# Needs valgrind and perl.
set -euo pipefail
bench=${1:?benchmark regex, e.g. FilterFixed/disagg}
n=${2:-1000}
top=${3:-60}
wasm=${4:-}
command -v valgrind >/dev/null || { echo "count-guest-functions: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.24.11}
if [ -z "$wasm" ]; then
  wasm=$work/filter.wasm
  GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$wasm" ./filter
fi
wasm=$(realpath "$wasm")
go test -c -tags perfmap -o "$work/scenarios.test" ./e2e/scenarios
mkdir "$work/tmp"
# An empty TMPDIR keeps the emulator's compilation cache out of the way, so
# wazero compiles and writes the map; callgrind needs Go's asynchronous
# preemption off (its signals trip an assertion in callgrind 3.19).
(cd e2e/scenarios && GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 TMPDIR="$work/tmp" PDROUTE_E2E_WASM="$wasm" \
  valgrind --tool=callgrind --dump-instr=yes --cache-sim=yes --smc-check=all-non-file \
  --callgrind-out-file="$work/cg.out" "$work/scenarios.test" -test.run '^$' -test.bench "$bench" \
  -test.benchtime "${n}x" >"$work/run.log" 2>&1) || { tail -20 "$work/run.log" >&2; exit 1; }
pid=$(sed -n 's/^pid: //p' "$work/cg.out")
map=/tmp/perf-$pid.map
[ -s "$map" ] || { echo "count-guest-functions: no perf map at $map" >&2; exit 1; }
# Self costs by instruction address (callgrind's positions: absolute, +/-
# relative, or * for the same; the line after calls= is a call's inclusive
# cost), then each address charged to the map's entry that holds it, the
# wasm block labels folded into their function.
perl -e '
  my ($map, $cg, $n, $top) = @ARGV;
  my (@start, @end, @name);
  open(my $m, "<", $map) or die;
  my @e;
  while (<$m>) {
    chomp; my ($a, $s, $f) = split / /, $_, 3;
    $f =~ s/:::::L\d+$//; $f =~ s/^\[\d+\/\d+\]\.//; $f =~ s/github\.com_pdroute_pdroute_//g;
    push @e, [hex($a), hex($a) + hex($s), $f];
  }
  @e = sort { $a->[0] <=> $b->[0] } @e;
  @start = map { $_->[0] } @e; @end = map { $_->[1] } @e; @name = map { $_->[2] } @e;
  my ($lo, $hi) = ($start[0], $end[-1]);
  my (%ir, %mr, %lines, $tir, $tmr);
  my ($pos, $skip) = (0, 0);
  my @ev; my ($iir, $imr);
  open(my $c, "<", $cg) or die;
  while (<$c>) {
    if (/^events: (.*)/) {
      @ev = split / /, $1;
      for my $i (0 .. $#ev) { $iir = $i if $ev[$i] eq "Ir"; $imr = $i if $ev[$i] eq "I1mr"; }
      next;
    }
    if (/^calls=/) { $skip = 1; next; }
    next unless /^[0-9+*-]/;
    my @f = split;
    my $p = $f[0];
    if ($p =~ /^0x/) { $pos = hex($p); } elsif ($p =~ /^[+-]/) { $pos += $p; } elsif ($p ne "*") { $pos = $p; }
    if ($skip) { $skip = 0; next; }
    next unless $pos >= $lo && $pos < $hi;
    my ($l, $h) = (0, $#start);
    while ($l < $h) { my $mid = int(($l + $h + 1) / 2); if ($start[$mid] <= $pos) { $l = $mid } else { $h = $mid - 1 } }
    next unless $pos < $end[$l];
    my $fn = $name[$l];
    my $i = $f[2 + $iir] // 0; my $x = $f[2 + $imr] // 0;
    $ir{$fn} += $i; $mr{$fn} += $x; $tir += $i; $tmr += $x;
    $lines{$fn}{$pos >> 6} = 1 if $i;
  }
  printf "guest per request: %.0f instructions, %.0f L1 instruction-cache misses\n", $tir / $n, $tmr / $n;
  printf "%9s %9s %6s  %s\n", "instr", "misses", "lines", "function (per request; lines: 64-byte lines of its code run)";
  my $k = 0;
  for my $fn (sort { $mr{$b} <=> $mr{$a} } keys %mr) {
    last if $k++ >= $top;
    printf "%9.0f %9.1f %6d  %s\n", $ir{$fn} / $n, $mr{$fn} / $n, scalar(keys %{$lines{$fn}}), $fn;
  }
' "$map" "$work/cg.out" "$n" "$top"
rm -f "$map"
