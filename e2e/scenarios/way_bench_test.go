package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/envoyemu"
	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
)

// The two ways compared (BENCHMARKS.md "The two ways"): the filter's CPU per
// request, the time to first token through the proxy, and what holding the
// decode connection during the prefill costs the decoders.

// wayPromptSizes are the prompt sizes compared, in thousands of tokens.
var wayPromptSizes = []int{1, 8, 55}

// longContext lets the mocks take the largest prompt (their words count more
// tokens than tokenest's estimate) and as many requests as come.
func longContext(c *mocks.Config) {
	c.MaxConcurrency, c.MaxModelLen, c.KVCacheBlocks = -1, 1<<20, 1<<18
}

// chatOfTokens is a chat body tokenest estimates at about k thousand tokens.
func chatOfTokens(b *testing.B, k int, extra map[string]any) []byte {
	probe := text(64 << 10)
	perChar := float64(estimate(b, chat(probe, nil), "/v1/chat/completions")) / float64(len(probe))
	return chat(text(int(float64(k<<10)/perChar)), extra)
}

// BenchmarkWayCPU is the filter's CPU per disaggregated request in each way,
// at the VM level (envoyemu's Driver, as BenchmarkFilterCPU).
func BenchmarkWayCPU(b *testing.B) {
	code := pluginCode(b)
	for _, k := range wayPromptSizes {
		body := chatOfTokens(b, k, nil)
		answer := prefillAnswer(k << 10)
		for _, way := range []config.RouteAt{config.RouteAtBody, config.RouteAtHeaders} {
			b.Run(fmt.Sprintf("%s/%dk", way, k), func(b *testing.B) {
				// round_robin, as BenchmarkFilterCPU: the ways' cost without the prefix index.
				plugin := []byte(fmt.Sprintf(`{"mode":"nixl","threshold_tokens":0,"route_at":%q,`+
					`"prefill":{"strategy":"round_robin","endpoints":[{"name":"p","address":"10.0.0.1:8000"}]},`+
					`"decode":{"strategy":"round_robin","endpoints":[{"name":"d","address":"10.0.0.2:8000"}]}}`, way))
				recycle := max(16, (64<<20)/len(body))
				var d *envoyemu.Driver
				defer func() {
					if d != nil {
						d.Close()
					}
				}()
				b.SetBytes(int64(len(body)))
				var cpu time.Duration
				b.ResetTimer()
				for i := range b.N {
					if i%recycle == 0 {
						b.StopTimer()
						if d != nil {
							d.Close()
						}
						var err error
						if d, err = startDriver(code, plugin, stack.EmulatedEnvoy); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					c0 := processCPU()
					driveRequest(b, d, body, true, answer)
					cpu += processCPU() - c0
				}
				// CPU time, unlike ns/op, does not count waiting for a busy machine's cores.
				b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
			})
		}
	}
}

// BenchmarkWayTTFT is the time to the first streamed event of a
// disaggregated chat request through the emulated proxy with instant mocks,
// sent one at a time, in each way (body: the filter sets
// allow_on_headers_stop_iteration; headers: it does not, route_at auto),
// with this process's CPU (client, proxy and mocks) per request.
func BenchmarkWayTTFT(b *testing.B) {
	for _, way := range []string{bodyWay, headersWay} {
		topo := benchTopology(config.ModeNIXL, 1, map[string]any{"threshold_tokens": 0})
		for i := range topo.Prefill {
			topo.Prefill[i].Mock, topo.Decode[i].Mock = longContext, longContext
		}
		topo.Proxy = proxy
		topo.NoStopIteration = way == headersWay
		s := stack.StartT(b, topo)
		warm := chatOfTokens(b, 1, map[string]any{"stream": true})
		for range 4 { // route_at auto learns the way on the first request of each VM
			benchSend(b, s.URL+"/v1/chat/completions", warm)
		}
		for _, k := range wayPromptSizes {
			body := chatOfTokens(b, k, map[string]any{"stream": true, "max_tokens": 2})
			b.Run(fmt.Sprintf("%s/%dk", way, k), func(b *testing.B) {
				var ttft time.Duration
				cpu := processCPU()
				b.ResetTimer()
				for range b.N {
					r := benchSend(b, s.URL+"/v1/chat/completions", body)
					if r.Header.Get("x-pdroute-path") != "disagg" || len(r.Events) == 0 {
						b.Fatalf("path %q, %d events", r.Header.Get("x-pdroute-path"), len(r.Events))
					}
					ttft += r.Events[0].At
				}
				b.ReportMetric(float64(ttft.Microseconds())/1000/float64(b.N), "ttft-ms")
				b.ReportMetric(float64((processCPU()-cpu).Microseconds())/1000/float64(b.N), "cpu-ms/op")
			})
		}
	}
}

// BenchmarkWayDecodeHold is the cost of holding the decode connection while
// the prefill runs: 16 clients at once send 8k-token requests whose prefill
// takes ~160 ms (20 µs per token); the metrics are the most requests the
// decoder had open at once and how many it had open on average, sampled every
// 5 ms (the headers way opens them at the headers, the body way after the
// prefill).
func BenchmarkWayDecodeHold(b *testing.B) {
	const clients = 16
	for _, way := range []string{bodyWay, headersWay} {
		b.Run(way, func(b *testing.B) {
			spec := stack.EngineSpec{
				Latency: mocks.Latency{PrefillPerToken: 20 * time.Microsecond, TransferredPrefill: 1, PerOutputToken: 1, Slowdown: 1},
				Mock:    longContext,
			}
			topo := stack.Topology{Mode: config.ModeNIXL, Prefill: engines(1, spec), Decode: engines(1, spec),
				Plugin: map[string]any{"threshold_tokens": 0}, Proxy: proxy, NoStopIteration: way == headersWay}
			s := stack.StartT(b, topo)
			body := chatOfTokens(b, 8, map[string]any{"max_tokens": 2})
			for range 4 {
				benchSend(b, s.URL+"/v1/chat/completions", body)
			}
			var peak, sum, samples int64
			stop := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				for {
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					st, err := s.Decode[0].Control.Stats(ctx)
					cancel()
					if err == nil {
						peak = max(peak, st.InFlight)
						sum += st.InFlight
						samples++
					}
				}
			}()
			b.ResetTimer()
			for range b.N {
				var wg sync.WaitGroup
				for range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
						defer cancel()
						r, err := stack.Send(ctx, benchClient, http.MethodPost, s.URL+"/v1/chat/completions", body, nil)
						if err != nil || r.Status != 200 {
							b.Errorf("%v %v", err, r)
						}
					}()
				}
				wg.Wait()
			}
			b.StopTimer()
			close(stop)
			<-sampled
			b.ReportMetric(float64(peak), "peak-decode-open")
			b.ReportMetric(float64(sum)/float64(max(samples, 1)), "mean-decode-open")
		})
	}
}
