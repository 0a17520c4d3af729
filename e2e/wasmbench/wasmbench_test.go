package wasmbench

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/envoyemu"
	"github.com/pdroute/pdroute/e2e/wasmbuild"
)

// chatBody is a chat request whose one user message holds about tokens
// cl100k tokens of a class's checked-in sample texts (tokenest's accuracy
// samples), repeated: real prose, code and Chinese rather than one sentence
// over and over, which would let branchy scanners predict every branch.
func chatBody(tb testing.TB, class string, tokens int) []byte { return turnsBody(tb, class, tokens, 1) }

// turnsBody is chatBody's text in a conversation of n turns of about equal
// length (user and assistant in turn), cut at the samples' paragraph
// breaks.
func turnsBody(tb testing.TB, class string, tokens, n int) []byte {
	tb.Helper()
	data, err := os.ReadFile("../../tokenest/testdata/samples/" + class + ".jsonl")
	if err != nil {
		tb.Fatal(err)
	}
	var text strings.Builder
	for n := 0; n < tokens; {
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var s struct {
				Text   string `json:"text"`
				Cl100k int    `json:"cl100k"`
			}
			if err := json.Unmarshal([]byte(line), &s); err != nil {
				tb.Fatal(err)
			}
			text.WriteString(s.Text)
			text.WriteString("\n\n")
			if n += s.Cl100k; n >= tokens {
				break
			}
		}
	}
	all := text.String()
	var msgs []map[string]string
	for i, at := 0, 0; i < n; i++ {
		end := len(all)
		if i < n-1 {
			end = max(at, min(len(all), (i+1)*len(all)/n))
			if k := strings.Index(all[end:], "\n\n"); k >= 0 {
				end += k + 2
			} else {
				end = len(all)
			}
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": all[at:end]})
		at = end
	}
	b, err := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// toolsBody is a chat request as agents send them: one short user message
// and every distinct tool definition of tokenest's chat samples (as
// tokenest's BenchmarkEstimateTools body), whose bytes are nearly all of it.
func toolsBody(tb testing.TB) []byte {
	tb.Helper()
	data, err := os.ReadFile("../../tokenest/testdata/samples/chat.jsonl")
	if err != nil {
		tb.Fatal(err)
	}
	var tools []json.RawMessage
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var s struct {
			Body struct{ Tools []json.RawMessage } `json:"body"`
		}
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			tb.Fatal(err)
		}
		for _, t := range s.Body.Tools {
			if !seen[string(t)] {
				seen[string(t)] = true
				tools = append(tools, t)
			}
		}
	}
	b, err := json.Marshal(map[string]any{"model": "m", "tools": tools,
		"messages": []map[string]string{{"role": "user", "content": "What is the weather in Paris, and is my 3pm meeting still on?"}}})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkTokenestInWasm is tokenest.Estimate's throughput inside the wasm
// VM. Each op is one request: its body is copied into the VM and estimated;
// the "read" variant only copies, so estimate MB/s ≈ bytes / (ns(method) −
// ns(read)); "near" is the filter's estimate (EstimateNear, long strings
// read in part). Reported MB/s include the copy. "cached" and "cached-chars4"
// estimate through a tokenest.Cache, as the filter does: they run the agent
// body alone, whose definitions the Cache holds after the first request.
func BenchmarkTokenestInWasm(b *testing.B) {
	code, err := os.ReadFile(wasmbuild.ForTest(b, "./e2e/wasmbench/testdata/estimator"))
	if err != nil {
		b.Fatal(err)
	}
	for _, method := range []string{"read", "chars4", "default", "near", "cached", "cached-chars4"} {
		d, err := envoyemu.NewDriver(code, envoyemu.DriverOptions{PluginConfig: []byte(method), LogLevel: envoyemu.LevelWarn})
		if err != nil {
			b.Fatal(err)
		}
		if !d.StartVM() || !d.StartPlugin() {
			b.Fatalf("%s: start failed: %s", method, d.Failed())
		}
		for _, class := range []string{"english", "chinese", "code"} {
			if strings.HasPrefix(method, "cached") {
				break // as without the cache: no tool definitions
			}
			for _, size := range []struct {
				name   string
				tokens int
			}{{"1k", 1 << 10}, {"8k", 8 << 10}, {"32k", 32 << 10}, {"128k", 128 << 10}} {
				run(b, d, method+"/"+class+"/"+size.name, chatBody(b, class, size.tokens))
			}
			if method == "default" || method == "near" {
				// conversations: the 32k prompt in 10 and 100 turns
				for _, n := range []int{10, 100} {
					run(b, d, fmt.Sprintf("%s/%s/32k/%dturns", method, class, n), turnsBody(b, class, 32<<10, n))
				}
			}
		}
		run(b, d, method+"/29tools", toolsBody(b))
		d.Close()
	}
}

// run is one row of BenchmarkTokenestInWasm: body sent as a chat request
// to the VM d, one request per op.
func run(b *testing.B, d *envoyemu.Driver, name string, body []byte) {
	b.Run(name, func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		cpu := processCPU()
		for range b.N {
			id := d.InitializeHttpContext()
			d.CallOnRequestHeaders(id, [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "x"}}, false)
			d.CallOnRequestBody(id, body, true)
			d.CompleteHttpContext(id)
		}
		// CPU time moves less than wall time on a shared machine
		b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
		if f := d.Failed(); f != "" {
			b.Fatal(f)
		}
	})
}

// processCPU is this process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFilterPhasesInWasm splits the filter's work on a disaggregated
// nixl request inside the VM into phases (testdata/phases): each row runs
// the request path up to its phase, so a phase costs its row minus the row
// before ("whole" is "read" plus the estimate reading the whole body, for
// comparison with "estimate"). English chat bodies of 8k and 55k tokens (32
// KB and 220 KB).
func BenchmarkFilterPhasesInWasm(b *testing.B) {
	code, err := os.ReadFile(wasmbuild.ForTest(b, "./e2e/wasmbench/testdata/phases"))
	if err != nil {
		b.Fatal(err)
	}
	bodies := []struct {
		name string
		body []byte
	}{{"8k", chatBody(b, "english", 8<<10)}, {"55k", chatBody(b, "english", 55<<10)}}
	for _, phase := range []string{"read", "whole", "estimate", "index", "prefill", "decode"} {
		d, err := envoyemu.NewDriver(code, envoyemu.DriverOptions{PluginConfig: []byte(phase), LogLevel: envoyemu.LevelWarn})
		if err != nil {
			b.Fatal(err)
		}
		if !d.StartVM() || !d.StartPlugin() {
			b.Fatalf("%s: start failed: %s", phase, d.Failed())
		}
		for _, c := range bodies {
			run(b, d, c.name+"/"+phase, c.body)
		}
		d.Close()
	}
}
