package plugin

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tidwall/gjson"

	"github.com/pdroute/pdroute/e2e/filtertest"
	"github.com/pdroute/pdroute/tokenest"
)

// Every test runs twice: natively under the SDK's proxytest and as the
// compiled module in envoyemu's VM driver (filtertest).

const rootID = 1

const nixlConfig = `{"mode":"nixl","threshold_tokens":100,"debug_headers":true,
 "prefill":{"endpoints":[{"name":"prefill-1","cluster":"prefill-1"}]},
 "decode":{"endpoints":[{"name":"decode-1","cluster":"decode-1"},{"name":"decode-2","cluster":"decode-2"}]}}`

func run(t *testing.T, config string, body func(t *testing.T, h filtertest.Harness)) {
	t.Helper()
	filtertest.Run(t, filtertest.Spec{
		VMContext:    NewVMContext,
		Package:      "./filter",
		PluginConfig: []byte(config),
	}, func(t *testing.T, h filtertest.Harness) {
		if !h.StartVM() || !h.StartPlugin() {
			t.Fatalf("plugin did not start; critical logs: %v", h.GetLogs(5))
		}
		body(t, h)
	})
}

func get(hs [][2]string, key string) (string, bool) {
	for _, p := range hs {
		if strings.EqualFold(p[0], key) {
			return p[1], true
		}
	}
	return "", false
}

func requestHeaders(path string, body string, extra ...[2]string) [][2]string {
	hs := [][2]string{{":method", "POST"}, {":path", path}, {":authority", "pdroute.test"},
		{"content-type", "application/json"}, {"content-length", strconv.Itoa(len(body))}}
	return append(hs, extra...)
}

var longPrompt = strings.Repeat("the quick brown fox jumps over the lazy dog ", 40)

func longBody() string {
	return `{"model":"m","prompt":"` + longPrompt + `","max_tokens":20,"stream":true,"min_tokens":2}`
}

// send runs a request through headers and body; it returns the stream id
// and the body callback's action.
func send(t *testing.T, h filtertest.Harness, path, body string, extra ...[2]string) (uint32, types.Action) {
	t.Helper()
	id := h.InitializeHttpContext()
	if a := h.CallOnRequestHeaders(id, requestHeaders(path, body, extra...), false); a != types.ActionPause {
		t.Fatalf("request headers: action %v, want Pause", a)
	}
	return id, h.CallOnRequestBody(id, []byte(body), true)
}

func onlyCallout(t *testing.T, h filtertest.Harness, id uint32) filtertest.Callout {
	t.Helper()
	cs := h.GetCalloutAttributesFromContext(id)
	if len(cs) != 1 {
		t.Fatalf("stream %d dispatched %d calls, want 1: %+v", id, len(cs), cs)
	}
	return cs[0]
}

func counter(t *testing.T, h filtertest.Harness, name string) uint64 {
	t.Helper()
	v, err := h.GetCounterMetric(name)
	if err != nil {
		t.Fatalf("metric %s: %v", name, err)
	}
	return v
}

func TestInvalidConfigIsRejected(t *testing.T) {
	filtertest.Run(t, filtertest.Spec{
		VMContext: NewVMContext, Package: "./filter",
		PluginConfig: []byte(`{"mode":"nixl","threshold_tokens":-1,"decode":{"endpoints":[]},"bogus":1}`),
	}, func(t *testing.T, h filtertest.Harness) {
		h.StartVM()
		if h.StartPlugin() {
			t.Fatal("plugin started with an invalid configuration")
		}
		logs := strings.Join(h.GetLogs(5), "\n")
		for _, want := range []string{"threshold_tokens", "bogus", "decode.endpoints"} {
			if !strings.Contains(logs, want) {
				t.Errorf("critical logs do not name %q:\n%s", want, logs)
			}
		}
	})
}

