package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/envoyemu"
	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/e2e/wasmbuild"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/filter/connector"
	"github.com/pdroute/pdroute/hostcalls/kvbridge"
	"github.com/pdroute/pdroute/hostcalls/zmqpush"
)

// End-to-end benchmarks (make bench); figures and commands are in
// BENCHMARKS.md (end-to-end).

// instant mocks answer at once (1 ns per step), so the proxy's cost shows.
var instant = mocks.Latency{PrefillPerToken: 1, TransferredPrefill: 1, PerOutputToken: 1, Slowdown: 1}

// benchTopology is nP+nD instant, unbounded mocks in mode.
func benchTopology(mode config.Mode, n int, plugin map[string]any) stack.Topology {
	spec := stack.EngineSpec{Latency: instant, Mock: func(c *mocks.Config) {
		c.MaxConcurrency = -1
		c.MaxModelLen, c.KVCacheBlocks = 256<<10, 64<<10 // room for the 55k-token prompts
	}}
	return stack.Topology{Mode: mode, Prefill: engines(n, spec), Decode: engines(n, spec), Plugin: plugin}
}

// benchClient keeps connections open between requests.
var benchClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}

func benchSend(b *testing.B, url string, body []byte) *response {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := stack.Send(ctx, benchClient, http.MethodPost, url, body, nil)
	if err != nil {
		b.Fatal(err)
	}
	if r.Status != 200 {
		b.Fatalf("%s: %d %s", url, r.Status, r.Body)
	}
	return &response{r}
}

// processCPU is this process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFilterCPU is the filter's own cost per request, at the VM level:
// one VM in envoyemu's Driver runs a whole request (headers, the body in
// Envoy's 16 KiB chunks, for disagg the prefill answer with a block id per
// 16 tokens, response headers and body, end of stream), so the time is the
// time inside VM calls plus the Driver's small bookkeeping.
func BenchmarkFilterCPU(b *testing.B) {
	code := pluginCode(b)
	for _, k := range []int{1, 8, 32, 128} {
		tokens := k << 10
		body := chatOfTokens(b, k, nil)
		est := estimate(b, body, "/v1/chat/completions")
		answer := prefillAnswer(tokens)
		for _, route := range []string{"direct", "disagg"} {
			b.Run(fmt.Sprintf("%s/%dk", route, k), func(b *testing.B) {
				threshold := 0
				if route == "direct" {
					threshold = 4 * tokens
				}
				d := benchDriver(b, code, benchPlugin(threshold))
				cpuPerRequest(b, d, body, route == "disagg", answer)
				b.ReportMetric(float64(est), "est-tokens")
			})
		}
	}
}

// BenchmarkFilterTurns is BenchmarkFilterCPU, disaggregated, on
// conversations: the same prompts split into 10 or 100 turns, user and
// assistant in turn, which is how long prompts mostly come (a turn is
// shorter than the 32 KB from which a string is read in part by itself;
// tokenest reads such turns in part by the body instead).
func BenchmarkFilterTurns(b *testing.B) {
	code := pluginCode(b)
	for _, row := range []struct{ k, turns int }{{8, 10}, {32, 10}, {32, 100}, {128, 100}} {
		body := turnsOfTokens(b, row.k, row.turns)
		answer := prefillAnswer(row.k << 10)
		b.Run(fmt.Sprintf("%dk/%d", row.k, row.turns), func(b *testing.B) {
			cpuPerRequest(b, benchDriver(b, code, benchPlugin(0)), body, true, answer)
		})
	}
}

// turnsOfTokens is chatOfTokens's prompt in n turns of equal length.
func turnsOfTokens(b *testing.B, k, n int) []byte {
	var m struct {
		Messages []struct{ Content string }
	}
	if err := json.Unmarshal(chatOfTokens(b, k, nil), &m); err != nil {
		b.Fatal(err)
	}
	text := m.Messages[0].Content
	msgs := make([]map[string]string, n)
	for i := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs[i] = map[string]string{"role": role, "content": text[i*len(text)/n : (i+1)*len(text)/n]}
	}
	body, err := json.Marshal(map[string]any{"model": "mock-model", "max_tokens": 4, "messages": msgs})
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkFloorCPU runs e2e/floorfilter as BenchmarkFilterCPU runs the
// filter, disaggregated: the least a Go-wasm filter does for the request
// (host calls, copies, the emulator), without and with tokenest's
// estimate. BenchmarkFilterCPU minus "estimate" is what pdroute's own
// logic costs on top.
func BenchmarkFloorCPU(b *testing.B) {
	code := floorCode(b)
	for _, k := range []int{1, 8, 32, 128} {
		body := chatOfTokens(b, k, nil)
		answer := prefillAnswer(k << 10)
		for _, conf := range []string{"bare", "estimate"} {
			b.Run(fmt.Sprintf("%s/%dk", conf, k), func(b *testing.B) {
				cpuPerRequest(b, benchDriver(b, code, []byte(conf)), body, true, answer)
			})
		}
	}
}

