package scenarios

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/hostcalls/kvbridge"
	"github.com/pdroute/pdroute/hostcalls/zmqpush"
	"github.com/pdroute/pdroute/lb"
)

// Issue 6: lmcache mode (LMCache NIXL push). The filter tokenizes, sends
// the prefill with a disagg_spec naming the chosen decoder, and decodes
// once the prefill answered AND every decoder rank's KV-ready notification
// reached kvbridge.

// TestLMCache runs the notification-ordering, disconnect and response
// scenarios on one stack (2P+2D, TP 1, kv_wait_timeout_ms 8000).
func TestLMCache(t *testing.T) { bothWays(t, testLMCache) }

// lmcacheChatWhy is why lmcache chat is not disaggregated on the headers way.
const lmcacheChatWhy = "lmcache mode sends chat completions straight to a decoder there " +
	"(their decode leg is /v1/completions, and the path is fixed once the headers continue)"

func testLMCache(t *testing.T) {
	t.Parallel()
	// Round robin: two_vms_wait_at_once sends the same prompt twice at
	// once and needs it on two decoders (the mock's received KV is keyed by
	// the prompt, so one decoder would hand it to the first decode only).
	s := start(t, modeTopology(config.ModeLMCache, map[string]any{
		"lmcache": map[string]any{"kv_wait_timeout_ms": 8000},
		"prefill": map[string]any{"strategy": "round_robin"}, "decode": map[string]any{"strategy": "round_robin"},
	}))

	t.Run("notification_before_prefill_answer", func(t *testing.T) {
		reset(t, s)
		// The prefill answers after 500 ms and sends no notification
		// itself; the test sends it while the prefill is still running.
		faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultDelay, DelayMS: 500}, mocks.Fault{Type: mocks.FaultNotifyDrop})
		before := kvStats(t, s)
		res := async(s, "/v1/completions", completion(longPrompt, nil))
		id := waitPrefill(t, s, false)
		notify(t, s, id)
		r := res.wait(t)
		r.expect(t, 200, "disagg")
		if r.kv() != mocks.KVTransferred {
			t.Errorf("decoder says %q (%s), want transferred", r.kv(), r.Header.Get("x-mock-kv-reason"))
		}
		kvStats(t, s).expectDelta(t, before, 1, 0)
	})

	t.Run("notification_with_prefill_answer", func(t *testing.T) {
		reset(t, s)
		before := kvStats(t, s)
		r := post(t, s, "/v1/completions", completion(longPrompt, nil), nil)
		r.expect(t, 200, "disagg")
		if r.kv() != mocks.KVTransferred {
			t.Errorf("decoder says %q (%s), want transferred", r.kv(), r.Header.Get("x-mock-kv-reason"))
		}
		kvStats(t, s).expectDelta(t, before, 1, 0)
	})

	// Issue 29: every request used to leave its KV-ready flag's key in shared data
	// (cleared to empty, but shared data has no delete): 25 keys/s in the soak.
	t.Run("no_shared_data_key_per_request", func(t *testing.T) {
		h := s.Emulator()
		if h == nil {
			t.Skip("shared data is visible on the emulator only")
		}
		reset(t, s)
		for range 3 { // the first requests create what a stack keeps (records, indexes)
			post(t, s, "/v1/completions", completion(longPrompt, nil), nil).expect(t, 200, "disagg")
		}
		keys := h.SharedDataKeys(stack.PluginName)
		const n = 20
		for range n {
			post(t, s, "/v1/completions", completion(longPrompt, nil), nil).expect(t, 200, "disagg")
		}
		var added []string
		for _, k := range h.SharedDataKeys(stack.PluginName) {
			if !slices.Contains(keys, k) {
				added = append(added, k)
			}
		}
		if len(added) > 0 {
			t.Errorf("%d disaggregated requests added %d shared-data keys (%d before), e.g. %q", n, len(added), len(keys), added[0])
		}
	})

	t.Run("notification_after_prefill_answer", func(t *testing.T) {
		reset(t, s)
		faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultNotifyDelay, DelayMS: 400})
		before := kvStats(t, s)
		hist := kvWaitHistogram(t, s)
		r := post(t, s, "/v1/completions", completion(longPrompt, nil), nil)
		r.expect(t, 200, "disagg")
		if r.kv() != mocks.KVTransferred {
			t.Errorf("decoder says %q (%s), want transferred", r.kv(), r.Header.Get("x-mock-kv-reason"))
		}
		pre, _ := only(t, recorded(t, s.Prefill, "prefill"), "prefill")
		dec, _ := only(t, recorded(t, s.Decode, "decode"), "decode")
		if gap := dec.Time.Sub(pre.Time); gap < 400*time.Millisecond {
			t.Errorf("decode sent %s after the prefill started: it did not wait for the delayed notification", gap)
		}
		kvStats(t, s).expectDelta(t, before, 1, 0)
		eventually(t, 10*time.Second, "kv_wait_ms records the wait", func() (bool, string) {
			h := kvWaitHistogram(t, s)
			return h.Count == hist.Count+1 && h.Sum-hist.Sum >= 300, jsonString(h)
		})
	})

	// Issue 31: the filter long-polls kvbridge in 2 s slices; a healthy
	// wait longer than a slice used to count as a kvbridge timeout, the
	// figure OPERATIONS tells operators to alert on.
	t.Run("wait_over_a_poll_slice_is_no_timeout", func(t *testing.T) {
		reset(t, s)
		faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultNotifyDelay, DelayMS: 2600})
		before := kvbridgeWaits(t, s)
		r := post(t, s, "/v1/completions", completion(longPrompt, nil), nil)
		r.expect(t, 200, "disagg")
		if r.kv() != mocks.KVTransferred {
			t.Errorf("decoder says %q (%s), want transferred", r.kv(), r.Header.Get("x-mock-kv-reason"))
		}
		after := kvbridgeWaits(t, s)
		if after["timeout"] != before["timeout"] || after["pending"] <= before["pending"] {
			t.Errorf("kvbridge_waits_total %v → %v: want timeout unchanged and pending up", before, after)
		}
	})

	t.Run("duplicate_notifications", func(t *testing.T) {
		reset(t, s)
		faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultNotifyDuplicate})
		received := s.KVBridge.Stats().Received
		for range 2 {
			r := post(t, s, "/v1/completions", completion(longPrompt, nil), nil)
			r.expect(t, 200, "disagg")
			if r.kv() != mocks.KVTransferred {
				t.Errorf("decoder says %q, want transferred", r.kv())
			}
		}
		if n := len(recorded(t, s.Decode, "decode")); n != 2 {
			t.Errorf("%d decode requests for 2 client requests", n)
		}
		eventually(t, 15*time.Second, "kvbridge got every duplicate", func() (bool, string) {
			got := s.KVBridge.Stats().Received - received
			return got == 4, jsonString(s.KVBridge.Stats())
		})
	})

	t.Run("client_disconnect_while_waiting", func(t *testing.T) {
		reset(t, s)
		faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultNotifyDrop})
		ctx, cancel := context.WithCancel(context.Background())
		res := asyncCtx(ctx, s, "/v1/completions", completion(longPrompt, nil))
		id := waitPrefill(t, s, true)
		eventually(t, 15*time.Second, "the stream waits for KV", func() (bool, string) {
			n := stat(t, s, "pdroute.kv_wait.waiting")
			return n == 1, jsonString(n)
		})
		cancel()
		if _, err := res.result(); err == nil {
			t.Fatal("request finished although the client left")
		}
		eventually(t, 15*time.Second, "waiter released", func() (bool, string) {
			n := stat(t, s, "pdroute.kv_wait.waiting")
			d := debugState(t, s)
			return n == 0 && d.VMKVWaiting == 0 && d.Inflight() == 0, jsonString([]any{n, d})
		})
		if h := s.Emulator(); h != nil {
			// Shared data has no delete: nothing may be keyed by the request.
			for _, k := range h.SharedDataKeys(stack.PluginName) {
				if strings.Contains(k, id) {
					t.Errorf("shared-data key %q names the request's KV id", k)
				}
			}
		}
		if n := len(recorded(t, s.Decode, "decode")); n != 0 {
			t.Errorf("decoders got %d requests after the client left", n)
		}
	})

	t.Run("two_vms_wait_at_once", func(t *testing.T) {
		reset(t, s)
		faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultNotifyDelay, DelayMS: 2000})
		before := kvStats(t, s)
		// New connections: the emulator spreads them over its workers.
		var results []*pending
		for range 2 {
			results = append(results, asyncClient(context.Background(), &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, s, "/v1/completions", completion(longPrompt, nil)))
		}
		eventually(t, 15*time.Second, "both streams wait at once", func() (bool, string) {
			n := stat(t, s, "pdroute.kv_wait.waiting")
			return n == 2, jsonString(n)
		})
		if s.Emulator() != nil {
			// The emulator hands new connections to its workers in turn, so
			// the next two reach the two VMs the requests went to.
			var perVM []int
			for range 2 {
				r, err := send(testCtx(t, controlTimeout), http.MethodGet, s.URL+stack.DebugPath, nil, map[string]string{"connection": "close"})
				if err != nil || r.Status != 200 {
					t.Fatalf("debug path: %s", describe(r, err))
				}
				var d stack.DebugState
				if err := json.Unmarshal(r.Body, &d); err != nil {
					t.Fatal(err)
				}
				perVM = append(perVM, d.VMKVWaiting)
			}
			if perVM[0] != 1 || perVM[1] != 1 {
				t.Errorf("waiting streams per VM %v, want one on each of the two VMs", perVM)
			}
		}
		for _, p := range results {
			r := p.wait(t)
			r.expect(t, 200, "disagg")
			if r.kv() != mocks.KVTransferred {
				t.Errorf("decoder says %q, want transferred", r.kv())
			}
		}
		kvStats(t, s).expectDelta(t, before, 2, 0)
	})

	t.Run("chat_direct_on_headers_way", func(t *testing.T) {
		if !onHeadersWay(t) {
			t.Skip("the headers way's limit; the body way disaggregates chat (chat_stream_first_token_first)")
		}
		reset(t, s)
		body := chat(longPrompt, map[string]any{"max_tokens": 8, "ignore_eos": true})
		want := directText(t, s, body)
		r := post(t, s, "/v1/chat/completions", body, nil)
		r.expect(t, 200, "direct")
		choices, _ := get(r.JSON(t), "choices").([]any)
		if len(choices) != 1 {
			t.Fatalf("answer: %s", r.Body)
		}
		if got := str(get(choices[0].(map[string]any), "message", "content")); got != want {
			t.Errorf("answer %q, want the direct answer %q", got, want)
		}
	})

	t.Run("chat_stream_first_token_first", func(t *testing.T) {
		notOnHeadersWay(t, lmcacheChatWhy)
		reset(t, s)
		body := chat(longPrompt, map[string]any{"stream": true, "max_tokens": 8, "ignore_eos": true})
		want := directText(t, s, chat(longPrompt, map[string]any{"max_tokens": 8, "ignore_eos": true}))
		r := post(t, s, "/v1/chat/completions", body, nil)
		r.expect(t, 200, "disagg")
		if len(r.Events) == 0 || r.Events[len(r.Events)-1].Data != "[DONE]" {
			t.Fatalf("not a complete stream: %s", r.Body)
		}
		var text strings.Builder
		for i, ev := range r.Events[:len(r.Events)-1] {
			var c struct {
				Object  string `json:"object"`
				Choices []struct {
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(ev.Data), &c); err != nil || c.Object != "chat.completion.chunk" {
				t.Fatalf("event %d is not a chat.completion.chunk: %s", i, ev.Data)
			}
			if len(c.Choices) > 0 {
				if i == 0 && c.Choices[0].Delta.Content == "" {
					t.Errorf("the first chunk carries no token: %s", ev.Data)
				}
				text.WriteString(c.Choices[0].Delta.Content)
			}
		}
		if text.String() != want {
			t.Errorf("streamed text %q, want the direct answer %q", text.String(), want)
		}
		checkLMCacheLegs(t, s, 8)
	})

	t.Run("non_streaming_one_json_answer", func(t *testing.T) {
		notOnHeadersWay(t, lmcacheChatWhy)
		reset(t, s)
		want := directText(t, s, chat(longPrompt, map[string]any{"max_tokens": 8, "ignore_eos": true}))
		r := post(t, s, "/v1/chat/completions", chat(longPrompt, map[string]any{"max_tokens": 8, "ignore_eos": true}), nil)
		r.expect(t, 200, "disagg")
		var a struct {
			Object  string `json:"object"`
			Choices []struct {
				Message struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(r.Body, &a); err != nil {
			t.Fatalf("not one JSON answer: %v\n%s", err, r.Body)
		}
		if a.Object != "chat.completion" || len(a.Choices) != 1 || a.Choices[0].Message.Role != "assistant" || a.Choices[0].FinishReason == "" {
			t.Errorf("malformed chat answer: %s", r.Body)
		}
		if a.Choices[0].Message.Content != want || a.Usage.CompletionTokens != 8 {
			t.Errorf("content %q (%d tokens), want the direct answer %q (8 tokens)", a.Choices[0].Message.Content, a.Usage.CompletionTokens, want)
		}
		checkLMCacheLegs(t, s, 8)
	})

	t.Run("kvbridge_restart_mid_wait", func(t *testing.T) {
		reset(t, s)
		faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultNotifyDelay, DelayMS: 2000})
		errorsBefore := stat(t, s, "pdroute.kv_wait.poll_errors")
		before := kvStats(t, s)
		res := async(s, "/v1/completions", completion(longPrompt, nil))
		waitPrefill(t, s, true)
		if err := s.KVBridge.Restart(); err != nil {
			t.Fatal(err)
		}
		r := res.wait(t)
		r.expect(t, 200, "disagg")
		if r.kv() != mocks.KVTransferred {
			t.Errorf("decoder says %q (%s), want transferred: the notification after the restart was missed", r.kv(), r.Header.Get("x-mock-kv-reason"))
		}
		if n := stat(t, s, "pdroute.kv_wait.poll_errors"); n <= errorsBefore {
			t.Errorf("kv_wait.poll_errors %d → %d: the restart went unnoticed", errorsBefore, n)
		}
		kvStats(t, s).expectDelta(t, before, 1, 0)
	})
}

