package scenarios

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
)

// Issue 5: nixl mode (vLLM NixlConnector) and orchestrated mode, two
// worker VMs, two prefill and two decode engines unless said otherwise.

// TestNIXL runs the request-level scenarios on one stack with
// on_prefill_failure "fallback"; every subtest resets the mocks first.
func TestNIXL(t *testing.T) { bothWays(t, testNIXL) }

func testNIXL(t *testing.T) {
	t.Parallel()
	s := start(t, modeTopology(config.ModeNIXL, map[string]any{
		"prefill_timeout_ms": 800,
		"max_body_bytes":     256 << 10,
	}))

	t.Run("short_prompt_direct", func(t *testing.T) {
		reset(t, s)
		r := post(t, s, "/v1/completions", completion(shortPrompt, nil), nil)
		r.expect(t, 200, "direct")
		if r.kv() != mocks.KVRecomputed || !strings.HasPrefix(r.Header.Get("x-mock-name"), "decode-") {
			t.Errorf("decoder %q kv %q: want a decoder that recomputed", r.Header.Get("x-mock-name"), r.kv())
		}
		if n := len(recorded(t, s.Prefill, "")); n != 0 {
			t.Errorf("prefill engines got %d requests for a short prompt, want 0", n)
		}
		if r.Header.Get("x-pdroute-prefill") != "" {
			t.Errorf("x-pdroute-prefill = %q on a direct request", r.Header.Get("x-pdroute-prefill"))
		}
	})

	t.Run("long_prompt_disagg", func(t *testing.T) {
		reset(t, s)
		body := completion(longPrompt, map[string]any{
			"max_tokens": 8, "min_tokens": 2, "stream": true,
			"stream_options": map[string]any{"include_usage": true},
		})
		r := post(t, s, "/v1/completions", body, nil)
		r.expect(t, 200, "disagg")
		if r.kv() != mocks.KVTransferred {
			t.Errorf("decoder says %q (%s), want transferred", r.kv(), r.Header.Get("x-mock-kv-reason"))
		}
		pre, pb := only(t, recorded(t, s.Prefill, "prefill"), "prefill")
		dec, db := only(t, recorded(t, s.Decode, "decode"), "decode")
		// The prefill leg: one token, not streamed, no min_tokens.
		if pb["max_tokens"] != 1.0 || pb["stream"] != false {
			t.Errorf("prefill max_tokens %v stream %v: want 1 and false", pb["max_tokens"], pb["stream"])
		}
		for _, k := range []string{"min_tokens", "stream_options"} {
			if _, ok := pb[k]; ok {
				t.Errorf("prefill body still has %s", k)
			}
		}
		if get(pb, "kv_transfer_params", "do_remote_decode") != true {
			t.Errorf("prefill kv_transfer_params = %v", pb["kv_transfer_params"])
		}
		// The decode leg: the client's own body plus the prefill's params.
		if db["max_tokens"] != 8.0 || db["min_tokens"] != 2.0 || db["stream"] != true || db["stream_options"] == nil {
			t.Errorf("decode body lost the client's fields: %v", db)
		}
		prefiller := s.Engine(r.Header.Get("x-pdroute-prefill"))
		if prefiller == nil || len(requests(t, prefiller, mocks.RequestFilter{Kind: "prefill"})) != 1 {
			t.Fatalf("x-pdroute-prefill %q does not name the engine that prefilled", r.Header.Get("x-pdroute-prefill"))
		}
		a := prefiller.Addresses
		if get(db, "kv_transfer_params", "remote_engine_id") != a.EngineID ||
			net.JoinHostPort(str(get(db, "kv_transfer_params", "remote_host")), num(get(db, "kv_transfer_params", "remote_port"))) != a.SideChannel {
			t.Errorf("decode kv_transfer_params %v do not point at %s (%s, %s)", db["kv_transfer_params"], prefiller.Name, a.EngineID, a.SideChannel)
		}
		if id := pre.Header.Get("x-request-id"); id == "" || dec.Header.Get("x-request-id") != id {
			t.Errorf("x-request-id: prefill %q decode %q, want one id on both legs", id, dec.Header.Get("x-request-id"))
		}
		if len(r.Events) < 3 || r.Events[len(r.Events)-1].Data != "[DONE]" {
			t.Errorf("stream events %d, last %+v: want a full SSE answer", len(r.Events), r.Events)
		}
	})

	t.Run("exactly_at_threshold", func(t *testing.T) {
		reset(t, s)
		build := func(p string) []byte { return chat(p, nil) }
		prompt, below := promptAt(t, stack.DefaultThreshold, "/v1/chat/completions", build)
		r := post(t, s, "/v1/chat/completions", build(prompt), nil)
		r.expect(t, 200, "disagg")
		if got := r.Header.Get("x-pdroute-tokens"); got != strconv.Itoa(stack.DefaultThreshold) {
			t.Errorf("filter estimated %s tokens, tokenest %d", got, stack.DefaultThreshold)
		}
		r = post(t, s, "/v1/chat/completions", build(prompt[:len(prompt)-1]), nil)
		r.expect(t, 200, "direct")
		if got := r.Header.Get("x-pdroute-tokens"); got != strconv.Itoa(below) {
			t.Errorf("one character shorter: filter estimated %s tokens, tokenest %d", got, below)
		}
	})

	t.Run("chat_stream_incremental", func(t *testing.T) {
		reset(t, s)
		for _, e := range s.Decode {
			l := fast
			l.PerOutputToken = 40 * time.Millisecond
			if err := e.Control.SetLatency(testCtx(t, controlTimeout), l); err != nil {
				t.Fatal(err)
			}
		}
		r := post(t, s, "/v1/chat/completions", chat(longPrompt, map[string]any{"stream": true, "max_tokens": 12, "ignore_eos": true}), nil)
		r.expect(t, 200, "disagg")
		var chunks []stack.Event
		for _, ev := range r.Events {
			if strings.Contains(ev.Data, `"content"`) {
				chunks = append(chunks, ev)
			}
		}
		if len(chunks) < 12 {
			t.Fatalf("%d content chunks, want 12: %s", len(chunks), r.Body)
		}
		// Twelve tokens 40 ms apart: the first must reach the client long
		// before the last is produced, or the proxy buffered the stream.
		if spread := chunks[len(chunks)-1].At - chunks[0].At; spread < 300*time.Millisecond {
			t.Errorf("first chunk at %s, last at %s: the stream arrived in one piece", chunks[0].At, chunks[len(chunks)-1].At)
		}
		if !strings.Contains(chunks[0].Data, `"chat.completion.chunk"`) {
			t.Errorf("first event is not a chat chunk: %s", chunks[0].Data)
		}
	})

	t.Run("prefill_500_fallback", func(t *testing.T) {
		reset(t, s)
		faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultStatus, Status: 500})
		before := stat(t, s, "pdroute.prefill_failures.server_error")
		r := post(t, s, "/v1/completions", completion(longPrompt, nil), nil)
		r.expect(t, 200, "fallback")
		if r.kv() != mocks.KVRecomputed {
			t.Errorf("decoder says %q, want recomputed after a failed prefill", r.kv())
		}
		if n := len(recorded(t, s.Prefill, "prefill")); n != 1 {
			t.Errorf("%d prefill attempts, want 1", n)
		}
		_, db := only(t, recorded(t, s.Decode, "decode"), "decode")
		if _, ok := db["kv_transfer_params"]; ok {
			t.Errorf("fallback decode body carries kv_transfer_params: %v", db["kv_transfer_params"])
		}
		if after := stat(t, s, "pdroute.prefill_failures.server_error"); after != before+1 {
			t.Errorf("prefill_failures.server_error %d → %d, want +1", before, after)
		}
	})

	t.Run("prefill_hang_timeout_fallback", func(t *testing.T) {
		reset(t, s)
		faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultHang})
		before := stat(t, s, "pdroute.prefill_failures.timeout")
		r := post(t, s, "/v1/completions", completion(longPrompt, nil), nil)
		r.expect(t, 200, "fallback")
		if r.Total < 800*time.Millisecond || r.Total > 10*time.Second {
			t.Errorf("answered after %s: want just after prefill_timeout_ms (800 ms)", r.Total)
		}
		if after := stat(t, s, "pdroute.prefill_failures.timeout"); after != before+1 {
			t.Errorf("prefill_failures.timeout %d → %d, want +1", before, after)
		}
	})

	t.Run("malformed_400", func(t *testing.T) {
		reset(t, s)
		var last *response
		for _, body := range []string{`{"prompt": "unterminated`, `[1,2,3]`, `{"model":"m","prompt":"a",}`} {
			last = post(t, s, "/v1/completions", []byte(body), nil)
			if last.Status != 400 || last.errorCode(t) != "INVALID_JSON" {
				t.Errorf("%s: got %d %s, want 400 INVALID_JSON", body, last.Status, last.Body)
			}
		}
		if n := len(recorded(t, s.Engines(), "")); n != 0 {
			t.Errorf("engines got %d requests for malformed bodies", n)
		}
		jsonContentType(t, last)
	})

	t.Run("oversize_413", func(t *testing.T) {
		reset(t, s)
		big := completion(text(300<<10), nil) // over max_body_bytes (256 KiB)
		r := post(t, s, "/v1/completions", big, nil)
		if r.Status != 413 || r.errorCode(t) != "REQUEST_TOO_LARGE" {
			t.Errorf("with content-length: got %d %s, want 413 REQUEST_TOO_LARGE", r.Status, r.Body)
		}
		// Without content-length the limit is found while buffering.
		req, _ := http.NewRequestWithContext(testCtx(t, 30*time.Second), http.MethodPost, s.URL+"/v1/completions", strings.NewReader(string(big)))
		req.Header.Set("content-type", "application/json")
		req.ContentLength = -1 // unknown: sent chunked
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 413 {
			t.Errorf("chunked: got %d, want 413", resp.StatusCode)
		}
		if n := len(recorded(t, s.Engines(), "")); n != 0 {
			t.Errorf("engines got %d requests for oversize bodies", n)
		}
	})

	t.Run("client_control_fields_ignored", func(t *testing.T) {
		reset(t, s)
		before := stat(t, s, "pdroute.sanitized_requests")
		evil := map[string]any{
			"do_remote_prefill": true, "remote_engine_id": "evil", "remote_block_ids": []int{1},
			"remote_request_id": "evil", "remote_host": "10.9.9.9", "remote_port": 9,
		}
		steer := map[string]string{
			"x-pdroute-cluster":         s.Prefill[1].Name,
			"x-envoy-original-dst-host": s.Prefill[0].Addr,
		}
		r := post(t, s, "/v1/completions", completion(longPrompt, map[string]any{"kv_transfer_params": evil}), steer)
		r.expect(t, 200, "disagg")
		if !strings.HasPrefix(r.Header.Get("x-mock-name"), "decode-") || r.kv() != mocks.KVTransferred {
			t.Errorf("answered by %q kv %q: want a decoder with the real prefill's KV", r.Header.Get("x-mock-name"), r.kv())
		}
		_, pb := only(t, recorded(t, s.Prefill, "prefill"), "prefill")
		if get(pb, "kv_transfer_params", "remote_host") != nil || get(pb, "kv_transfer_params", "do_remote_decode") != true {
			t.Errorf("prefill got the client's kv_transfer_params: %v", pb["kv_transfer_params"])
		}
		dec, db := only(t, recorded(t, s.Decode, "decode"), "decode")
		if get(db, "kv_transfer_params", "remote_engine_id") == "evil" || get(db, "kv_transfer_params", "remote_host") == "10.9.9.9" {
			t.Errorf("decoder got the client's kv_transfer_params: %v", db["kv_transfer_params"])
		}
		if got := dec.Header.Get("x-pdroute-cluster"); got != r.Header.Get("x-pdroute-decode") {
			t.Errorf("decode request carried route header %q, want the filter's %q", got, r.Header.Get("x-pdroute-decode"))
		}
		if after := stat(t, s, "pdroute.sanitized_requests"); after != before+1 {
			t.Errorf("sanitized_requests %d → %d, want +1", before, after)
		}
		// A short request with the same headers still goes to a decoder.
		r = post(t, s, "/v1/completions", completion(shortPrompt, nil), steer)
		r.expect(t, 200, "direct")
		if !strings.HasPrefix(r.Header.Get("x-mock-name"), "decode-") {
			t.Errorf("steered short request answered by %q", r.Header.Get("x-mock-name"))
		}
		if n := len(recorded(t, s.Prefill, "decode")); n != 0 {
			t.Errorf("a prefill engine served %d decodes", n)
		}
	})

	// Issue 31: what the decoder certainly refuses used to cost a full
	// prefill first (rewritten to max_tokens 1, stream false), then the
	// decoder's 400. It is refused before the prefill, in vLLM's shape.
	t.Run("refused_before_prefill", func(t *testing.T) {
		reset(t, s)
		for _, tc := range []struct {
			extra map[string]any
			msg   string
		}{
			{map[string]any{"max_tokens": 0}, "max_tokens must be at least 1, got 0."},
			{map[string]any{"stream": "maybe"}, `stream: Input should be a valid boolean, got "maybe"`},
			{map[string]any{"max_tokens": 2.5}, "max_tokens: Input should be a valid integer, got 2.5"},
		} {
			r := post(t, s, "/v1/completions", completion(longPrompt, tc.extra), nil)
			e, _ := r.JSON(t)["error"].(map[string]any)
			if r.Status != 400 || e["type"] != "BadRequestError" || e["code"] != 400.0 || e["message"] != tc.msg {
				t.Errorf("%v: %d %s, want 400 BadRequestError %q", tc.extra, r.Status, r.Body, tc.msg)
			}
			jsonContentType(t, r)
		}
		if n := len(recorded(t, s.Engines(), "")); n != 0 {
			t.Errorf("engines got %d requests for requests the decoder refuses", n)
		}
		// (What vLLM's lax parsing accepts, "max_tokens":"4", is not refused:
		// TestCheckDecode. The mocks parse strictly and would refuse it.)
	})

	// Issue 31: a batched completion over the threshold used to get the
	// prefill's 400 ("batched prompts are not supported"); a decoder serves
	// it whole, as in lmcache mode.
	t.Run("batched_completions_direct", func(t *testing.T) {
		reset(t, s)
		ids := make([]int, 600)
		for i := range ids {
			ids[i] = 100 + i
		}
		for _, prompt := range []any{[]string{longPrompt, longPrompt}, [][]int{ids, ids}} {
			body, _ := json.Marshal(map[string]any{"model": "mock-model", "max_tokens": 4, "prompt": prompt})
			r := post(t, s, "/v1/completions", body, nil)
			r.expect(t, 200, "direct")
			if n, _ := strconv.Atoi(r.Header.Get("x-pdroute-tokens")); n < stack.DefaultThreshold {
				t.Errorf("estimated %d tokens: the batch is not over the threshold (%d)", n, stack.DefaultThreshold)
			}
			if choices, _ := r.JSON(t)["choices"].([]any); len(choices) != 2 {
				t.Errorf("%d choices, want 2: %s", len(choices), r.Body)
			}
		}
		if n := len(recorded(t, s.Prefill, "")); n != 0 {
			t.Errorf("prefill engines got %d requests for batches", n)
		}
	})

	// Issue 31: a JSON body labelled text/plain (or form-urlencoded, curl -d's
	// default) used to pass through untouched, and the mock decoder connected
	// to the remote_host:remote_port the client named. The content type
	// decides nothing now: the body is sanitised and relabelled JSON.
	t.Run("non_json_content_type_sanitised", func(t *testing.T) {
		reset(t, s)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		var dialled atomic.Int32
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				dialled.Add(1)
				c.Close()
			}
		}()
		host, port, _ := net.SplitHostPort(ln.Addr().String())
		evil := map[string]any{
			"do_remote_prefill": true, "remote_engine_id": "evil", "remote_block_ids": []int{1},
			"remote_request_id": "evil", "remote_host": host, "remote_port": ln.Addr().(*net.TCPAddr).Port,
		}
		before := stat(t, s, "pdroute.sanitized_requests")
		for i, tc := range []struct{ ctype, prompt, route string }{
			{"text/plain", shortPrompt, "direct"},
			{"text/plain; charset=utf-8", longPrompt, "disagg"},
			{"application/x-www-form-urlencoded", shortPrompt, "direct"},
		} {
			r := post(t, s, "/v1/completions", completion(tc.prompt, map[string]any{"kv_transfer_params": evil}), map[string]string{"content-type": tc.ctype})
			r.expect(t, 200, tc.route)
			dec, db := only(t, recorded(t, s.Decode, "decode"), "decode")
			if get(db, "kv_transfer_params", "remote_engine_id") == "evil" || num(get(db, "kv_transfer_params", "remote_port")) == port {
				t.Errorf("%s: the decoder got the client's kv_transfer_params: %v", tc.ctype, db["kv_transfer_params"])
			}
			if got := dec.Header.Get("content-type"); got != "application/json" {
				t.Errorf("%s: the decoder got content-type %q, want application/json", tc.ctype, got)
			}
			if after := stat(t, s, "pdroute.sanitized_requests"); after != before+int64(i)+1 {
				t.Errorf("%s: sanitized_requests %d → %d, want +%d", tc.ctype, before, after, i+1)
			}
			reset(t, s)
		}
		if n := dialled.Load(); n != 0 {
			t.Errorf("an engine connected %d times to the host:port a client named", n)
		}
		// A body that is not JSON is refused whatever its label.
		r := post(t, s, "/v1/completions", []byte("prompt=hello"), map[string]string{"content-type": "application/x-www-form-urlencoded"})
		if r.Status != 400 || r.errorCode(t) != "INVALID_JSON" {
			t.Errorf("a form body: %d %s, want 400 INVALID_JSON", r.Status, r.Body)
		}
	})

	t.Run("passthrough", func(t *testing.T) {
		reset(t, s)
		r, err := send(testCtx(t, 10*time.Second), http.MethodGet, s.URL+"/v1/models", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.expect(t, 200, "passthrough")
		if !strings.HasPrefix(r.Header.Get("x-mock-name"), "decode-") || !strings.Contains(string(r.Body), "mock-model") {
			t.Errorf("GET /v1/models answered by %q: %s", r.Header.Get("x-mock-name"), r.Body)
		}
	})
}