// BenchmarkFilterFixed is the filter's cost on a chat request of one word:
// what every request costs whatever its length.
func BenchmarkFilterFixed(b *testing.B) {
	code := pluginCode(b)
	body := chat("hello", nil)
	answer := prefillAnswer(16)
	for _, route := range []string{"direct", "disagg"} {
		b.Run(route, func(b *testing.B) {
			threshold := 0
			if route == "direct" {
				threshold = 1 << 20
			}
			cpuPerRequest(b, benchDriver(b, code, benchPlugin(threshold)), body, route == "disagg", answer)
		})
	}
}

// benchPlugin is a nixl configuration with one prefiller and one decoder,
// round_robin: the fixed cost without the prefix index
// (BenchmarkCacheAwareCPU measures cache_aware's).
func benchPlugin(threshold int) []byte {
	return []byte(fmt.Sprintf(`{"mode":"nixl","threshold_tokens":%d,`+
		`"prefill":{"strategy":"round_robin","endpoints":[{"name":"p","address":"10.0.0.1:8000"}]},`+
		`"decode":{"strategy":"round_robin","endpoints":[{"name":"d","address":"10.0.0.2:8000"}]}}`, threshold))
}

// benchDriver is one warm VM of code that serves every request, as an
// Envoy worker's does: answered calls leave the Driver (startBenchDriver).
// The test's end closes it.
func benchDriver(b *testing.B, code, plugin []byte) *envoyemu.Driver {
	d, err := startBenchDriver(code, plugin, stack.EmulatedEnvoy)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(d.Close)
	return d
}

// cpuPerRequest times b.N requests through d after one that grows the VM's
// memory, and reports this process's CPU time per request (CPU time moves
// less than wall time on a shared machine; BENCHMARKS.md: noise) and the
// VM calls per request.
func cpuPerRequest(b *testing.B, d *envoyemu.Driver, body []byte, disagg bool, answer []byte) {
	driveRequest(b, d, body, disagg, answer)
	var calls int64
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for range b.N {
		before := d.Stats().Calls
		driveRequest(b, d, body, disagg, answer)
		calls += d.Stats().Calls - before
	}
	cpu := processCPU() - cpu0
	b.ReportMetric(float64(calls)/float64(b.N), "vmcalls/op")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// floorCode is e2e/floorfilter's module.
func floorCode(t testing.TB) []byte {
	t.Helper()
	code, err := os.ReadFile(wasmbuild.ForTest(t, "./e2e/floorfilter"))
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// requestChunk is how Envoy hands a request body to filters here (the
// emulator's read size).
const requestChunk = 16 << 10

// driveRequest runs one chat request through d.
func driveRequest(b *testing.B, d *envoyemu.Driver, body []byte, disagg bool, answer []byte) {
	id := d.InitializeHttpContext()
	headers := [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "pdroute"},
		{"content-type", "application/json"}, {"content-length", strconv.Itoa(len(body))}}
	d.CallOnRequestHeaders(id, headers, false)
	for off := 0; off < len(body); off += requestChunk {
		end := min(off+requestChunk, len(body))
		d.CallOnRequestBody(id, body[off:end], end == len(body))
	}
	if disagg {
		pending := d.PendingHTTPCallouts()
		if len(pending) != 1 {
			b.Fatalf("%d pending calls, want the prefill (VM failure %.300q)", len(pending), d.Failed())
		}
		d.CallOnHttpCallResponse(pending[0], [][2]string{{":status", "200"}, {"content-type", "application/json"}}, nil, answer)
		if d.ContinueCount(id, false) != 1 {
			b.Fatalf("request not resumed after the prefill answer: %+v", d.SentLocalResponse(id))
		}
	} else if d.CurrentHttpStreamAction(id) != 0 {
		b.Fatalf("direct request paused: %+v (VM failure %.300q)", d.SentLocalResponse(id), d.Failed())
	}
	d.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
	d.CallOnResponseBody(id, []byte(`{"id":"x","object":"chat.completion","choices":[]}`), true)
	d.CompleteHttpContext(id)
}

// prefillAnswer is a vLLM NixlConnector prefill answer for a prompt of
// tokens tokens: one KV block id per 16 tokens.
func prefillAnswer(tokens int) []byte {
	var ids strings.Builder
	for i := range tokens / 16 {
		if i > 0 {
			ids.WriteByte(',')
		}
		ids.WriteString(strconv.Itoa(i))
	}
	return []byte(`{"id":"cmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"length"}],` +
		`"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[` + ids.String() +
		`],"remote_engine_id":"e1","remote_request_id":"r1","remote_host":"10.0.0.1","remote_port":5600,"tp_size":1}}`)
}

// BenchmarkAddedLatency compares a short request sent straight to a mock
// decoder with the same request through the proxy (direct path): the
// difference is what the proxy and the filter add.
func BenchmarkAddedLatency(b *testing.B) {
	s := start(b, benchTopology(config.ModeNIXL, 1, nil))
	body := completion(shortPrompt, map[string]any{"max_tokens": 1})
	for _, tc := range []struct{ name, url string }{
		{"mock", s.Decode[0].Addresses.URL},
		{"proxy", s.URL},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				benchSend(b, tc.url+"/v1/completions", body)
			}
		})
	}
}