// TestLMCacheTP2Proceed: with decoder TP 2, rank 1's KV never arrives (its
// receiver port is closed), so one notification of two reaches kvbridge;
// after kv_wait_timeout_ms the decode is sent anyway (on_kv_timeout
// proceed) and the decoder recomputes.
func TestLMCacheTP2Proceed(t *testing.T) { bothWays(t, testLMCacheTP2Proceed) }

func testLMCacheTP2Proceed(t *testing.T) {
	t.Parallel()
	closed := closedPort(t)
	spec := stack.EngineSpec{Latency: fast, TPSize: 2}
	dec := spec
	dec.Endpoint = func(ep map[string]any) {
		kv := ep["kv_receiver"].(map[string]any)
		// a port just closed can be the next one handed out: not one of the receiver's own
		taken := map[int]bool{}
		for _, k := range []string{"init_ports", "alloc_ports"} {
			for _, p := range kv[k].([]int) {
				taken[p] = true
			}
		}
		for taken[closed] {
			closed = closedPort(t)
		}
		kv["alloc_ports"].([]int)[1] = closed
	}
	s := start(t, stack.Topology{Mode: config.ModeLMCache, Prefill: []stack.EngineSpec{spec}, Decode: []stack.EngineSpec{dec},
		Plugin: map[string]any{"lmcache": map[string]any{"kv_wait_timeout_ms": 600, "on_kv_timeout": "proceed"}}})
	before := kvStats(t, s)
	r := post(t, s, "/v1/completions", completion(longPrompt, nil), nil)
	r.expect(t, 200, "disagg")
	if r.kv() != mocks.KVRecomputed || r.Header.Get("x-mock-kv-reason") != "partial_kv" {
		t.Errorf("decoder says %q (%s), want recomputed (partial_kv)", r.kv(), r.Header.Get("x-mock-kv-reason"))
	}
	if r.Total < 600*time.Millisecond {
		t.Errorf("answered after %s, before kv_wait_timeout_ms (600 ms)", r.Total)
	}
	if st := stats(t, s.Prefill[0]); st.Notifications["sent"] != 1 || st.KVPushFailures != 1 {
		t.Errorf("prefiller sent %d notifications with %d failed pushes, want 1 and 1", st.Notifications["sent"], st.KVPushFailures)
	}
	kvStats(t, s).expectDelta(t, before, 0, 1)
}