// TestNIXLFail checks on_prefill_failure "fail": the client gets the
// matching OpenAI-style error at once, and a prefill 4xx is relayed.
func TestNIXLFail(t *testing.T) { bothWays(t, testNIXLFail) }

func testNIXLFail(t *testing.T) {
	t.Parallel()
	s := start(t, modeTopology(config.ModeNIXL, map[string]any{"on_prefill_failure": "fail", "prefill_timeout_ms": 500}))
	for _, tc := range []struct {
		name   string
		fault  mocks.Fault
		status int
		code   string
		stat   string
	}{
		{"status_500", mocks.Fault{Type: mocks.FaultStatus, Status: 500}, 502, "PREFILL_FAILED", "server_error"},
		// Envoy answers a reset upstream with its own 503 ("upstream
		// connect error or disconnect/reset before headers"), which is what
		// proxy_http_call delivers; issue 31: it is a reset all the same.
		{"reset", mocks.Fault{Type: mocks.FaultReset}, 502, "PREFILL_FAILED", "reset"},
		{"missing_params", mocks.Fault{Type: mocks.FaultMissingParams}, 502, "PREFILL_FAILED", "bad_answer"},
		{"hang", mocks.Fault{Type: mocks.FaultHang}, 504, "PREFILL_TIMEOUT", "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reset(t, s)
			faults(t, s.Prefill, tc.fault)
			before := stat(t, s, "pdroute.prefill_failures."+tc.stat)
			errors := stat(t, s, "pdroute.requests.error")
			r := post(t, s, "/v1/completions", completion(longPrompt, nil), nil)
			if r.Status != tc.status || r.errorCode(t) != tc.code {
				t.Fatalf("got %d %s, want %d %s", r.Status, r.Body, tc.status, tc.code)
			}
			if after := stat(t, s, "pdroute.requests.error"); after != errors+1 {
				t.Errorf("requests.error %d → %d, want +1", errors, after)
			}
			msg, _ := get(r.JSON(t), "error", "message").(string)
			switch tc.stat {
			case "timeout":
				if !strings.Contains(msg, "no answer within 500 ms") || strings.Contains(msg, "answered 504") {
					t.Errorf("a timeout explained as %q", msg)
				}
			case "reset":
				if !strings.Contains(msg, "reset (Envoy answered 503: upstream connect error") {
					t.Errorf("a reset explained as %q", msg)
				}
			}
			if get(r.JSON(t), "error", "type") != "server_error" {
				t.Errorf("error type: %s", r.Body)
			}
			if n := len(recorded(t, s.Decode, "")); n != 0 {
				t.Errorf("decoders got %d requests after a failed prefill", n)
			}
			if after := stat(t, s, "pdroute.prefill_failures."+tc.stat); after != before+1 {
				t.Errorf("prefill_failures.%s %d → %d, want +1", tc.stat, before, after)
			}
		})
	}
	t.Run("prefill_400_relayed", func(t *testing.T) {
		reset(t, s)
		body := `{"object":"error","message":"mock: bad request","type":"BadRequestError","code":400}`
		faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultStatus, Status: 400, Body: body})
		relayed := stat(t, s, "pdroute.requests.relayed")
		r := post(t, s, "/v1/completions", completion(longPrompt, nil), nil)
		if r.Status != 400 || string(r.Body) != body {
			t.Errorf("got %d %s, want the prefill's own 400", r.Status, r.Body)
		}
		if after := stat(t, s, "pdroute.requests.relayed"); after != relayed+1 {
			t.Errorf("requests.relayed %d → %d, want +1", relayed, after)
		}
	})
}

