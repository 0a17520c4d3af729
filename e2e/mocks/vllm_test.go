package mocks

import (
	"context"
	"encoding/json"
	"maps"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"
)

// prefillBody is what a NIXL router sends to the prefiller for a client body.
func prefillBody(prompt string) map[string]any {
	return map[string]any{
		"model": "m", "prompt": prompt, "max_tokens": 1, "stream": false,
		"kv_transfer_params": map[string]any{
			"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil,
			"remote_block_ids": nil, "remote_host": nil, "remote_port": nil,
		},
	}
}

func kvParamsOf(t testing.TB, r response) map[string]any {
	t.Helper()
	kv, ok := r.json(t)["kv_transfer_params"].(map[string]any)
	if !ok {
		t.Fatalf("no kv_transfer_params in %s", r.body)
	}
	return kv
}

func TestNixlPrefillAnswersParams(t *testing.T) {
	prompt := longPrompt(40) // 40 tokens: 3 blocks of 16
	for _, grouped := range []bool{false, true} {
		p := start(t, Config{Kind: VLLM, Role: Prefill, GroupedBlockIDs: grouped, TPSize: 2})
		r := post(t, p.URL()+"/v1/completions", prefillBody(prompt), "X-Request-Id", "req-1")
		if r.status != 200 || r.header.Get("X-Mock-Kv") != "" {
			t.Fatalf("grouped=%v: %d %v %s", grouped, r.status, r.header, r.body)
		}
		kv := kvParamsOf(t, r)
		host, port, _ := net.SplitHostPort(p.Addresses().SideChannel)
		want := map[string]any{
			"do_remote_prefill": true, "do_remote_decode": false,
			"remote_engine_id": p.Addresses().EngineID,
			"remote_host":      host, "tp_size": 2.0,
		}
		wantBlocks := any([]any{0.0, 1.0, 2.0})
		if grouped {
			wantBlocks = []any{wantBlocks}
			maps.Copy(want, map[string]any{"dcp_size": 1.0, "pp_size": 1.0, "remote_num_tokens": 40.0, "remote_blocks_expiry_time": nil, "transfer_mode": "pull"})
		}
		for k, v := range want {
			if got, ok := kv[k]; !ok || !jsonEqual(got, v) {
				t.Errorf("grouped=%v: %s = %v, want %v", grouped, k, got, v)
			}
		}
		if !jsonEqual(kv["remote_block_ids"], wantBlocks) {
			t.Errorf("grouped=%v: remote_block_ids = %v, want %v", grouped, kv["remote_block_ids"], wantBlocks)
		}
		if pt, _ := strconv.Atoi(port); kv["remote_port"] != float64(pt) {
			t.Errorf("remote_port %v, side channel %s", kv["remote_port"], port)
		}
		// The internal id carries a random suffix after the X-Request-Id based id.
		if rid, _ := kv["remote_request_id"].(string); len(rid) != len("cmpl-req-1-")+8 || rid[:len("cmpl-req-1-")] != "cmpl-req-1-" {
			t.Errorf("remote_request_id %q", rid)
		}
		if n := len(kv); grouped && n != 13 || !grouped && n != 8 {
			t.Errorf("grouped=%v: %d keys: %v", grouped, n, kv)
		}
		if st := stats(t, p); st.LeasesHeld != 1 || st.Requests["prefill"] != 1 || len(st.PrefillViolations) != 0 {
			t.Errorf("stats %+v", st)
		}
	}
}