// TestLMCacheTP2Fail: one notification of two and on_kv_timeout fail: 504,
// no decode, nothing left waiting.
func TestLMCacheTP2Fail(t *testing.T) { bothWays(t, testLMCacheTP2Fail) }

func testLMCacheTP2Fail(t *testing.T) {
	t.Parallel()
	spec := stack.EngineSpec{Latency: fast, TPSize: 2}
	s := start(t, stack.Topology{Mode: config.ModeLMCache, Prefill: []stack.EngineSpec{spec}, Decode: []stack.EngineSpec{spec},
		Plugin: map[string]any{"lmcache": map[string]any{"kv_wait_timeout_ms": 600, "on_kv_timeout": "fail"}}})
	faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultNotifyDrop, Ranks: []int{1}})
	before := kvStats(t, s)
	r := post(t, s, "/v1/completions", completion(longPrompt, nil), nil)
	if r.Status != 504 || r.errorCode(t) != "KV_TRANSFER_TIMEOUT" {
		t.Fatalf("got %d %s, want 504 KV_TRANSFER_TIMEOUT", r.Status, r.Body)
	}
	if n := len(recorded(t, s.Decode, "decode")); n != 0 {
		t.Errorf("decoder got %d requests after the KV timed out", n)
	}
	if st := stats(t, s.Prefill[0]); st.Notifications["sent"] != 1 || st.Notifications["dropped"] != 1 {
		t.Errorf("notifications %v, want 1 sent and 1 dropped", st.Notifications)
	}
	kvStats(t, s).expectDelta(t, before, 0, 1)
	eventually(t, 15*time.Second, "nothing left waiting", func() (bool, string) {
		n := stat(t, s, "pdroute.kv_wait.waiting")
		return n == 0, jsonString(n)
	})
	jsonContentType(t, r)
}