// BenchmarkPeakMemory sends 10 000 mixed requests at concurrency 64 (half
// short, 40% long, 10% long streamed chat) and reports the largest wasm
// memory of a worker VM afterwards (memory never shrinks, so it is the
// peak). Run it with -benchtime=1x.
func BenchmarkPeakMemory(b *testing.B) {
	if testing.Short() {
		b.Skip("sends 10 000 requests")
	}
	s := start(b, benchTopology(config.ModeNIXL, 2, nil))
	h := s.Emulator()
	if h == nil {
		b.Skip("needs the emulator's VM statistics")
	}
	const total, concurrency = 10_000, 64
	bodies := []struct {
		path string
		body []byte
	}{
		{"/v1/completions", completion(shortPrompt, map[string]any{"max_tokens": 2})},
		{"/v1/completions", completion(longPrompt, map[string]any{"max_tokens": 2})},
		{"/v1/chat/completions", chat(longPrompt, map[string]any{"max_tokens": 4, "stream": true})},
	}
	mix := func(i int) int {
		switch {
		case i%10 < 5:
			return 0
		case i%10 < 9:
			return 1
		}
		return 2
	}
	var failed atomic.Int64
	b.ResetTimer()
	for range b.N {
		next := make(chan int, total)
		for i := range total {
			next <- i
		}
		close(next)
		var wg sync.WaitGroup
		for range concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					req := bodies[mix(i)]
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					r, err := stack.Send(ctx, benchClient, http.MethodPost, s.URL+req.path, req.body, nil)
					cancel()
					if err != nil || r.Status != 200 {
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d requests failed", n)
	}
	var pages uint32
	for _, vm := range h.Plugins()[0].Workers {
		pages = max(pages, vm.MemoryPages)
	}
	b.ReportMetric(float64(pages), "pages/VM")
	b.ReportMetric(float64(pages)*64/1024, "MiB/VM")
}

// BenchmarkNativeVsFilter sends the same disaggregated request through the
// filter in the proxy and through the native-Go router (e2e/nativeproxy)
// over the same mocks. cpu-ns/op is this whole process's CPU per request
// (client, proxy, mocks): the mocks' share is the same on both sides, so
// the difference is the router's.
func BenchmarkNativeVsFilter(b *testing.B) {
	s := start(b, benchTopology(config.ModeNIXL, 2, nil))
	native := startNative(b, s)
	// the stacks' long prompt, and 55k tokens (220 KB), where routers
	// differ most; with -count, the rows of both routers take turns
	for _, size := range []struct {
		name string
		body []byte
	}{{"long", completion(longPrompt, map[string]any{"max_tokens": 1})}, {"55k", completion(text(220<<10), map[string]any{"max_tokens": 1})}} {
		// the client doing both legs itself, straight to the mocks: what
		// the other rows spend outside the router (client and mocks), so
		// that a row less this one is its router's CPU per request
		b.Run(size.name+"/client", func(b *testing.B) {
			cpu := processCPU()
			for range b.N {
				clientLegs(b, s, size.body)
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
		for _, tc := range []struct{ name, url string }{{"filter", s.URL}, {"native", native}} {
			b.Run(size.name+"/"+tc.name, func(b *testing.B) {
				cpu := processCPU()
				for range b.N {
					if r := benchSend(b, tc.url+"/v1/completions", size.body); r.Header.Get("x-pdroute-path") != "disagg" {
						b.Fatalf("path %q", r.Header.Get("x-pdroute-path"))
					}
				}
				b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// clientLegs sends a completions body's nixl prefill and decode legs
// straight to the first prefill and decode mocks, as the routers would.
func clientLegs(b *testing.B, s *stack.Stack, body []byte) {
	req, err := connector.NewRequest(config.APICompletions, body)
	if err != nil {
		b.Fatal(err)
	}
	pre := benchSend(b, s.Prefill[0].Addresses.URL+"/v1/completions", connector.NIXLPrefill(req))
	ans, err := connector.ParsePrefillAnswer(pre.Body)
	if err != nil {
		b.Fatal(err)
	}
	benchSend(b, s.Decode[0].Addresses.URL+"/v1/completions", connector.NIXLDecode(req, ans.KVParams).Apply(body))
}

// BenchmarkSGLangTTFT measures time to first token of a streamed long
// request in sglang mode through the proxy, against a client that speaks
// the bootstrap protocol itself (prefill and decode sent at once, as
// SGLang's mini_lb does): the filter's added TTFT, which should be near
// zero because the decode leg leaves without waiting for the prefill.
func BenchmarkSGLangTTFT(b *testing.B) {
	topo := benchTopology(config.ModeSGLang, 1, map[string]any{"threshold_tokens": 0})
	s := start(b, topo)
	body := chat(longPrompt, map[string]any{"stream": true, "max_tokens": 2})
	pre, dec := s.Prefill[0].Addresses, s.Decode[0].Addresses
	b.Run("proxy", func(b *testing.B) {
		var ttft time.Duration
		for range b.N {
			ttft += firstContent(b, benchSend(b, s.URL+"/v1/chat/completions", body))
		}
		b.ReportMetric(float64(ttft.Microseconds())/1000/float64(b.N), "ttft-ms")
	})
	b.Run("client", func(b *testing.B) {
		var ttft time.Duration
		for range b.N {
			room := rand.Uint64() >> 1
			both := chat(longPrompt, map[string]any{"stream": true, "max_tokens": 2, "bootstrap_host": "127.0.0.1",
				"bootstrap_port": pre.BootstrapPort(), "bootstrap_room": room})
			done := make(chan struct{})
			go func() {
				defer close(done)
				benchSend(b, pre.URL+"/v1/chat/completions", both)
			}()
			ttft += firstContent(b, benchSend(b, dec.URL+"/v1/chat/completions", both))
			<-done
		}
		b.ReportMetric(float64(ttft.Microseconds())/1000/float64(b.N), "ttft-ms")
	})
}

// firstContent is when the first event with generated text arrived.
func firstContent(b *testing.B, r *response) time.Duration {
	for _, ev := range r.Events {
		if strings.Contains(ev.Data, `"content":"`) && !strings.Contains(ev.Data, `"content":""`) {
			return ev.At
		}
	}
	b.Fatalf("no token in %s", r.Body)
	return 0
}

// BenchmarkLMCacheWake measures, in lmcache mode, the time from a KV-ready
// notification leaving a prefiller rank (sent by the benchmark, once the
// prefill has answered) to the decode request reaching the mock decoder:
// kvbridge's wake-up, its long-poll answer, the filter resuming the request
// and Envoy routing it. Reports p50-ms and p99-ms.
func BenchmarkLMCacheWake(b *testing.B) {
	s := start(b, benchTopology(config.ModeLMCache, 1, nil))
	pre, dec := s.Prefill[0], s.Decode[0]
	ctx := context.Background()
	if err := pre.Control.SetFaults(ctx, mocks.Fault{Type: mocks.FaultNotifyDrop}); err != nil {
		b.Fatal(err)
	}
	snd, err := zmqpush.Dial(ctx, s.KVBridge.ZMQEndpoint())
	if err != nil {
		b.Fatal(err)
	}
	defer snd.Close()
	body := completion(longPrompt, map[string]any{"max_tokens": 2})
	var seqP, seqD uint64
	samples := make([]time.Duration, 0, b.N)
	for range b.N {
		res := async(s, "/v1/completions", body)
		var id string
		for id == "" {
			rs, err := pre.Control.Requests(ctx, mocks.RequestFilter{Since: seqP, Kind: "prefill"})
			if err != nil {
				b.Fatal(err)
			}
			if len(rs) == 1 && rs[0].Status != 0 {
				seqP = rs[0].Seq
				m, _ := rs[0].JSON()
				id = str(get(m, "kv_transfer_params", "disagg_spec", "req_id"))
				break
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(5 * time.Millisecond) // let the filter take the prefill answer
		sent := time.Now()
		if err := snd.Send(kvbridge.EncodeNotification("ProxyNotif", id)); err != nil {
			b.Fatal(err)
		}
		if r := res.wait(b); r.Status != 200 || r.kv() != mocks.KVTransferred {
			b.Fatalf("got %d kv %q: %s", r.Status, r.kv(), r.Body)
		}
		rs, err := dec.Control.Requests(ctx, mocks.RequestFilter{Since: seqD, Kind: "decode"})
		if err != nil || len(rs) != 1 {
			b.Fatalf("decode records %v %v", rs, err)
		}
		seqD = rs[0].Seq
		samples = append(samples, rs[0].Time.Sub(sent))
	}
	slices.Sort(samples)
	pct := func(p float64) float64 {
		return float64(samples[int(p*float64(len(samples)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