func TestNixlDecode(t *testing.T) {
	p := start(t, Config{Kind: VLLM, Role: Prefill})
	d := start(t, Config{Kind: VLLM, Role: Decode})
	const prompt = "the prompt a router disaggregates"
	client := map[string]any{"model": "m", "prompt": prompt, "max_tokens": 6, "min_tokens": 6}
	direct := text(t, post(t, d.URL()+"/v1/completions", client).json(t))

	withParams := func(kv any) map[string]any {
		b := maps.Clone(client)
		b["kv_transfer_params"] = kv
		return b
	}
	prefill := func() map[string]any { return kvParamsOf(t, post(t, p.URL()+"/v1/completions", prefillBody(prompt))) }
	edited := func(key string, v any) func() any {
		return func() any {
			kv := prefill()
			if v == nil {
				delete(kv, key)
			} else {
				kv[key] = v
			}
			return kv
		}
	}
	for _, tc := range []struct {
		name       string
		body       func() map[string]any
		wantKV     string
		wantReason string
	}{
		{"params verbatim", func() map[string]any { return withParams(prefill()) }, KVTransferred, ""},
		{"no params", func() map[string]any { return client }, KVRecomputed, "no_params"},
		{"null params", func() map[string]any { return withParams(nil) }, KVRecomputed, "no_params"},
		{"do_remote_prefill false", func() map[string]any { return withParams(edited("do_remote_prefill", false)()) }, KVRecomputed, "no_params"},
		{"remote_port missing", func() map[string]any { return withParams(edited("remote_port", nil)()) }, KVRecomputed, "invalid_params"},
		{"remote_request_id missing", func() map[string]any { return withParams(edited("remote_request_id", nil)()) }, KVRecomputed, "invalid_params"},
		{"remote_port a string", func() map[string]any { return withParams(edited("remote_port", "5600")()) }, KVRecomputed, "invalid_params"},
		{"empty block list", func() map[string]any { return withParams(edited("remote_block_ids", []int{})()) }, KVRecomputed, "invalid_params"},
		{"unknown request id", func() map[string]any { return withParams(edited("remote_request_id", "nope")()) }, KVRecomputed, "pull_failed"},
		{"other engine id", func() map[string]any { return withParams(edited("remote_engine_id", "other")()) }, KVRecomputed, "pull_failed"},
		{"nobody at host:port", func() map[string]any { return withParams(edited("remote_port", 1)()) }, KVRecomputed, "pull_failed"},
		{"another prompt's KV", func() map[string]any {
			b := withParams(prefill())
			b["prompt"] = "a different prompt"
			return b
		}, KVRecomputed, "mismatch"},
	} {
		body := tc.body()
		r := post(t, d.URL()+"/v1/completions", body)
		if r.status != 200 || r.header.Get("X-Mock-Kv") != tc.wantKV || r.header.Get("X-Mock-Kv-Reason") != tc.wantReason {
			t.Errorf("%s: %d x-mock-kv=%q reason=%q, want %q %q", tc.name, r.status, r.header.Get("X-Mock-Kv"), r.header.Get("X-Mock-Kv-Reason"), tc.wantKV, tc.wantReason)
			continue
		}
		if got := text(t, r.json(t)); body["prompt"] == prompt && got != direct {
			t.Errorf("%s: text %q, the direct request gave %q", tc.name, got, direct)
		}
	}
	st := stats(t, d)
	if st.Transferred != 1 || st.Recomputed != 12 || st.RecomputeReasons["invalid_params"] != 4 || st.RecomputeReasons["pull_failed"] != 3 || st.RecomputeReasons["mismatch"] != 1 {
		t.Errorf("decoder stats %+v", st)
	}
	// Pulled or mismatched leases are freed; the ones the broken params pointed away
	// from stay held until they expire.
	if ps := stats(t, p); ps.LeasesReleased != 2 || ps.LeasesHeld != 8 || ps.Requests["nixl_pull"] != 4 {
		t.Errorf("prefiller stats %+v", ps)
	}
	recs, _ := d.Control().Requests(testCtx(t), RequestFilter{Kind: kindDecode})
	if last := recs[len(recs)-1]; last.KV != KVRecomputed || last.KVReason != "mismatch" || last.Status != 200 {
		t.Errorf("last record %+v", last)
	}
}

func TestNixlLeaseExpiry(t *testing.T) {
	p := start(t, Config{Kind: VLLM, Role: Prefill, LeaseDuration: 80 * time.Millisecond})
	d := start(t, Config{Kind: VLLM, Role: Decode})
	kv := kvParamsOf(t, post(t, p.URL()+"/v1/completions", prefillBody("expiring prompt")))
	if st := stats(t, p); st.LeasesHeld != 1 {
		t.Fatalf("leases_held %d", st.LeasesHeld)
	}
	eventually(t, "the lease to expire", func() bool { return stats(t, p).LeasesHeld == 0 })
	r := post(t, d.URL()+"/v1/completions", map[string]any{"prompt": "expiring prompt", "max_tokens": 2, "kv_transfer_params": kv})
	if r.header.Get("X-Mock-Kv") != KVRecomputed || r.header.Get("X-Mock-Kv-Reason") != "expired" {
		t.Errorf("decode after expiry: %v", r.header)
	}
	if st := stats(t, p); st.LeasesExpired != 1 || st.LeasesReleased != 0 {
		t.Errorf("prefiller stats %+v", st)
	}
}

