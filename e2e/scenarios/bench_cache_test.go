package scenarios

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/envoyemu"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/abi/abispec"
	"github.com/pdroute/pdroute/lb/prefix"
)

// BenchmarkCacheAwareCPU is the filter's cost per request with the shared
// prefix index at its bound (every slot holding Ways prefixes, filled by
// unique requests before the timer), against the same request balanced by
// round robin without the index: one VM in envoyemu's Driver, as
// BenchmarkFilterCPU. It reports the process's CPU time per request
// (cpu-ns/op, the fills left out), the index's shared-data calls per request
// (reads of the lookup, reads and writes of the records) and the index's
// bytes after the run. The same prompt repeated finds its points fresh and
// skips their writes; the -unique runs send a new prompt every time, so
// every point is written.
func BenchmarkCacheAwareCPU(b *testing.B) {
	code := pluginCode(b)
	probe := text(64 << 10)
	perChar := float64(estimate(b, chat(probe, nil), "/v1/chat/completions")) / float64(len(probe))
	endpoints := func(prefix string) string {
		s := ""
		for i := range 8 {
			if i > 0 {
				s += ","
			}
			s += fmt.Sprintf(`{"name":"%s-%d","address":"10.0.%d.%d:8000"}`, prefix, i, len(prefix), i+1)
		}
		return s
	}
	const slots = 4096
	for _, tokens := range []int{8 << 10, 55 << 10} {
		body := chat("00000000 "+text(int(float64(tokens)/perChar)), nil)
		digits := strings.Index(string(body), "00000000")
		answer := prefillAnswer(tokens)
		for _, tc := range []struct {
			name, strategy, route string
			unique                bool // every request a new prompt: the index writes every point
		}{
			{"round_robin/direct", "round_robin", "direct", false},
			{"cache_aware/direct", "cache_aware", "direct", false},
			{"cache_aware/direct-unique", "cache_aware", "direct", true},
			{"round_robin/disagg", "round_robin", "disagg", false},
			{"cache_aware/disagg", "cache_aware", "disagg", false},
			{"cache_aware/disagg-unique", "cache_aware", "disagg", true},
		} {
			b.Run(fmt.Sprintf("%s/%dk", tc.name, tokens>>10), func(b *testing.B) {
				threshold := 100_000_000
				if tc.route == "disagg" {
					threshold = 0
				}
				plugin := []byte(fmt.Sprintf(`{"mode":"nixl","threshold_tokens":%d,"prefix_index":{"slots":%d},`+
					`"prefill":{"strategy":%q,"endpoints":[%s]},"decode":{"strategy":%q,"endpoints":[%s]}}`,
					threshold, slots, tc.strategy, endpoints("prefill"), tc.strategy, endpoints("decode")))
				recycle := max(16, (64<<20)/len(body))
				var d *envoyemu.Driver
				defer func() {
					if d != nil {
						d.Close()
					}
				}()
				calls := func() uint64 {
					var n uint64
					for _, m := range []string{"pdroute.prefix.index_calls.lookup", "pdroute.prefix.index_calls.record"} {
						v, _ := d.Metric(abispec.MetricTypeCounter, m)
						n += v
					}
					return n
				}
				var indexCalls uint64
				var cpu time.Duration // the process's CPU time while the timer runs
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				b.ResetTimer()
				mark := processCPU()
				for i := range b.N {
					if i%recycle == 0 {
						b.StopTimer()
						cpu += processCPU() - mark
						if d != nil {
							indexCalls += calls()
							d.Close()
						}
						var err error
						if d, err = startDriver(code, plugin, stack.EmulatedEnvoy); err != nil {
							b.Fatal(err)
						}
						if tc.strategy == "cache_aware" {
							fillIndex(b, d, slots, tc.route == "disagg")
						}
						indexCalls -= calls()
						runtime.GC() // the fill's garbage, not the timed requests'
						mark = processCPU()
						b.StartTimer()
					}
					if tc.unique {
						copy(body[digits:], fmt.Sprintf("%08d", i))
					}
					driveRequest(b, d, body, tc.route == "disagg", answer)
				}
				b.StopTimer()
				cpu += processCPU() - mark
				indexCalls += calls()
				b.ReportMetric(float64(indexCalls)/float64(b.N), "index-calls/op")
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				if tc.strategy == "cache_aware" {
					b.ReportMetric(float64(indexBytes(d, slots)), "index-bytes")
				}
			})
		}
	}
}

// fillIndex sends unique short requests until the index holds about
// Ways prefixes in every slot (5 sample points per request).
func fillIndex(b *testing.B, d *envoyemu.Driver, slots int, disagg bool) {
	const blocks = 5
	n := slots * prefix.Ways / blocks * 3 / 2 // collisions leave some slots short
	filler := text(blocks*512 + 200)
	answer := prefillAnswer(600)
	for i := range n {
		driveRequest(b, d, chat(strconv.Itoa(i)+" "+filler, nil), disagg, answer)
	}
}

// indexBytes is the index's shared data in d.
func indexBytes(d *envoyemu.Driver, slots int) int {
	n := 0
	for i := range slots {
		v, _, _ := d.SharedData(stack.PluginName, "pdroute/px/"+strconv.Itoa(i))
		n += len(v)
	}
	return n
}
