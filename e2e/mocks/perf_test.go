package mocks

import (
	"strings"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/engine"
)

// With Config.Perf the engine model times the answer: a long prompt takes
// its prefill time, and repeating it hits the prefix cache.
func TestPerfModelTimesAnswers(t *testing.T) {
	p := engine.Profiles[engine.DefaultProfile]
	s, err := Start(Config{Kind: VLLM, Perf: &p, PerfScale: 1, MaxModelLen: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prompt := strings.Repeat("lorem ipsum dolor sit amet ", 1500) // ~6000 mock tokens
	body := []byte(`{"model":"m","prompt":"` + prompt + `","max_tokens":2,"ignore_eos":true}`)
	n, err := PromptTokens("/v1/completions", body)
	if err != nil {
		t.Fatal(err)
	}
	ttfb := func() time.Duration {
		start := time.Now()
		resp := post(t, s.Addresses().URL+"/v1/completions", string(body))
		if resp.status != 200 {
			t.Fatalf("status %d: %s", resp.status, resp.body)
		}
		return time.Since(start)
	}
	// Model: step base + n × per-token + attention, then one decode step.
	first := ttfb()
	want := time.Duration(n) * p.PerPrefillToken
	if first < want {
		t.Errorf("first request took %v, the model's prefill alone is %v (%d tokens)", first, want, n)
	}
	if again := ttfb(); again > first/2 {
		t.Errorf("repeated prompt took %v, first %v: no prefix-cache hit", again, first)
	}
}