// kvCounts are the filter's KV-wait outcomes.
type kvCounts struct{ ready, timeout int64 }

func kvStats(t testing.TB, s *stack.Stack) kvCounts {
	t.Helper()
	return kvCounts{stat(t, s, "pdroute.kv_wait.ready"), stat(t, s, "pdroute.kv_wait.timeout")}
}

func (c kvCounts) expectDelta(t testing.TB, before kvCounts, ready, timeout int64) {
	t.Helper()
	if c.ready-before.ready != ready || c.timeout-before.timeout != timeout {
		t.Errorf("kv_wait.ready +%d timeout +%d, want +%d and +%d", c.ready-before.ready, c.timeout-before.timeout, ready, timeout)
	}
}

func kvWaitHistogram(t testing.TB, s *stack.Stack) stack.Histogram {
	t.Helper()
	h, err := s.Histogram(testCtx(t, controlTimeout), "pdroute.kv_wait_ms")
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// waitPrefill waits for the one prefill request of the test (answered, if
// answered is set) and returns its disagg_spec.req_id.
func waitPrefill(t testing.TB, s *stack.Stack, answered bool) string {
	t.Helper()
	var id string
	eventually(t, 10*time.Second, "prefill request", func() (bool, string) {
		rs := recorded(t, s.Prefill, "prefill")
		if len(rs) != 1 || answered && rs[0].Status == 0 {
			return false, jsonString(rs)
		}
		m, err := rs[0].JSON()
		if err != nil {
			return false, err.Error()
		}
		id = str(get(m, "kv_transfer_params", "disagg_spec", "req_id"))
		return id != "", rs[0].Body
	})
	return id
}

// notify sends the KV-ready notification of id to kvbridge, as a prefiller
// rank does.
func notify(t testing.TB, s *stack.Stack, id string) {
	t.Helper()
	ctx := testCtx(t, controlTimeout)
	snd, err := zmqpush.Dial(ctx, s.KVBridge.ZMQEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	if err := snd.Send(kvbridge.EncodeNotification("ProxyNotif", id)); err != nil {
		t.Fatal(err)
	}
}

// directText is a decoder's answer to body when it serves it alone: the
// text a disaggregated answer must reproduce exactly.
func directText(t testing.TB, s *stack.Stack, body []byte) string {
	t.Helper()
	r, err := send(testCtx(t, 10*time.Second), http.MethodPost, s.Decode[0].Addresses.URL+"/v1/chat/completions", body, nil)
	if err != nil || r.Status != 200 {
		t.Fatalf("direct request: %s", describe(r, err))
	}
	text, _ := get(r.JSON(t), "choices").([]any)
	if len(text) != 1 {
		t.Fatalf("direct answer: %s", r.Body)
	}
	content := str(get(text[0].(map[string]any), "message", "content"))
	// The direct request is recorded too: forget it.
	reset(t, s)
	return content
}

// checkLMCacheLegs checks the tokenize, prefill and decode requests of one
// chat request with max_tokens n.
func checkLMCacheLegs(t testing.TB, s *stack.Stack, n int) {
	t.Helper()
	tok := recorded(t, s.Prefill, "tokenize")
	_, pb := only(t, recorded(t, s.Prefill, "prefill"), "prefill")
	decoder, dec := recordedBy(t, s.Decode, "decode")
	db, _ := dec.JSON()
	if len(tok) != 1 {
		t.Errorf("%d tokenize calls, want 1", len(tok))
	}
	if pb["max_tokens"] != 1.0 || pb["stream"] != false || get(pb, "kv_transfer_params", "ret_first_tok") != true {
		t.Errorf("prefill body: %v", pb)
	}
	spec, _ := get(pb, "kv_transfer_params", "disagg_spec").(map[string]any)
	wantPorts := jsonString(decoder.Addresses.KVAllocPorts())
	if got := jsonString(spec["receiver_alloc_port"]); got != wantPorts || spec["receiver_host"] != "127.0.0.1" {
		t.Errorf("disagg_spec %v does not name %s's receiver (alloc ports %s)", spec, decoder.Name, wantPorts)
	}
	ids, _ := db["prompt"].([]any)
	if dec.Path != "/v1/completions" || len(ids) == 0 || db["max_tokens"] != float64(n-1) || db["kv_transfer_params"] != nil {
		t.Errorf("decode request %s: prompt of %d ids, max_tokens %v, kv_transfer_params %v", dec.Path, len(ids), db["max_tokens"], db["kv_transfer_params"])
	}
}

// pending is a request running in the background.
type pending struct {
	done chan struct{}
	r    *response
	err  error
}

func async(s *stack.Stack, path string, body []byte) *pending {
	return asyncCtx(context.Background(), s, path, body)
}

func asyncCtx(ctx context.Context, s *stack.Stack, path string, body []byte) *pending {
	return asyncClient(ctx, client, s, path, body)
}

func asyncClient(ctx context.Context, c *http.Client, s *stack.Stack, path string, body []byte) *pending {
	p := &pending{done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	go func() {
		defer close(p.done)
		defer cancel()
		var r *stack.Response
		r, p.err = stack.Send(ctx, c, http.MethodPost, s.URL+path, body, nil)
		if p.err == nil {
			p.r = &response{r}
		}
	}()
	return p
}

func (p *pending) result() (*response, error) {
	<-p.done
	return p.r, p.err
}

func (p *pending) wait(t testing.TB) *response {
	t.Helper()
	r, err := p.result()
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	return r
}

// closedPort is a loopback port nothing listens on.
func closedPort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// kvbridgeWaits reads kvbridge_waits_total by result from kvbridge's /metrics.
func kvbridgeWaits(t testing.TB, s *stack.Stack) map[string]float64 {
	t.Helper()
	r, err := send(testCtx(t, controlTimeout), http.MethodGet, "http://"+s.KVBridge.HTTPAddr()+"/metrics", nil, nil)
	if err != nil || r.Status != 200 {
		t.Fatalf("kvbridge /metrics: %v", err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(r.Body), "\n") {
		rest, ok := strings.CutPrefix(line, `kvbridge_waits_total{result="`)
		if !ok {
			continue
		}
		label, value, _ := strings.Cut(rest, `"} `)
		out[label], _ = strconv.ParseFloat(value, 64)
	}
	return out
}

// TestLMCacheVMTrap: one worker's VM traps (FAIL_RELOAD) while its lmcache
// streams wait for their KV. Every client gets an answer, and once the dead
// VM's in-flight counts expired nothing it held is left: no shared-data key
// (the KV-ready counts lived in its memory), no kvbridge long poll; a fresh
// VM serves the next requests.
func TestLMCacheVMTrap(t *testing.T) {
	const concurrency = 8
	topo := modeTopology(config.ModeLMCache, map[string]any{"lmcache": map[string]any{"kv_wait_timeout_ms": 8000}})
	topo.Workers = 2
	topo.RequestTimeout = 5 * time.Second
	s := start(t, topo)
	h := s.Emulator()
	if h == nil {
		t.Skip("a trap is injected through the emulator (envoyemu.Host.InjectTrap)")
	}
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for range 4 { // new connections: both workers create what a stack keeps
		r, err := stack.Send(testCtx(t, 30*time.Second), fresh, http.MethodPost, s.URL+"/v1/completions", completion(longPrompt, nil), nil)
		if err != nil || r.Status != 200 {
			t.Fatalf("warm-up: %v %+v", err, r)
		}
	}
	before := sharedKeys(s)
	faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultNotifyDelay, DelayMS: 2000})
	var results []*pending
	for range concurrency {
		results = append(results, asyncClient(context.Background(), fresh, s, "/v1/completions", completion(longPrompt, nil)))
	}
	eventually(t, 15*time.Second, "every stream waits for its KV", func() (bool, string) {
		n := stat(t, s, "pdroute.kv_wait.waiting")
		return n == concurrency, jsonString(n)
	})
	if n := h.InjectTrap(stack.PluginName, 0); n != 1 {
		t.Fatalf("InjectTrap armed %d VMs, want worker 0's", n)
	}
	statuses := map[int]int{}
	for i, p := range results {
		r, err := p.result()
		if err != nil {
			t.Errorf("client %d: no answer: %v", i, err)
			continue
		}
		statuses[r.Status]++
	}
	if statuses[200]+statuses[503] != concurrency || statuses[503] == 0 {
		t.Errorf("answers by status %v: want 200 (the surviving VM) and 503 (the trapped VM) only", statuses)
	}
	t.Logf("answers by status after the trap: %v", statuses)
	eventually(t, lb.DefaultOwnerTTL+10*time.Second, "in-flight counts back to zero", func() (bool, string) {
		d := debugState(t, s)
		return d.Inflight() == 0, jsonString(d.Pools)
	})
	faults(t, s.Prefill)
	for i := range 4 {
		r, err := stack.Send(testCtx(t, 30*time.Second), fresh, http.MethodPost, s.URL+"/v1/completions", completion(longPrompt, nil), nil)
		if err != nil || r.Status != 200 {
			t.Errorf("request %d after the trap: %v %+v", i, err, r)
		}
	}
	if left := leftovers(t, s, before); left != "none left" {
		t.Errorf("after the trap: %s", left)
	}
	if ps := h.Plugins(); len(ps) != 1 || ps[0].Traps() != 1 {
		t.Errorf("plugin stats: %s", pluginSummary(ps))
	}
}
