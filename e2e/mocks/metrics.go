package mocks

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
)

// metric is one Prometheus family with a single sample.
type metric struct {
	name, help, typ string
	value           float64
}

// handleMetrics serves GET /metrics in the engine's format: Python prometheus_client's
// text exposition (floats as Python prints them, "1.0"), with vLLM's labels
// model_name and engine, or SGLang's model_name.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	q := s.sched
	usage := min(float64(q.blocks.Load()+int64(s.leases.blocks()))/float64(s.cfg.KVCacheBlocks), 1)
	running, waiting := float64(q.running.Load()), float64(q.waiting.Load())
	if s.live != nil {
		// The performance model's own batch and queue (Config.Perf).
		r, w, u := s.live.Stats()
		running, waiting, usage = float64(r), float64(w), u
	}
	var ms []metric
	labels := fmt.Sprintf(`{model_name=%q,engine="0"}`, s.cfg.Model)
	if s.cfg.Kind == SGLang {
		labels = fmt.Sprintf(`{model_name=%q}`, s.cfg.Model)
		ms = []metric{
			{"sglang:num_running_reqs", "The number of running requests.", "gauge", running},
			{"sglang:num_queue_reqs", "The number of requests in the waiting queue.", "gauge", waiting},
			{"sglang:token_usage", "The token usage.", "gauge", usage},
			{"sglang:num_decode_transfer_queue_reqs", "The number of requests in the decode transfer queue.", "gauge", float64(q.transferring.Load())},
			{"sglang:prompt_tokens_total", "Number of prefill tokens processed.", "counter", float64(q.promptTokens.Load())},
			{"sglang:generation_tokens_total", "Number of generation tokens processed.", "counter", float64(q.generationTokens.Load())},
		}
	} else {
		ms = []metric{
			{"vllm:num_requests_running", "Number of requests in model execution batches.", "gauge", running},
			{"vllm:num_requests_waiting", "Number of requests waiting to be processed.", "gauge", waiting},
			{"vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "gauge", usage},
			{"vllm:prompt_tokens_total", "Number of prefill tokens processed.", "counter", float64(q.promptTokens.Load())},
			{"vllm:generation_tokens_total", "Number of generation tokens processed.", "counter", float64(q.generationTokens.Load())},
		}
	}
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s%s %s\n", m.name, m.help, m.name, m.typ, m.name, labels, pyFloat(m.value))
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write([]byte(b.String()))
}

// pyFloat formats v like Python's repr(float), which prometheus_client uses: "3.0",
// "0.25", "1e-05", "1e+16", "+Inf", "NaN".
func pyFloat(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	if a := math.Abs(v); a != 0 && (a < 1e-4 || a >= 1e16) {
		return strconv.FormatFloat(v, 'e', -1, 64)
	}
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
