#!/usr/bin/env bash
# count-guest.sh: instructions and instruction-cache misses per request
# inside the wasm VM, counted by valgrind rather than timed. Counts do not
# move with the machine's load, so two builds compare in one run each where
# timing them needs dozens of rounds by turns: a change of 1 % in the
# guest's instructions shows, and one of 1 % in CPU time does not.
#
# Usage (from the repository root):
#   e2e/wasmbench/count-guest.sh 'FilterFixed/disagg' [n1] [n2] [module.wasm]
#   e2e/wasmbench/count-guest.sh -f 'FilterFixed/disagg' [n] [top] [module.wasm]
# Without a module it builds ./filter from the working tree. Needs valgrind
# (apt-get install valgrind), and perl for -f.
#
# The totals (about a minute): cachegrind runs the benchmark with n1 and
# then n2 requests; the guest's machine code has no symbols for valgrind,
# so it is cg_annotate's "???" line, and the difference divided by n2 - n1
# is one request (the VM's start and the module's compilation cancel out).
#
# By function (-f; a few minutes): callgrind, with each instruction's
# address charged to the function that wazero's perf map (-tags perfmap)
# places there, the wasm block labels folded into their function. The code
# is compiled afresh, under valgrind, and the counts are the whole run's
# over n: a function of the request's path counts within a percent of one
# request's from n of a few hundred, but the total line also carries the
# VM's start (17 % more than the totals mode at n = 1000). A function whose
# misses approach the cache lines it runs times its calls is fetched afresh
# at each call.
set -euo pipefail
by_function=
if [ "${1:-}" = -f ]; then
  by_function=1
  shift
fi
bench=${1:?benchmark regex, e.g. FilterFixed/disagg}
wasm=${4:-}
command -v valgrind >/dev/null || { echo "count-guest: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
work=$(mktemp -d)
map= # -f: the perf map wazero writes under /tmp, removed with the rest
trap 'rm -rf "$work"; [ -z "$map" ] || rm -f "$map"' EXIT
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.24.11}
if [ -z "$wasm" ]; then
  wasm=$work/filter.wasm
  GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$wasm" ./filter
fi
wasm=$(realpath "$wasm")

if [ -z "$by_function" ]; then
  n1=${2:-100}
  n2=${3:-600}
  [ "$n2" -gt "$n1" ] || { echo "count-guest: n2 must exceed n1" >&2; exit 1; }
  go test -c -o "$work/scenarios.test" ./e2e/scenarios
  # guest N: the guest's instructions and L1 instruction-cache misses over
  # a run of N requests (--smc-check lets valgrind follow the code wazero
  # writes to memory at run time).
  guest() {
    (cd e2e/scenarios && GOMAXPROCS=1 PDROUTE_E2E_WASM="$wasm" valgrind --tool=cachegrind --cache-sim=yes \
      --smc-check=all-non-file --cachegrind-out-file="$work/cg.$1" "$work/scenarios.test" \
      -test.run '^$' -test.bench "$bench" -test.benchtime "$1x" >/dev/null 2>&1)
    cg_annotate "$work/cg.$1" 2>/dev/null | grep -m1 '???:???' | sed -E 's/\([^)]*\)//g; s/,//g' | awk '{print $1, $2}'
  }
  read -r ir1 mr1 < <(guest "$n1")
  read -r ir2 mr2 < <(guest "$n2")
  [ -n "$ir1" ] && [ -n "$ir2" ] || { echo "count-guest: no guest line in cachegrind's output" >&2; exit 1; }
  awk -v b="$bench" -v n=$((n2 - n1)) -v i1="$ir1" -v i2="$ir2" -v m1="$mr1" -v m2="$mr2" 'BEGIN {
    printf "%s: per request in the guest: %.0f instructions, %.0f L1 instruction-cache misses\n", b, (i2 - i1) / n, (m2 - m1) / n
  }'
  exit 0
fi

n=${2:-1000}
top=${3:-60}
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
[ -s "$map" ] || { echo "count-guest: no perf map at $map" >&2; exit 1; }
# Self costs by instruction address (callgrind's positions: absolute, +/-
# relative, or * for the same; the line after calls= is a call's inclusive
# cost), each charged to the map's entry that holds it.
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
  printf "guest, the whole run over n: %.0f instructions, %.0f L1 instruction-cache misses\n", $tir / $n, $tmr / $n;
  printf "%9s %9s %6s  %s\n", "instr", "misses", "lines", "function (per request; lines: 64-byte lines of its code run)";
  my $k = 0;
  for my $fn (sort { $mr{$b} <=> $mr{$a} } keys %mr) {
    last if $k++ >= $top;
    printf "%9.0f %9.1f %6d  %s\n", $ir{$fn} / $n, $mr{$fn} / $n, scalar(keys %{$lines{$fn}}), $fn;
  }
' "$map" "$work/cg.out" "$n" "$top"