// TestNIXLNoDecoder: when every decoder has failed into cool-down, a
// request is answered 503 by the filter without reaching any engine.
func TestNIXLNoDecoder(t *testing.T) { bothWays(t, testNIXLNoDecoder) }

func testNIXLNoDecoder(t *testing.T) {
	t.Parallel()
	s := start(t, modeTopology(config.ModeNIXL, map[string]any{
		"decode": map[string]any{"failure_threshold": 1, "cooldown_ms": 60000},
	}))
	faults(t, s.Decode, mocks.Fault{Type: mocks.FaultStatus, Status: 500})
	seen := map[string]bool{}
	for range 2 {
		r := post(t, s, "/v1/completions", completion(shortPrompt, nil), nil)
		if r.Status != 500 {
			t.Fatalf("decoder fault: got %d %s, want the decoder's 500", r.Status, r.Body)
		}
		seen[r.Header.Get("x-mock-name")] = true
	}
	if len(seen) != 2 {
		t.Fatalf("the two failing requests went to %v, want both decoders", seen)
	}
	for _, e := range debugState(t, s).Pools["decode"] {
		if e.Health == "healthy" {
			t.Errorf("decoder %s still %s after a failure with failure_threshold 1", e.Name, e.Health)
		}
	}
	reset(t, s)
	errors := stat(t, s, "pdroute.requests.error")
	for _, body := range [][]byte{completion(shortPrompt, nil), completion(longPrompt, nil)} {
		r := post(t, s, "/v1/completions", body, nil)
		if r.Status != 503 || r.errorCode(t) != "DECODE_SERVICE_UNAVAILABLE" {
			t.Errorf("got %d %s, want 503 DECODE_SERVICE_UNAVAILABLE", r.Status, r.Body)
		}
	}
	// issue 31: these appeared in no requests.* counter
	if after := stat(t, s, "pdroute.requests.error"); after != errors+2 {
		t.Errorf("requests.error %d → %d, want +2", errors, after)
	}
	if n := len(recorded(t, s.Engines(), "")); n != 0 {
		t.Errorf("engines got %d requests while no decoder was usable", n)
	}
}