func TestNixlPrefillContract(t *testing.T) {
	p := start(t, Config{Kind: VLLM, Role: Prefill})
	d := start(t, Config{Kind: VLLM, Role: Decode})
	body := prefillBody("contract")
	body["stream"] = true
	body["max_tokens"] = 3
	body["ignore_eos"] = true
	r := post(t, p.URL()+"/v1/completions", body)
	// The engine still serves it (as vLLM would): a stream, and no params in it.
	if r.status != 200 || len(r.events()) != 4 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	st := stats(t, p)
	if st.PrefillViolations["stream"] != 1 || st.PrefillViolations["max_tokens"] != 1 || st.LeasesHeld != 1 {
		t.Errorf("stats %+v", st)
	}
	// vLLM rejects stream_options on a non-streaming request, so a router must drop it.
	body = prefillBody("contract")
	body["stream_options"] = map[string]any{"include_usage": true}
	r = post(t, p.URL()+"/v1/completions", body)
	if e, _ := r.json(t)["error"].(map[string]any); r.status != 400 || e["message"] != "Stream options can only be defined when `stream=True`." {
		t.Errorf("stream_options on a prefill: %d %s", r.status, r.body)
	}
	if recs, _ := p.Control().Requests(testCtx(t), RequestFilter{Kind: kindPrefill}); len(recs) != 2 || recs[1].Status != 400 {
		t.Errorf("records %+v", recs)
	}
	// A prefill at a decoder and a decode pulling from a prefiller-only engine are
	// counted as misrouted, and still served.
	kv := kvParamsOf(t, post(t, p.URL()+"/v1/completions", prefillBody("misrouted")))
	post(t, d.URL()+"/v1/completions", prefillBody("misrouted"))
	post(t, p.URL()+"/v1/completions", map[string]any{"prompt": "misrouted", "kv_transfer_params": kv})
	if st := stats(t, d); st.Misrouted != 1 {
		t.Errorf("decoder misrouted %d", st.Misrouted)
	}
	if st := stats(t, p); st.Misrouted != 1 || st.Transferred != 1 {
		t.Errorf("prefiller stats %+v", st)
	}
	// A missing_params fault answers 2xx with kv_transfer_params null and holds nothing.
	must(t, p.Control().Reset(testCtx(t)))
	must(t, p.Control().SetFaults(testCtx(t), Fault{Type: FaultMissingParams, Count: 1}))
	r = post(t, p.URL()+"/v1/completions", prefillBody("missing"))
	if m := r.json(t); r.status != 200 || m["kv_transfer_params"] != nil || text(t, m) == "" {
		t.Errorf("missing params: %d %s", r.status, r.body)
	}
	if st := stats(t, p); st.LeasesHeld != 0 || st.Faults["missing_params"] != 1 {
		t.Errorf("stats %+v", st)
	}
}

// A transferred decode's first token comes after a constant; a recomputed one after
// the prompt's compute time.
func TestNixlTimeToFirstToken(t *testing.T) {
	lat := Latency{PrefillPerToken: 400 * time.Microsecond, TransferredPrefill: time.Millisecond, PerOutputToken: time.Millisecond}
	p := start(t, Config{Kind: VLLM, Role: Prefill, Latency: lat})
	d := start(t, Config{Kind: VLLM, Role: Decode, Latency: lat})
	prompt := longPrompt(400) // 160 ms to compute
	ttft := func(body map[string]any) (time.Duration, string) {
		began := time.Now()
		resp, err := send(testCtx(t), d.URL()+"/v1/completions", body)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		buf := make([]byte, 1)
		if _, err := resp.Body.Read(buf); err != nil {
			t.Fatal(err)
		}
		return time.Since(began), resp.Header.Get("X-Mock-Kv")
	}
	kv := kvParamsOf(t, post(t, p.URL()+"/v1/completions", prefillBody(prompt)))
	fast, kind := ttft(map[string]any{"prompt": prompt, "max_tokens": 3, "stream": true, "kv_transfer_params": kv})
	slow, kind2 := ttft(map[string]any{"prompt": prompt, "max_tokens": 3, "stream": true})
	if kind != KVTransferred || kind2 != KVRecomputed || slow < 160*time.Millisecond || fast*2 > slow {
		t.Errorf("transferred %s after %v, recomputed %s after %v", kind, fast, kind2, slow)
	}
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return slices.Equal(ja, jb)
}

// A client that goes away leaves nothing behind: no handler, no slot, and a prefill
// cut short holds no lease.
func TestClientDisconnectLeavesNothing(t *testing.T) {
	lat := Latency{PrefillPerToken: time.Millisecond, TransferredPrefill: time.Microsecond, PerOutputToken: 50 * time.Millisecond}
	s := start(t, Config{Kind: VLLM, Role: Both, Latency: lat})
	for _, tc := range []struct {
		name string
		body map[string]any
	}{
		{"decode stream", map[string]any{"prompt": "bye", "max_tokens": 20, "ignore_eos": true, "stream": true}},
		{"prefill computing", prefillBody(longPrompt(300))}, // 300 ms of compute
	} {
		ctx, cancel := context.WithCancel(testCtx(t))
		if tc.body["stream"] != true {
			time.AfterFunc(50*time.Millisecond, cancel) // while the prompt computes
		}
		resp, err := send(ctx, s.URL()+"/v1/completions", tc.body)
		if err == nil {
			resp.Body.Read(make([]byte, 1)) // the first chunk arrived
			resp.Body.Close()
		}
		cancel()
		eventually(t, tc.name+" to be abandoned", func() bool {
			st := stats(t, s)
			return st.InFlight == 0 && st.Running == 0 && st.Waiting == 0
		})
	}
	st := stats(t, s)
	if st.ClientAborts != 2 || st.LeasesHeld != 0 {
		t.Errorf("stats %+v", st)
	}
	recs, _ := s.Control().Requests(testCtx(t), RequestFilter{})
	for _, r := range recs {
		if !r.Aborted || r.Status != 0 {
			t.Errorf("record %+v", r)
		}
	}
}
