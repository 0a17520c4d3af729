#!/usr/bin/env bash
# perf-guest.sh: where a benchmark of e2e/scenarios spends its CPU inside the
# wasm VM, by sampling (perf) rather than by listening to calls, so small
# functions are not inflated. wazero writes a perf map of the machine code it
# compiles when built with -tags perfmap; the code must be compiled afresh
# (an empty TMPDIR keeps the emulator's compilation cache out of the way).
#
# Usage (from the repository root):
#   e2e/wasmbench/perf-guest.sh 'FilterFixed/disagg' [benchtime] [top]
# Prints the share of the process's samples in the guest, the host (the
# emulator and wazero) and the kernel, then the guest's functions by share of
# the guest's samples, with the wasm block labels folded into their function.
set -euo pipefail
bench=${1:?benchmark regex, e.g. FilterFixed/disagg}
benchtime=${2:-20000x}
top=${3:-60}
command -v perf >/dev/null || { echo "perf-guest: needs perf (apt-get install linux-perf)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.24.11}
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$work/filter.wasm" ./filter
go test -c -tags perfmap -o "$work/scenarios.test" ./e2e/scenarios
mkdir "$work/tmp"
(cd e2e/scenarios && TMPDIR="$work/tmp" PDROUTE_E2E_WASM="$work/filter.wasm" \
  perf record -q -F 5000 -o "$work/perf.data" "$work/scenarios.test" -test.run '^$' \
  -test.bench "$bench" -test.benchtime "$benchtime" | grep -E '^Benchmark' || true)
echo "== share of samples by where they ran (compiling the module counts as host)"
perf report -i "$work/perf.data" --no-children --sort dso -F overhead,dso 2>/dev/null | grep "%"
jit=$(perf report -i "$work/perf.data" --sort dso -F dso 2>/dev/null | grep -o 'JIT\] tid [0-9]*' | head -1)
echo "== guest functions, % of the guest's samples"
perf report -i "$work/perf.data" --no-children --dsos "[$jit" --sort symbol -F overhead,sym 2>/dev/null |
  grep '%' | sed -E 's/^ *([0-9.]+)% +\[.\] +/\1 /; s/:::::L[0-9]+//; s/\[[0-9]+\/[0-9]+\]\.//; s/github\.com_pdroute_pdroute_//; s/ +- +- *$//' |
  awk '{p=$1; $1=""; sub(/^ /,""); s[$0]+=p; t+=p} END {for (k in s) printf "%6.2f %s\n", s[k]*100/t, k}' |
  sort -rn | head -"$top"