// TestNIXLDisconnect: a client that leaves during the prefill leaves no
// in-flight count behind, no decode is sent, and the prefiller's block
// lease only lives until its expiry.
func TestNIXLDisconnect(t *testing.T) { bothWays(t, testNIXLDisconnect) }

func testNIXLDisconnect(t *testing.T) {
	t.Parallel()
	topo := modeTopology(config.ModeNIXL, map[string]any{
		"prefill": map[string]any{"strategy": "least_loaded"},
		"decode":  map[string]any{"strategy": "least_loaded"},
	})
	for i := range topo.Prefill {
		topo.Prefill[i].Mock = func(c *mocks.Config) { c.LeaseDuration = time.Second }
	}
	s := start(t, topo)
	faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultDelay, DelayMS: 2000})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := send(ctx, http.MethodPost, s.URL+"/v1/completions", completion(longPrompt, nil), nil)
		done <- err
	}()
	eventually(t, 15*time.Second, "prefill request arrives", func() (bool, string) {
		n := len(recorded(t, s.Prefill, "prefill"))
		return n == 1, strconv.Itoa(n) + " prefill requests"
	})
	d := debugState(t, s)
	if d.Inflight() != 2 {
		t.Errorf("during the prefill: %d in flight, want 2 (one prefill, one decode): %+v", d.Inflight(), d.Pools)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the request finished although the client left")
	}
	eventually(t, 10*time.Second, "in-flight counts back to zero", func() (bool, string) {
		d := debugState(t, s)
		return d.Inflight() == 0, jsonString(d.Pools)
	})
	var pre *stack.Engine
	for _, e := range s.Prefill {
		if len(requests(t, e, mocks.RequestFilter{Kind: "prefill"})) == 1 {
			pre = e
		}
	}
	eventually(t, 10*time.Second, "prefill lease expired", func() (bool, string) {
		st := stats(t, pre)
		return st.LeasesHeld == 0 && st.LeasesExpired == 1, jsonString(st)
	})
	if n := len(recorded(t, s.Decode, "")); n != 0 {
		t.Errorf("decoders got %d requests after the client left", n)
	}
}