func TestDirectBelowThreshold(t *testing.T) {
	run(t, nixlConfig, func(t *testing.T, h filtertest.Harness) {
		body := `{"model":"m","prompt":"hello","kv_transfer_params":{"remote_host":"evil"}}`
		id, a := send(t, h, "/v1/completions", body,
			[2]string{"x-pdroute-cluster", "prefill-1"}, [2]string{"x-envoy-original-dst-host", "6.6.6.6:80"})
		if a != types.ActionContinue {
			t.Fatalf("body action %v, want Continue", a)
		}
		if n := len(h.GetCalloutAttributesFromContext(id)); n != 0 {
			t.Fatalf("direct request dispatched %d calls", n)
		}
		hs := h.GetCurrentRequestHeaders(id)
		if c, _ := get(hs, "x-pdroute-cluster"); c != "decode-1" && c != "decode-2" {
			t.Errorf("route header %q, want a decoder", c)
		}
		if v, ok := get(hs, "x-envoy-original-dst-host"); ok {
			t.Errorf("client original-dst header kept: %q", v)
		}
		if rid, _ := get(hs, "x-request-id"); len(rid) != 36 || rid[14] != '4' {
			t.Errorf("x-request-id %q is not a UUIDv4", rid)
		}
		got := string(h.GetCurrentRequestBody(id))
		if got != `{"model":"m","prompt":"hello"}` {
			t.Errorf("decode body %s: client kv_transfer_params not removed", got)
		}
		if cl, _ := get(hs, "content-length"); cl != strconv.Itoa(len(got)) {
			t.Errorf("content-length %s, body %d bytes", cl, len(got))
		}
		h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
		if p, _ := get(h.GetCurrentResponseHeaders(id), "x-pdroute-path"); p != "direct" {
			t.Errorf("x-pdroute-path %q", p)
		}
		if counter(t, h, "pdroute.requests.direct") != 1 || counter(t, h, "pdroute.sanitized_requests") != 1 {
			t.Error("direct/sanitized counters not incremented")
		}
	})
}

func TestPassthrough(t *testing.T) {
	run(t, nixlConfig, func(t *testing.T, h filtertest.Harness) {
		id := h.InitializeHttpContext()
		hs := [][2]string{{":method", "GET"}, {":path", "/v1/models"}, {":authority", "x"}, {"x-pdroute-cluster", "prefill-1"}}
		if a := h.CallOnRequestHeaders(id, hs, true); a != types.ActionContinue {
			t.Fatalf("action %v", a)
		}
		if c, _ := get(h.GetCurrentRequestHeaders(id), "x-pdroute-cluster"); !strings.HasPrefix(c, "decode-") {
			t.Errorf("route header %q, want a decoder (client value dropped)", c)
		}
		if counter(t, h, "pdroute.requests.passthrough") != 1 {
			t.Error("passthrough not counted")
		}
	})
}

const kvParams = `{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[3,4]],"remote_engine_id":"e1","remote_request_id":"r1","remote_host":"10.0.0.5","remote_port":5600,"tp_size":1}`

func TestNIXLDisaggregated(t *testing.T) {
	run(t, nixlConfig, func(t *testing.T, h filtertest.Harness) {
		body := longBody()
		id, a := send(t, h, "/v1/completions", body, [2]string{"x-request-id", "client-id-1"}, [2]string{"authorization", "Bearer k"})
		if a != types.ActionPause {
			t.Fatalf("body action %v, want Pause while prefilling", a)
		}
		c := onlyCallout(t, h, id)
		if c.Upstream != "prefill-1" {
			t.Errorf("prefill cluster %q", c.Upstream)
		}
		for k, want := range map[string]string{":method": "POST", ":path": "/v1/completions", "x-request-id": "client-id-1", "authorization": "Bearer k"} {
			if v, _ := get(c.Headers, k); v != want {
				t.Errorf("prefill header %s = %q, want %q", k, v, want)
			}
		}
		pb := gjson.ParseBytes(c.Body)
		if !pb.Get("kv_transfer_params.do_remote_decode").Bool() || pb.Get("stream").Bool() || pb.Get("max_tokens").Int() != 1 || pb.Get("min_tokens").Exists() {
			t.Errorf("prefill body %s", c.Body)
		}
		h.CallOnHttpCallResponse(c.ID, [][2]string{{":status", "200"}}, nil,
			[]byte(`{"id":"cmpl-1","choices":[{"text":"x"}],"kv_transfer_params":`+kvParams+`}`))
		if a := h.GetCurrentHttpStreamAction(id); a != types.ActionContinue {
			t.Fatalf("stream not resumed after the prefill answer (action %v)", a)
		}
		got := h.GetCurrentRequestBody(id)
		if p := gjson.GetBytes(got, "kv_transfer_params").Raw; p != kvParams {
			t.Errorf("decode kv_transfer_params %s, want verbatim %s", p, kvParams)
		}
		if gjson.GetBytes(got, "max_tokens").Int() != 20 || !gjson.GetBytes(got, "stream").Bool() || gjson.GetBytes(got, "min_tokens").Int() != 2 {
			t.Errorf("decode body lost the client's fields: %s", got)
		}
		hs := h.GetCurrentRequestHeaders(id)
		if cl, _ := get(hs, "content-length"); cl != strconv.Itoa(len(got)) {
			t.Errorf("content-length %s, body %d", cl, len(got))
		}
		if rid, _ := get(hs, "x-request-id"); rid != "client-id-1" {
			t.Errorf("x-request-id %q", rid)
		}
		h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
		rh := h.GetCurrentResponseHeaders(id)
		for k, want := range map[string]string{"x-pdroute-path": "disagg", "x-pdroute-prefill": "prefill-1"} {
			if v, _ := get(rh, k); v != want {
				t.Errorf("%s = %q, want %q", k, v, want)
			}
		}
		if v, _ := get(rh, "x-pdroute-tokens"); v == "" {
			t.Error("no x-pdroute-tokens")
		}
		h.CompleteHttpContext(id)
		if counter(t, h, "pdroute.requests.disagg") != 1 {
			t.Error("disagg not counted")
		}
	})
}

