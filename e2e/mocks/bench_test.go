package mocks

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"
)

func BenchmarkTokenize(b *testing.B) {
	text := longPrompt(1000) // ~3 KB of prompt text, 1000 tokens
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		Tokenize(text)
	}
}

func BenchmarkGenerate(b *testing.B) {
	prompt := Tokenize(longPrompt(1000))
	b.ReportAllocs()
	for b.Loop() {
		generate(prompt, limits{max: 128, ignoreEOS: true})
	}
}

// benchmarkHTTP measures the mock's own overhead per request with a latency model of
// (almost) zero: what it adds to a scenario beyond the configured latencies.
func benchmarkHTTP(b *testing.B, path, body string) {
	s := start(b, Config{Kind: VLLM, MaxConcurrency: -1,
		Latency: Latency{PrefillPerToken: time.Nanosecond, TransferredPrefill: time.Nanosecond, PerOutputToken: time.Nanosecond}})
	url := s.URL() + path
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Post(url, "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

func BenchmarkCompletionJSON(b *testing.B) {
	benchmarkHTTP(b, "/v1/completions", `{"model":"m","prompt":"a benchmark prompt","max_tokens":16,"ignore_eos":true}`)
}

func BenchmarkChatStream(b *testing.B) {
	benchmarkHTTP(b, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"a benchmark prompt"}],"max_tokens":16,"ignore_eos":true,"stream":true}`)
}
