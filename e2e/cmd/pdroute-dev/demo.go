package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
)

// demoRequest is one request the demo sends.
type demoRequest struct {
	title  string
	prompt string
	stream bool
	// completions: POST /v1/completions instead of /v1/chat/completions.
	completions bool
}

// demoPrompt is a long prompt: about 600 estimated tokens, over the dev
// threshold (512).
var demoPrompt = strings.TrimSpace(strings.Repeat("Summarise the history of the lighthouse keepers of the northern coast, their logbooks and storms. ", 30))

// demoPrompt2 is another long prompt: the dev stack decides on the tokens
// the chosen decoder does not hold (threshold_on "uncached"), so a repeat of
// demoPrompt would be served by its decoder without a prefill.
var demoPrompt2 = strings.TrimSpace(strings.Repeat("Describe how the harbour pilots of the southern estuary read tides, charts and weather. ", 30))

// demo sends the three requests and explains each; 0 when all succeeded.
func demo(s *stack.Stack, why string, w, stderr io.Writer) int {
	fmt.Fprintf(w, "\npdroute demo: mode %s, %s\n", s.Topology.Mode, thresholdText(s.Config))
	fmt.Fprintf(w, "proxy: %s\n       %s\n", s.ProxyName(), why)
	fmt.Fprintf(w, "requests: %s\n", strings.ReplaceAll(wayText(s), "\n              ", "\n          "))
	fmt.Fprintf(w, "engines: %d mock prefill and %d mock decode engines (%s)\n", len(s.Prefill), len(s.Decode), s.Prefill[0].Addresses.Engine)
	reqs := []demoRequest{
		{"a short prompt", "Say hello in one word.", false, false},
		{"a long prompt", demoPrompt, false, false},
		{"a long prompt, streamed", demoPrompt2, true, false},
	}
	if s.Topology.NoStopIteration && s.Config.HeadersWayDirect(config.APIChat) {
		// lmcache on the headers way disaggregates /v1/completions only.
		reqs = append(reqs, demoRequest{"a long prompt to /v1/completions, streamed", demoPrompt, true, true})
	}
	for i, r := range reqs {
		if err := demoOne(s, i+1, r, w); err != nil {
			fmt.Fprintf(stderr, "pdroute-dev: demo request %d (%s): %v\n", i+1, r.title, err)
			return 1
		}
	}
	fmt.Fprintf(w, "\nThe filter chose the path from its token estimate, picked the engines, ran the prefill leg itself\n"+
		"and handed the decoder the prefill's KV; the decoder's answer streamed back through the proxy.\n")
	return 0
}

func demoOne(s *stack.Stack, n int, r demoRequest, w io.Writer) error {
	req := map[string]any{"model": "mock-model", "max_tokens": 16, "stream": r.stream}
	path := "/v1/chat/completions"
	if r.completions {
		path, req["prompt"] = "/v1/completions", r.prompt
	} else {
		req["messages"] = []map[string]string{{"role": "user", "content": r.prompt}}
	}
	body, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	resp, err := stack.Send(ctx, nil, "POST", s.URL+path, body, nil)
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		return fmt.Errorf("status %d: %s", resp.Status, resp.Body)
	}
	h := resp.Header
	route := h.Get("x-pdroute-path")
	fmt.Fprintf(w, "\n%d. %s (%d characters), POST %s\n", n, r.title, len(r.prompt), path)
	meaning := routeMeaning(route)
	if route == "direct" && !r.completions && s.Topology.NoStopIteration && s.Config.HeadersWayDirect(config.APIChat) &&
		len(r.prompt) > 1000 {
		meaning = "lmcache on the headers way sends chat straight to a decoder (its decode leg would need /v1/completions)"
	}
	fmt.Fprintf(w, "   path     %-12s %s\n", route, meaning)
	fmt.Fprintf(w, "   tokens   %-12s estimated input tokens (threshold %d)\n", h.Get("x-pdroute-tokens"), s.Config.ThresholdTokens)
	prefill := h.Get("x-pdroute-prefill")
	if prefill == "" {
		prefill = "-"
	}
	fmt.Fprintf(w, "   prefill  %s\n", prefill)
	fmt.Fprintf(w, "   decode   %s\n", h.Get("x-pdroute-decode"))
	kv := h.Get("x-mock-kv")
	if kv == "" {
		kv = lastDecodeKV(ctx, s, h.Get("x-pdroute-decode"))
	}
	fmt.Fprintf(w, "   KV       %-12s %s\n", kv, kvMeaning(kv))
	if r.stream {
		ttft := firstToken(resp.Events)
		fmt.Fprintf(w, "   timing   first token after %s, whole answer after %s (%d events streamed)\n", ms(ttft), ms(resp.Total), len(resp.Events))
	} else {
		fmt.Fprintf(w, "   timing   answer after %s (not streamed: the first token comes with the whole answer)\n", ms(resp.Total))
	}
	return nil
}

// lastDecodeKV reads the KV outcome from the decoder's own record (SGLang
// decoders send their headers before they know it).
func lastDecodeKV(ctx context.Context, s *stack.Stack, decoder string) string {
	e := s.Engine(decoder)
	if e == nil {
		return "unknown"
	}
	rs, err := e.Control.Requests(ctx, mocks.RequestFilter{Kind: "decode"})
	if err != nil || len(rs) == 0 || rs[len(rs)-1].KV == "" {
		return "unknown"
	}
	return rs[len(rs)-1].KV
}

func routeMeaning(route string) string {
	switch route {
	case "direct":
		return "below the threshold: sent straight to a decoder, which computes the prompt itself"
	case "disagg":
		return "at or over the threshold: prefill on a prefill engine, then decode on a decode engine"
	case "fallback":
		return "the prefill failed, so the decoder computed the prompt itself"
	}
	return ""
}

func kvMeaning(kv string) string {
	switch kv {
	case mocks.KVTransferred:
		return "the decoder received the prompt's KV cache from the prefill engine"
	case mocks.KVRecomputed:
		return "the decoder computed the prompt's KV cache itself"
	}
	return ""
}

// firstToken is when the first event carrying generated text arrived.
func firstToken(evs []stack.Event) time.Duration {
	for _, ev := range evs {
		if strings.Contains(ev.Data, `"content":"`) && !strings.Contains(ev.Data, `"content":""`) {
			return ev.At
		}
	}
	if len(evs) > 0 {
		return evs[0].At
	}
	return 0
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}