func TestPrefillFailurePolicies(t *testing.T) {
	failConfig := strings.Replace(nixlConfig, `"debug_headers":true,`, `"debug_headers":true,"on_prefill_failure":"fail",`, 1)
	for _, tc := range []struct {
		name, config string
		status       string // "" = reset
		answer       string
		wantLocal    int    // 0: resumed to a decoder
		wantPath     string // when resumed
		wantMetric   string
	}{
		{"500 fallback", nixlConfig, "500", `{"error":"boom"}`, 0, "fallback", "pdroute.prefill_failures.server_error"},
		{"reset fallback", nixlConfig, "", ``, 0, "fallback", "pdroute.prefill_failures.reset"},
		{"no params fallback", nixlConfig, "200", `{"id":"x","choices":[]}`, 0, "fallback", "pdroute.prefill_failures.bad_answer"},
		{"500 fail", failConfig, "500", `{"error":"boom"}`, 502, "", "pdroute.prefill_failures.server_error"},
		{"400 relayed", nixlConfig, "400", `{"error":{"message":"bad model"}}`, 400, "", "pdroute.prefill_failures.rejected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run(t, tc.config, func(t *testing.T, h filtertest.Harness) {
				body := longBody()
				id, _ := send(t, h, "/v1/completions", body)
				c := onlyCallout(t, h, id)
				var hs [][2]string
				if tc.status != "" {
					hs = [][2]string{{":status", tc.status}, {"content-type", "application/json"}}
				}
				h.CallOnHttpCallResponse(c.ID, hs, nil, []byte(tc.answer))
				if counter(t, h, tc.wantMetric) != 1 {
					t.Errorf("%s not counted", tc.wantMetric)
				}
				lr := h.GetSentLocalResponse(id)
				if tc.wantLocal != 0 {
					if lr == nil || lr.StatusCode != tc.wantLocal {
						t.Fatalf("local response %+v, want %d", lr, tc.wantLocal)
					}
					if tc.wantLocal == 400 && string(lr.Body) != tc.answer {
						t.Errorf("relayed body %s, want the prefill's %s", lr.Body, tc.answer)
					}
					if tc.wantLocal == 502 && gjson.GetBytes(lr.Body, "error.code").String() != "PREFILL_FAILED" {
						t.Errorf("502 body %s", lr.Body)
					}
					return
				}
				if lr != nil {
					t.Fatalf("unexpected local response %d %s", lr.StatusCode, lr.Body)
				}
				if a := h.GetCurrentHttpStreamAction(id); a != types.ActionContinue {
					t.Fatalf("not resumed: %v", a)
				}
				if got := string(h.GetCurrentRequestBody(id)); got != body {
					t.Errorf("fallback body changed:\n%s", got)
				}
				h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
				if p, _ := get(h.GetCurrentResponseHeaders(id), "x-pdroute-path"); p != tc.wantPath {
					t.Errorf("x-pdroute-path %q, want %q", p, tc.wantPath)
				}
			})
		})
	}
}

