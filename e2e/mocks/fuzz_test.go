package mocks

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzKVTransferParams feeds router-supplied kv_transfer_params to the decoders'
// readers: they must never panic and must only accept complete NIXL params.
func FuzzKVTransferParams(f *testing.F) {
	for _, s := range []string{
		`{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[1,2],"remote_engine_id":"e","remote_request_id":"r","remote_host":"127.0.0.1","remote_port":5600,"tp_size":1}`,
		`{"do_remote_prefill":true,"remote_block_ids":[[1],[2,3]],"remote_engine_id":"e","remote_request_id":"r","remote_host":"::1","remote_port":1}`,
		`{"ret_first_tok":true,"disagg_spec":{"req_id":"x","receiver_host":"h","receiver_init_port":[1],"receiver_alloc_port":[2]}}`,
		`{"remote_port":70000}`, `null`, `[]`, `{"remote_block_ids":"1"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if p, ok := parseNixlParams(json.RawMessage(raw)); ok && p.complete() {
			if *p.RemotePort < 1 || *p.RemotePort > 65535 || *p.RemoteHost == "" {
				t.Fatalf("complete() accepted %+v", p)
			}
			blockIDs(p.RemoteBlockIDs)
		}
		if p, ok := parseLMCacheParams(json.RawMessage(raw)); ok && p.DisaggSpec != nil {
			_ = len(p.DisaggSpec.ReceiverInitPort) + len(p.DisaggSpec.ReceiverAllocPort)
		}
	})
}

// FuzzEngineToEngine sends arbitrary bodies to the listeners other engines call (the
// NIXL side channel, the LMCache receivers, the SGLang bootstrap server) and to the
// control API: every answer must be a well-formed status, never a panic.
func FuzzEngineToEngine(f *testing.F) {
	f.Add("/nixl/pull", `{"engine_id":"e","request_id":"r","block_ids":[0]}`)
	f.Add("/lmcache/kv", `{"req_id":"x","rank":0,"tokens":[1,2,3]}`)
	f.Add("/lmcache/init", `{"rank":0}`)
	f.Add("/bootstrap/rooms/18446744073709551615/claim?wait_ms=0", ``)
	f.Add("/mock/faults", `{"faults":[{"type":"status","status":500}]}`)
	f.Add("/mock/latency", `{"slowdown":2,"per_output_token":"1ms"}`)
	vllm := start(f, Config{Kind: VLLM, Role: Prefill})
	lm := start(f, Config{Kind: LMCache, Role: Decode})
	sg := start(f, Config{Kind: SGLang, Role: Prefill})
	handlers := map[string]http.Handler{
		"/nixl/pull":    vllm.sideChannelHandler(),
		"/lmcache/kv":   lm.kvAllocHandler(0),
		"/lmcache/init": lm.kvInitHandler(0),
		"/bootstrap/":   sg.bootstrapHandler(),
		"/mock/":        vllm.apiHandler(),
	}
	f.Fuzz(func(t *testing.T, target, body string) {
		if u, err := url.ParseRequestURI(target); err != nil || u.Host != "" || strings.ContainsAny(target, " \r\n\t#") {
			return
		}
		for prefix, h := range handlers {
			if !strings.HasPrefix(target, prefix) {
				continue
			}
			for _, method := range []string{http.MethodPost, http.MethodPut} {
				req := httptest.NewRequest(method, target, strings.NewReader(body))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code < 200 || rec.Code > 599 {
					t.Fatalf("%s %s: status %d", method, target, rec.Code)
				}
			}
		}
		vllm.reset()
	})
}