// TestNIXLRoundRobin: 200 concurrent disaggregated requests over 2P+2D
// under round robin land evenly on every endpoint of both pools, although
// two worker VMs pick (the rotation lives in shared data).
func TestNIXLRoundRobin(t *testing.T) { bothWays(t, testNIXLRoundRobin) }

func testNIXLRoundRobin(t *testing.T) {
	t.Parallel()
	s := start(t, modeTopology(config.ModeNIXL, map[string]any{"prefill": map[string]any{"strategy": "round_robin"}, "decode": map[string]any{"strategy": "round_robin"}}))
	const total, workers = 200, 8
	var wg sync.WaitGroup
	errs := make(chan string, total)
	next := make(chan int, total)
	for i := range total {
		next <- i
	}
	close(next)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				r, err := send(testCtx(t, 30*time.Second), http.MethodPost, s.URL+"/v1/completions", completion(longPrompt, map[string]any{"max_tokens": 1}), nil)
				if err != nil || r.Status != 200 || r.Header.Get("x-pdroute-path") != "disagg" {
					errs <- describe(r, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	for _, e := range s.Engines() {
		n := stats(t, e).Requests[string(e.Role)]
		if n < total/2-1 || n > total/2+1 {
			t.Errorf("%s served %d %s requests, want %d±1", e.Name, n, e.Role, total/2)
		}
	}
}

// TestNIXLLeastLoaded: under least_loaded a decoder slowed down tenfold
// gets fewer requests than its healthy peer. least_loaded rotates while any
// decoder lacks fresh engine stats, so the load starts once both are scraped.
func TestNIXLLeastLoaded(t *testing.T) { bothWays(t, testNIXLLeastLoaded) }

func testNIXLLeastLoaded(t *testing.T) {
	t.Parallel()
	topo := modeTopology(config.ModeNIXL, map[string]any{
		"stats_scrape_interval_ms": 1000,
		"decode":                   map[string]any{"strategy": "least_loaded", "stats_max_age_ms": 10000},
	})
	topo.Decode[1].Latency.Slowdown = 10
	s := start(t, topo)
	eventually(t, 30*time.Second, "decoders' stats scraped", func() (bool, string) {
		d := debugState(t, s)
		for _, e := range d.Pools["decode"] {
			if e.StatsAgeMS < 0 {
				return false, jsonString(d.Pools["decode"])
			}
		}
		return true, ""
	})
	const total, workers = 64, 4
	var mu sync.Mutex
	count := map[string]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range total / workers {
				r, err := send(testCtx(t, 30*time.Second), http.MethodPost, s.URL+"/v1/completions",
					completion(shortPrompt, map[string]any{"max_tokens": 10, "ignore_eos": true}), nil)
				if err != nil || r.Status != 200 {
					t.Errorf("worker %d: %s", w, describe(r, err))
					return
				}
				mu.Lock()
				count[r.Header.Get("x-mock-name")]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fastN, slowN := count["decode-0"], count["decode-1"]
	t.Logf("fast decoder %d, slowed decoder %d", fastN, slowN)
	if fastN+slowN != total || slowN*2 >= fastN {
		t.Errorf("fast decoder served %d, slowed decoder %d of %d: want the slowed one below half the fast one", fastN, slowN, total)
	}
}

// TestOrchestrated: the decoder gets the prefill's kv_transfer_params with
// remote_host overwritten by the prefill endpoint's configured host (here
// "localhost", which the mock never answers itself), and can pull with it.
func TestOrchestrated(t *testing.T) { bothWays(t, testOrchestrated) }

func testOrchestrated(t *testing.T) {
	t.Parallel()
	topo := modeTopology(config.ModeOrchestrated, nil)
	for i := range topo.Prefill {
		topo.Prefill[i].Host = "localhost"
	}
	s := start(t, topo)
	r := post(t, s, "/v1/chat/completions", chat(longPrompt, nil), nil)
	r.expect(t, 200, "disagg")
	if r.kv() != mocks.KVTransferred {
		t.Errorf("decoder says %q (%s), want transferred", r.kv(), r.Header.Get("x-mock-kv-reason"))
	}
	_, db := only(t, recorded(t, s.Decode, "decode"), "decode")
	prefiller := s.Engine(r.Header.Get("x-pdroute-prefill"))
	if prefiller == nil {
		t.Fatalf("x-pdroute-prefill %q", r.Header.Get("x-pdroute-prefill"))
	}
	_, port, _ := net.SplitHostPort(prefiller.Addresses.SideChannel)
	if h, p := get(db, "kv_transfer_params", "remote_host"), num(get(db, "kv_transfer_params", "remote_port")); h != "localhost" || p != port {
		t.Errorf("decode remote_host %v remote_port %v, want localhost and %s", h, p, port)
	}
	if _, ok := db["disagg_prefill_resp"]; ok {
		t.Error("disagg_prefill_resp attached although attach_prefill_response is false")
	}
}

// TestNIXLByAddress mixes endpoint styles: prefill-0 and decode-0 by
// address (ORIGINAL_DST with x-envoy-original-dst-host, also on the
// prefill's proxy_http_call), prefill-1 and decode-1 by cluster. Round robin
// sends four long requests through every endpoint.
func TestNIXLByAddress(t *testing.T) { bothWays(t, testNIXLByAddress) }

func testNIXLByAddress(t *testing.T) {
	t.Parallel()
	topo := modeTopology(config.ModeNIXL, map[string]any{"prefill": map[string]any{"strategy": "round_robin"}, "decode": map[string]any{"strategy": "round_robin"}})
	topo.Prefill[0].ByAddress, topo.Decode[0].ByAddress = true, true
	s := start(t, topo)
	var rs []*response
	for range 4 {
		r := post(t, s, "/v1/completions", completion(longPrompt, nil), map[string]string{"x-envoy-original-dst-host": "127.0.0.1:9"})
		r.expect(t, 200, "disagg")
		if r.kv() != mocks.KVTransferred {
			t.Errorf("decoder %s says %q, want transferred", r.Header.Get("x-mock-name"), r.kv())
		}
		rs = append(rs, r)
	}
	if got := strings.Join(mockNames(rs), ","); got != "decode-0,decode-0,decode-1,decode-1" {
		t.Errorf("answered by %s, want each decoder twice", got)
	}
	for _, e := range s.Prefill {
		if n := len(requests(t, e, mocks.RequestFilter{Kind: "prefill"})); n != 2 {
			t.Errorf("%s (by address: %v) got %d prefills, want 2", e.Name, e.Spec.ByAddress, n)
		}
	}
	r := post(t, s, "/v1/completions", completion(shortPrompt, nil), nil)
	r.expect(t, 200, "direct")
}

// describe formats a failed exchange.
func describe(r *response, err error) string {
	if err != nil {
		return err.Error()
	}
	return strconv.Itoa(r.Status) + " " + r.Header.Get("x-pdroute-path") + " " + string(r.Body)
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// num formats a JSON number as an integer string ("" if not a number).
func num(v any) string {
	f, ok := v.(float64)
	if !ok {
		return ""
	}
	return strconv.FormatInt(int64(f), 10)
}

// TestDecoderRefuses: a decoder that refuses connections, or resets them
// before answering, reached clients as Envoy's plain-text 503 (issue 31)
// until passive health took it out. Every answer is an OpenAI-shaped error
// now: the filter rewrites Envoy's local reply, keeping its status.
func TestDecoderRefuses(t *testing.T) {
	t.Parallel()
	s := start(t, modeTopology(config.ModeNIXL, map[string]any{
		"decode": map[string]any{"failure_threshold": 3, "cooldown_ms": 60000},
	}))
	t.Run("reset", func(t *testing.T) {
		faults(t, s.Decode, mocks.Fault{Type: mocks.FaultReset, Kind: "decode"})
		r := post(t, s, "/v1/completions", completion(shortPrompt, nil), nil)
		if r.Status != 503 || r.errorCode(t) != "DECODE_UNREACHABLE" {
			t.Fatalf("got %d %s, want 503 DECODE_UNREACHABLE", r.Status, r.Body)
		}
		jsonContentType(t, r)
		if msg, _ := get(r.JSON(t), "error", "message").(string); !strings.Contains(msg, "upstream connect error or disconnect/reset before headers") {
			t.Errorf("message %q does not keep Envoy's reason", msg)
		}
		reset(t, s)
	})
	t.Run("refused", func(t *testing.T) {
		for _, e := range s.Decode {
			e.Server.Close()
		}
		codes := map[string]int{}
		for _, body := range [][]byte{completion(shortPrompt, nil), completion(longPrompt, nil), completion(shortPrompt, nil), completion(longPrompt, nil)} {
			r := post(t, s, "/v1/completions", body, nil)
			if r.Status != 503 {
				t.Errorf("got %d %s, want 503", r.Status, r.Body)
			}
			jsonContentType(t, r)
			codes[r.errorCode(t)]++
		}
		// until passive health takes both decoders out, then the filter's own 503
		if codes["DECODE_UNREACHABLE"] == 0 || codes["DECODE_UNREACHABLE"]+codes["DECODE_SERVICE_UNAVAILABLE"] != 4 {
			t.Errorf("error codes %v: want DECODE_UNREACHABLE, then DECODE_SERVICE_UNAVAILABLE", codes)
		}
	})
}