func TestClientErrors(t *testing.T) {
	run(t, strings.Replace(nixlConfig, `"threshold_tokens":100,`, `"threshold_tokens":100,"max_body_bytes":2000,`, 1), func(t *testing.T, h filtertest.Harness) {
		id, _ := send(t, h, "/v1/chat/completions", `{"model":`)
		lr := h.GetSentLocalResponse(id)
		if lr == nil || lr.StatusCode != 400 || gjson.GetBytes(lr.Body, "error.type").String() != "invalid_request_error" {
			t.Fatalf("malformed JSON: local response %+v", lr)
		}
		// Too large, known from content-length: answered at the headers.
		id = h.InitializeHttpContext()
		big := `{"prompt":"` + strings.Repeat("x", 3000) + `"}`
		h.CallOnRequestHeaders(id, requestHeaders("/v1/completions", big), false)
		if lr := h.GetSentLocalResponse(id); lr == nil || lr.StatusCode != 413 {
			t.Fatalf("oversize: local response %+v", lr)
		}
		if counter(t, h, "pdroute.local_replies.4xx") != 2 {
			t.Error("4xx local replies not counted")
		}
	})
}

func TestOrchestratedOverwritesRemoteHost(t *testing.T) {
	cfg := `{"mode":"orchestrated","threshold_tokens":0,"orchestrated":{"attach_prefill_response":true},
	 "prefill":{"endpoints":[{"name":"p1","address":"10.9.8.7:8000"}]},
	 "decode":{"endpoints":[{"name":"d1","cluster":"d1"}]}}`
	run(t, cfg, func(t *testing.T, h filtertest.Harness) {
		id, _ := send(t, h, "/v1/completions", `{"model":"m","prompt":"hi"}`)
		c := onlyCallout(t, h, id)
		if c.Upstream != "pdroute_original_dst" {
			t.Errorf("prefill through %q, want the ORIGINAL_DST cluster", c.Upstream)
		}
		if v, _ := get(c.Headers, "x-envoy-original-dst-host"); v != "10.9.8.7:8000" {
			t.Errorf("prefill original-dst header %q", v)
		}
		answer := `{"id":"c","kv_transfer_params":` + kvParams + `}`
		h.CallOnHttpCallResponse(c.ID, [][2]string{{":status", "200"}}, nil, []byte(answer))
		got := h.GetCurrentRequestBody(id)
		if v := gjson.GetBytes(got, "kv_transfer_params.remote_host").String(); v != "10.9.8.7" {
			t.Errorf("remote_host %q, want the prefill endpoint's host", v)
		}
		if v := gjson.GetBytes(got, "kv_transfer_params.remote_engine_id").String(); v != "e1" {
			t.Errorf("other params not kept: %s", got)
		}
		if v := gjson.GetBytes(got, "disagg_prefill_resp.id").String(); v != "c" {
			t.Errorf("disagg_prefill_resp missing: %s", got)
		}
	})
}

const sglangConfig = `{"mode":"sglang","threshold_tokens":0,
 "prefill":{"endpoints":[{"name":"p1","cluster":"p1","host":"fd00::7","bootstrap_port":8998}]},
 "decode":{"endpoints":[{"name":"d1","cluster":"d1"}]}}`

func TestSGLangConcurrentLegs(t *testing.T) {
	run(t, sglangConfig, func(t *testing.T, h filtertest.Harness) {
		id, a := send(t, h, "/generate", `{"text":["a","b"],"sampling_params":{"max_new_tokens":4}}`)
		if a != types.ActionContinue {
			t.Fatalf("decode leg not sent at once: %v", a)
		}
		c := onlyCallout(t, h, id)
		pre, dec := gjson.ParseBytes(c.Body), gjson.ParseBytes(h.GetCurrentRequestBody(id))
		if rooms := pre.Get("bootstrap_room"); !rooms.IsArray() || len(rooms.Array()) != 2 || rooms.Raw != dec.Get("bootstrap_room").Raw {
			t.Errorf("rooms: prefill %s, decode %s", rooms.Raw, dec.Get("bootstrap_room").Raw)
		}
		if hosts := dec.Get("bootstrap_host").Raw; hosts != `["[fd00::7]","[fd00::7]"]` {
			t.Errorf("bootstrap_host %s", hosts)
		}
		if c, _ := get(h.GetCurrentRequestHeaders(id), "x-pdroute-cluster"); c != "d1" {
			t.Errorf("decode route %q", c)
		}
		// The prefill fails before the decoder answered: 502 at once.
		h.CallOnHttpCallResponse(c.ID, [][2]string{{":status", "500"}}, nil, []byte("x"))
		lr := h.GetSentLocalResponse(id)
		if lr == nil || lr.StatusCode != 502 || !strings.Contains(string(lr.Body), "bootstrap_room") {
			t.Fatalf("local response %+v, want 502 naming the room", lr)
		}
	})
}

