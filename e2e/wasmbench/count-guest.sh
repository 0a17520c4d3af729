#!/usr/bin/env bash
# count-guest.sh: instructions and instruction-cache misses per request
# inside the wasm VM, counted by valgrind's cachegrind rather than timed.
# Counts do not move with the machine's load, so two builds compare in one
# run each where timing them needs dozens of rounds by turns: a change of
# 1 % in the guest's instructions shows, and one of 1 % in CPU time does not.
# The guest's machine code has no symbols for valgrind, so it is the
# "???" line of cg_annotate; the benchmark runs n1 and then n2 requests and
# the difference, divided by n2 - n1, is one request (the VM's start and
# the module's compilation cancel out).
#
# Usage (from the repository root):
#   e2e/wasmbench/count-guest.sh 'FilterFixed/disagg' [n1] [n2] [module.wasm]
# Without a module it builds ./filter from the working tree. Needs valgrind
# (apt-get install valgrind); takes about a minute at the default counts.
set -euo pipefail
bench=${1:?benchmark regex, e.g. FilterFixed/disagg}
n1=${2:-100}
n2=${3:-600}
wasm=${4:-}
command -v valgrind >/dev/null || { echo "count-guest: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
[ "$n2" -gt "$n1" ] || { echo "count-guest: n2 must exceed n1" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.24.11}
if [ -z "$wasm" ]; then
  wasm=$work/filter.wasm
  GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$wasm" ./filter
fi
wasm=$(realpath "$wasm")
go test -c -o "$work/scenarios.test" ./e2e/scenarios

# guest N: the guest's instructions and L1 instruction-cache misses over a
# run of N requests (cachegrind's --smc-check lets it follow code that
# wazero writes to memory at run time).
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