func TestSGLangHoldsHeadersUntilPrefillAnswers(t *testing.T) {
	run(t, sglangConfig, func(t *testing.T, h filtertest.Harness) {
		id, _ := send(t, h, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
		c := onlyCallout(t, h, id)
		if a := h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false); a != types.ActionPause {
			t.Fatalf("response headers %v, want Pause until the prefill outcome", a)
		}
		h.CallOnHttpCallResponse(c.ID, [][2]string{{":status", "200"}}, nil, []byte(`{}`))
		if a := h.GetCurrentHttpStreamAction(id); a != types.ActionContinue {
			t.Errorf("response not resumed after a good prefill: %v", a)
		}
	})
}

const lmcacheConfig = `{"mode":"lmcache","threshold_tokens":0,"lmcache":{"kv_wait_timeout_ms":5000},
 "prefill":{"endpoints":[{"name":"p1","cluster":"p1"}]},
 "decode":{"endpoints":[{"name":"d1","cluster":"d1","kv_receiver":{"host":"10.0.0.9","init_ports":[7300,7301],"alloc_ports":[7400,7401]}}]}}`

func TestLMCacheGatesOnKVAndPrefill(t *testing.T) {
	for _, order := range []string{"kv-first", "prefill-first"} {
		t.Run(order, func(t *testing.T) {
			run(t, lmcacheConfig, func(t *testing.T, h filtertest.Harness) {
				id, a := send(t, h, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":5,"stream":true}`)
				if a != types.ActionPause {
					t.Fatalf("action %v", a)
				}
				tok := onlyCallout(t, h, id)
				if p, _ := get(tok.Headers, ":path"); p != "/tokenize" || gjson.GetBytes(tok.Body, "messages.0.content").String() != "hello" {
					t.Fatalf("tokenize call %s %s", p, tok.Body)
				}
				h.CallOnHttpCallResponse(tok.ID, [][2]string{{":status", "200"}}, nil, []byte(`{"tokens":[11,12,13],"count":3,"max_model_len":100}`))
				calls := h.GetCalloutAttributesFromContext(id)
				if len(calls) != 2 {
					t.Fatalf("after tokenize: %d calls", len(calls))
				}
				pre := calls[1]
				spec := gjson.GetBytes(pre.Body, "kv_transfer_params.disagg_spec")
				if gjson.GetBytes(pre.Body, "prompt").Raw != "[11,12,13]" || spec.Get("receiver_host").String() != "10.0.0.9" || spec.Get("receiver_alloc_port").Raw != "[7400,7401]" {
					t.Fatalf("prefill body %s", pre.Body)
				}
				kvID := spec.Get("req_id").String()
				polls := h.GetCalloutAttributesFromContext(rootID)
				if len(polls) != 1 || polls[0].Upstream != "kvbridge" || !strings.Contains(string(polls[0].Body), kvID) || gjson.GetBytes(polls[0].Body, "ids.0.count").Int() != 2 {
					t.Fatalf("kvbridge polls from the root: %+v", polls)
				}
				ready := func() {
					h.CallOnHttpCallResponse(polls[0].ID, [][2]string{{":status", "200"}}, nil, []byte(`{"ready":[{"req_id":"`+kvID+`","count":2}]}`))
				}
				answer := func() {
					h.CallOnHttpCallResponse(pre.ID, [][2]string{{":status", "200"}}, nil,
						[]byte(`{"id":"cmpl-9","created":7,"model":"m","choices":[{"text":" Hi","finish_reason":"length"}],"kv_transfer_params":{"first_tok":42}}`))
				}
				if order == "kv-first" {
					ready()
					if a := h.GetCurrentHttpStreamAction(id); a != types.ActionPause {
						t.Fatal("resumed before the prefill answered")
					}
					if n := len(h.GetCalloutAttributesFromContext(rootID)); n != 1 {
						t.Errorf("%d kvbridge polls; a complete id must not be polled again", n)
					}
					answer()
				} else {
					answer()
					if a := h.GetCurrentHttpStreamAction(id); a != types.ActionPause {
						t.Fatal("resumed before the KV was ready")
					}
					ready()
				}
				if a := h.GetCurrentHttpStreamAction(id); a != types.ActionContinue {
					t.Fatalf("not resumed: %v", a)
				}
				dec := h.GetCurrentRequestBody(id)
				if gjson.GetBytes(dec, "prompt").Raw != "[11,12,13,42]" || gjson.GetBytes(dec, "max_tokens").Int() != 4 || gjson.GetBytes(dec, "kv_transfer_params").Exists() {
					t.Errorf("decode body %s", dec)
				}
				if p, _ := get(h.GetCurrentRequestHeaders(id), ":path"); p != "/v1/completions" {
					t.Errorf(":path %q", p)
				}
				h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
				h.CallOnResponseBody(id, []byte(`data: {"id":"cmpl-9","object":"text_completion","created":7,"model":"m","choices":[{"index":0,"text":" there","finish_reason":null}]}`+"\n\n"), false)
				out := string(h.GetCurrentResponseBody(id))
				first := strings.Index(out, `"content":" Hi"`)
				second := strings.Index(out, `"content":" there"`)
				if first < 0 || second < first || !strings.Contains(out, "chat.completion.chunk") {
					t.Errorf("client stream does not start with the first token as chat chunks:\n%s", out)
				}
				if counter(t, h, "pdroute.kv_wait.ready") != 1 {
					t.Error("kv_wait.ready not counted")
				}
			})
		})
	}
}

func TestClientGoneReleasesEverything(t *testing.T) {
	run(t, lmcacheConfig, func(t *testing.T, h filtertest.Harness) {
		id, _ := send(t, h, "/v1/completions", `{"model":"m","prompt":[1,2,3],"max_tokens":5}`)
		pre := onlyCallout(t, h, id) // token ids: no tokenize call
		if g, _ := h.GetGaugeMetric("pdroute.kv_wait.waiting"); g != 1 {
			t.Fatalf("waiting gauge %d, want 1", g)
		}
		h.CompleteHttpContext(id) // the client went away mid-prefill
		if g, _ := h.GetGaugeMetric("pdroute.kv_wait.waiting"); g != 0 {
			t.Errorf("waiting gauge %d after the client left, want 0", g)
		}
		// The late answer is dropped without harm; the next request is served.
		h.CallOnHttpCallResponse(pre.ID, [][2]string{{":status", "200"}}, nil, []byte(`{"kv_transfer_params":{"first_tok":1}}`))
		id2, a := send(t, h, "/v1/completions", `{"model":"m","prompt":[1,2,3],"max_tokens":5}`)
		if a != types.ActionPause || len(h.GetCalloutAttributesFromContext(id2)) != 1 {
			t.Errorf("next request not served normally: action %v", a)
		}
	})
}

func TestDebugPathReportsSharedState(t *testing.T) {
	cfg := strings.Replace(nixlConfig, `"debug_headers":true,`, `"debug_headers":true,"debug_path":"/_pdroute/state",`, 1)
	cfg = strings.Replace(cfg, `"decode":{"endpoints"`, `"decode":{"strategy":"least_loaded","endpoints"`, 1)
	cfg = strings.Replace(cfg, `"prefill":{"endpoints"`, `"prefill":{"strategy":"round_robin","endpoints"`, 1)
	run(t, cfg, func(t *testing.T, h filtertest.Harness) {
		busy, _ := send(t, h, "/v1/completions", `{"model":"m","prompt":"hi"}`) // direct: one decode in flight
		state := func() gjson.Result {
			id := h.InitializeHttpContext()
			h.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/_pdroute/state"}, {":authority", "x"}}, true)
			lr := h.GetSentLocalResponse(id)
			if lr == nil || lr.StatusCode != 200 {
				t.Fatalf("debug path answered %+v", lr)
			}
			return gjson.ParseBytes(lr.Body)
		}
		if n := state().Get("pools.decode.#(inflight==1)#").Array(); len(n) != 1 {
			t.Fatalf("want one decoder with 1 in flight: %s", state().Raw)
		}
		h.CompleteHttpContext(busy)
		if s := state(); s.Get("pools.decode.0.inflight").Int()+s.Get("pools.decode.1.inflight").Int() != 0 || s.Get("mode").String() != "nixl" {
			t.Errorf("in-flight not released: %s", s.Raw)
		}
		// issue 31: round_robin (the prefill pool here) keeps no in-flight
		// counts, so it shows none rather than a 0 that reads as idle
		s := state()
		if s.Get("pools.prefill.0.inflight").Exists() || s.Get("pools.prefill.0.recent_requests").Exists() || s.Get("pools.decode.0.recent_requests").Exists() {
			t.Errorf("counts a strategy does not keep are shown: %s", s.Raw)
		}
		if !s.Get("pools.decode.0.inflight").Exists() {
			t.Errorf("least_loaded's in-flight counts are not shown: %s", s.Raw)
		}
	})
}

// TestPrefixedPathIsEstimated: a handled path mounted under a prefix is
// estimated (and so disaggregated) like its canonical API path.
func TestPrefixedPathIsEstimated(t *testing.T) {
	cfg := strings.Replace(nixlConfig, `"threshold_tokens":100,`, `"threshold_tokens":100,"paths":["/openai/v1/completions"],`, 1)
	run(t, cfg, func(t *testing.T, h filtertest.Harness) {
		id, a := send(t, h, "/openai/v1/completions", longBody())
		if a != types.ActionPause || len(h.GetCalloutAttributesFromContext(id)) != 1 {
			t.Fatalf("long prompt on a prefixed path not disaggregated (action %v)", a)
		}
		if p, _ := get(onlyCallout(t, h, id).Headers, ":path"); p != "/openai/v1/completions" {
			t.Errorf("prefill path %q, want the client's", p)
		}
	})
}

// TestRepeatedToolsEstimateTheSame sends an agent's request three times,
// with either method: the root's tool cache holds its definitions after
// the first, and every estimate (x-pdroute-tokens) is tokenest.Estimate's.
func TestRepeatedToolsEstimateTheSame(t *testing.T) {
	for _, m := range []tokenest.Method{tokenest.Default, tokenest.Chars4} {
		t.Run(m.String(), func(t *testing.T) { repeatTools(t, m) })
	}
}

func repeatTools(t *testing.T, m tokenest.Method) {
	cfg := strings.Replace(nixlConfig, `"threshold_tokens":100,`, `"threshold_tokens":100000,"token_method":"`+m.String()+`",`, 1)
	tool := func(name string) string {
		return `{"type":"function","function":{"name":"` + name + `","description":"Looks up ` + name +
			` for the user and returns it as JSON.","parameters":{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}}}`
	}
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[` +
		tool("get_weather") + "," + tool("get_calendar") + "," + tool("get_weather") + `]}`
	want, err := tokenest.Estimate([]byte(body), "/v1/chat/completions", m)
	if err != nil || m == tokenest.Default && want.Breakdown.Tools == 0 {
		t.Fatalf("Estimate: %+v, %v", want, err)
	}
	run(t, cfg, func(t *testing.T, h filtertest.Harness) {
		for i := range 3 {
			id, a := send(t, h, "/v1/chat/completions", body)
			if a != types.ActionContinue {
				t.Fatalf("request %d: body action %v, want Continue", i, a)
			}
			h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
			if v, _ := get(h.GetCurrentResponseHeaders(id), "x-pdroute-tokens"); v != strconv.Itoa(want.Tokens) {
				t.Errorf("request %d: x-pdroute-tokens %q, want %d", i, v, want.Tokens)
			}
		}
		// the first request: two definitions counted, the repeated one
		// found; the next two: all three found
		if hits, misses := counter(t, h, "pdroute.tool_cache.hits"), counter(t, h, "pdroute.tool_cache.misses"); hits != 7 || misses != 2 {
			t.Errorf("tool cache hits %d, misses %d; want 7 and 2", hits, misses)
		}
	})
}

// TestLMCacheClientTokenIDsOutliveTheBodyRead: a client's token-id prompt
// is kept from its body callback to its decode; bodies are read into one
// reused buffer, so another request's body read in between must not
// change it.
func TestLMCacheClientTokenIDsOutliveTheBodyRead(t *testing.T) {
	run(t, lmcacheConfig, func(t *testing.T, h filtertest.Harness) {
		id, a := send(t, h, "/v1/completions", `{"model":"m","prompt":[11,12,13],"max_tokens":5}`)
		if a != types.ActionPause {
			t.Fatalf("action %v", a)
		}
		pre := onlyCallout(t, h, id)
		if gjson.GetBytes(pre.Body, "prompt").Raw != "[11,12,13]" {
			t.Fatalf("prefill body %s", pre.Body)
		}
		kvID := gjson.GetBytes(pre.Body, "kv_transfer_params.disagg_spec.req_id").String()
		// another request's body, read while the first waits
		if _, a := send(t, h, "/v1/completions", `{"model":"m","prompt":[77,78,79],"max_tokens":5}`); a != types.ActionPause {
			t.Fatalf("second request: action %v", a)
		}
		h.CallOnHttpCallResponse(pre.ID, [][2]string{{":status", "200"}}, nil,
			[]byte(`{"id":"cmpl-9","created":7,"model":"m","choices":[{"text":" Hi","finish_reason":"length"}],"kv_transfer_params":{"first_tok":42}}`))
		polls := h.GetCalloutAttributesFromContext(rootID)
		if len(polls) == 0 {
			t.Fatal("no kvbridge poll")
		}
		h.CallOnHttpCallResponse(polls[0].ID, [][2]string{{":status", "200"}}, nil, []byte(`{"ready":[{"req_id":"`+kvID+`","count":2}]}`))
		if a := h.GetCurrentHttpStreamAction(id); a != types.ActionContinue {
			t.Fatalf("not resumed: %v", a)
		}
		if dec := h.GetCurrentRequestBody(id); gjson.GetBytes(dec, "prompt").Raw != "[11,12,13,42]" {
			t.Errorf("decode body %s", dec)
		}
	})
}

// A stream object serves the next stream once it ended (newStream): the
// next request must carry nothing of the previous one, and a stream whose
// prefill is still pending when it ends must not be handed to another
// request, whose state the late answer would then change.
func TestReusedStreamsStartClean(t *testing.T) {
	run(t, nixlConfig, func(t *testing.T, h filtertest.Harness) {
		body := longBody()
		answer := []byte(`{"id":"cmpl-1","choices":[{"text":"x"}],"kv_transfer_params":` + kvParams + `}`)
		id, _ := send(t, h, "/v1/completions", body, [2]string{"x-request-id", "client-id-1"}, [2]string{"authorization", "Bearer k"})
		h.CallOnHttpCallResponse(onlyCallout(t, h, id).ID, [][2]string{{":status", "200"}}, nil, answer)
		h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
		h.CompleteHttpContext(id)

		// The client leaves while the second request's prefill runs.
		gone, _ := send(t, h, "/v1/completions", body)
		late := onlyCallout(t, h, gone)
		if v, ok := get(late.Headers, "authorization"); ok {
			t.Errorf("second request's prefill carries the first's authorization %q", v)
		}
		if v, _ := get(late.Headers, "x-request-id"); v == "client-id-1" || v == "" {
			t.Errorf("second request's x-request-id %q, want a fresh one", v)
		}
		h.CompleteHttpContext(gone)

		next, a := send(t, h, "/v1/completions", body)
		if a != types.ActionPause {
			t.Fatalf("third request: body action %v, want Pause while prefilling", a)
		}
		c := onlyCallout(t, h, next)
		h.CallOnHttpCallResponse(late.ID, [][2]string{{":status", "200"}}, nil, answer)
		if a := h.GetCurrentHttpStreamAction(next); a != types.ActionPause {
			t.Fatalf("the ended stream's late answer changed the next request (action %v)", a)
		}
		if got := h.GetCurrentRequestBody(next); string(got) != body {
			t.Fatalf("the ended stream's late answer edited the next request's body: %s", got)
		}
		h.CallOnHttpCallResponse(c.ID, [][2]string{{":status", "200"}}, nil, answer)
		if a := h.GetCurrentHttpStreamAction(next); a != types.ActionContinue {
			t.Fatalf("third request not resumed by its own answer (action %v)", a)
		}
		h.CallOnResponseHeaders(next, [][2]string{{":status", "200"}}, false)
		if v, _ := get(h.GetCurrentResponseHeaders(next), "x-pdroute-path"); v != "disagg" {
			t.Errorf("third request's path %q, want disagg", v)
		}
		h.CompleteHttpContext(next)
		if n := counter(t, h, "pdroute.requests.disagg"); n != 2 {
			t.Errorf("disagg counted %d times, want 2", n)
		}
	})
}
