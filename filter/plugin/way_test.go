package plugin

import (
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tidwall/gjson"

	"github.com/pdroute/pdroute/e2e/filtertest"
)

// The headers way (route_at "headers", or auto where Envoy withholds the body
// of a paused request), in both harnesses. In the wasm half the request
// headers are unreadable once continued, as in Envoy: any late header edit
// would show as an error log.

func withRouteAt(config, way string) string {
	return strings.Replace(config, `{"mode":`, `{"route_at":"`+way+`","mode":`, 1)
}

// noErrors fails on error logs (level 4): a header edit after the headers
// continued is one.
func noErrors(t *testing.T, h filtertest.Harness) {
	t.Helper()
	if logs := h.GetLogs(4); len(logs) > 0 {
		t.Errorf("error logs: %q", logs)
	}
}

// headersWay sends the headers of a request that must continue at once with
// its decoder chosen; it returns the stream id.
func headersWay(t *testing.T, h filtertest.Harness, path, body string, extra ...[2]string) uint32 {
	t.Helper()
	id := h.InitializeHttpContext()
	if a := h.CallOnRequestHeaders(id, requestHeaders(path, body, extra...), false); a != types.ActionContinue {
		t.Fatalf("request headers: action %v, want Continue (headers way)", a)
	}
	hs := h.GetCurrentRequestHeaders(id)
	if c, _ := get(hs, "x-pdroute-cluster"); !strings.HasPrefix(c, "decode-") && c != "d1" {
		t.Errorf("route header %q at the headers, want a decoder", c)
	}
	if v, ok := get(hs, "content-length"); ok {
		t.Errorf("content-length %s kept: the body may change length", v)
	}
	if rid, _ := get(hs, "x-request-id"); rid == "" {
		t.Error("no x-request-id set at the headers")
	}
	if v, ok := get(hs, "x-envoy-original-dst-host"); ok {
		t.Errorf("client original-dst header kept: %q", v)
	}
	return id
}

func TestHeadersWayNIXL(t *testing.T) {
	run(t, withRouteAt(nixlConfig, "headers"), func(t *testing.T, h filtertest.Harness) {
		body := longBody()
		id := headersWay(t, h, "/v1/completions", body,
			[2]string{"x-pdroute-cluster", "prefill-1"}, [2]string{"x-envoy-original-dst-host", "6.6.6.6:80"},
			[2]string{"x-request-id", "client-id-7"})
		route, _ := get(h.GetCurrentRequestHeaders(id), "x-pdroute-cluster")
		if a := h.CallOnRequestBody(id, []byte(body[:100]), false); a != types.ActionPause {
			t.Fatalf("first chunk: action %v, want Pause (buffer)", a)
		}
		if a := h.CallOnRequestBody(id, []byte(body[100:]), true); a != types.ActionPause {
			t.Fatalf("body end: action %v, want Pause while prefilling", a)
		}
		c := onlyCallout(t, h, id)
		if rid, _ := get(c.Headers, "x-request-id"); rid != "client-id-7" {
			t.Errorf("prefill x-request-id %q", rid)
		}
		h.CallOnHttpCallResponse(c.ID, [][2]string{{":status", "200"}}, nil,
			[]byte(`{"id":"cmpl-1","choices":[{"text":"x"}],"kv_transfer_params":`+kvParams+`}`))
		if a := h.GetCurrentHttpStreamAction(id); a != types.ActionContinue {
			t.Fatalf("not resumed after the prefill answer (action %v)", a)
		}
		got := h.GetCurrentRequestBody(id)
		if p := gjson.GetBytes(got, "kv_transfer_params").Raw; p != kvParams {
			t.Errorf("decode kv_transfer_params %s, want %s", p, kvParams)
		}
		if r, _ := get(h.GetCurrentRequestHeaders(id), "x-pdroute-cluster"); r != route {
			t.Errorf("route header moved from %q to %q after the headers continued", route, r)
		}
		h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
		if p, _ := get(h.GetCurrentResponseHeaders(id), "x-pdroute-path"); p != "disagg" {
			t.Errorf("x-pdroute-path %q", p)
		}
		h.CompleteHttpContext(id)
		if counter(t, h, "pdroute.route_at.headers") != 1 || counter(t, h, "pdroute.route_at.body") != 0 {
			t.Error("route_at counters")
		}
		noErrors(t, h)
	})
}

func TestHeadersWayDirectStripsControlFields(t *testing.T) {
	run(t, withRouteAt(nixlConfig, "headers"), func(t *testing.T, h filtertest.Harness) {
		body := `{"model":"m","prompt":"hello","kv_transfer_params":{"remote_host":"evil"}}`
		id := headersWay(t, h, "/v1/completions", body)
		if a := h.CallOnRequestBody(id, []byte(body), true); a != types.ActionContinue {
			t.Fatalf("body: action %v, want Continue", a)
		}
		if got := string(h.GetCurrentRequestBody(id)); got != `{"model":"m","prompt":"hello"}` {
			t.Errorf("decode body %s: client kv_transfer_params not removed", got)
		}
		if counter(t, h, "pdroute.requests.direct") != 1 || counter(t, h, "pdroute.sanitized_requests") != 1 {
			t.Error("direct/sanitized counters")
		}
		noErrors(t, h)
	})
}

func TestHeadersWayLocalReplies(t *testing.T) {
	cfg := withRouteAt(strings.Replace(nixlConfig, `"threshold_tokens":100,`, `"threshold_tokens":100,"max_body_bytes":2000,"on_prefill_failure":"fail",`, 1), "headers")
	run(t, cfg, func(t *testing.T, h filtertest.Harness) {
		// Malformed JSON: 400 from the body phase, after the headers left.
		id := headersWay(t, h, "/v1/chat/completions", `{"model":`)
		h.CallOnRequestBody(id, []byte(`{"model":`), true)
		if lr := h.GetSentLocalResponse(id); lr == nil || lr.StatusCode != 400 {
			t.Fatalf("malformed JSON: local response %+v", lr)
		}
		// Too large without content-length (chunked): 413 from the body.
		id = h.InitializeHttpContext()
		hs := [][2]string{{":method", "POST"}, {":path", "/v1/completions"}, {":authority", "x"},
			{"content-type", "application/json"}, {"transfer-encoding", "chunked"}}
		if a := h.CallOnRequestHeaders(id, hs, false); a != types.ActionContinue {
			t.Fatalf("chunked headers: action %v", a)
		}
		h.CallOnRequestBody(id, []byte(`{"prompt":"`+strings.Repeat("x", 3000)), false)
		if lr := h.GetSentLocalResponse(id); lr == nil || lr.StatusCode != 413 {
			t.Fatalf("oversize: local response %+v", lr)
		}
		// A prefill 5xx with on_prefill_failure fail: 502; a 4xx: relayed.
		for _, tc := range []struct {
			status string
			want   int
		}{{"500", 502}, {"400", 400}} {
			body := longBody()
			id = headersWay(t, h, "/v1/completions", body)
			h.CallOnRequestBody(id, []byte(body), true)
			c := onlyCallout(t, h, id)
			h.CallOnHttpCallResponse(c.ID, [][2]string{{":status", tc.status}}, nil, []byte(`{"error":{"message":"no"}}`))
			if lr := h.GetSentLocalResponse(id); lr == nil || lr.StatusCode != tc.want {
				t.Fatalf("prefill %s: local response %+v, want %d", tc.status, lr, tc.want)
			}
			h.CompleteHttpContext(id)
		}
		noErrors(t, h)
	})
}

func TestHeadersWayLMCache(t *testing.T) {
	run(t, withRouteAt(lmcacheConfig, "headers"), func(t *testing.T, h filtertest.Harness) {
		// Chat: straight to the decoder (its decode leg would need another path).
		body := `{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":5}`
		id := headersWay(t, h, "/v1/chat/completions", body)
		if a := h.CallOnRequestBody(id, []byte(body), true); a != types.ActionContinue {
			t.Fatalf("chat body: action %v, want Continue (direct)", a)
		}
		if n := len(h.GetCalloutAttributesFromContext(id)); n != 0 {
			t.Errorf("chat on the headers way dispatched %d calls", n)
		}
		if p, _ := get(h.GetCurrentRequestHeaders(id), ":path"); p != "/v1/chat/completions" {
			t.Errorf(":path %q", p)
		}
		// Completions: disaggregated.
		body = `{"model":"m","prompt":[1,2,3],"max_tokens":5}`
		id = headersWay(t, h, "/v1/completions", body)
		if a := h.CallOnRequestBody(id, []byte(body), true); a != types.ActionPause {
			t.Fatalf("completions body: action %v, want Pause", a)
		}
		pre := onlyCallout(t, h, id)
		polls := h.GetCalloutAttributesFromContext(rootID)
		kvID := gjson.GetBytes(pre.Body, "kv_transfer_params.disagg_spec.req_id").String()
		h.CallOnHttpCallResponse(pre.ID, [][2]string{{":status", "200"}}, nil, []byte(`{"kv_transfer_params":{"first_tok":42}}`))
		h.CallOnHttpCallResponse(polls[0].ID, [][2]string{{":status", "200"}}, nil, []byte(`{"ready":[{"req_id":"`+kvID+`","count":2}]}`))
		if a := h.GetCurrentHttpStreamAction(id); a != types.ActionContinue {
			t.Fatalf("not resumed: %v", a)
		}
		if dec := h.GetCurrentRequestBody(id); gjson.GetBytes(dec, "prompt").Raw != "[1,2,3,42]" {
			t.Errorf("decode body %s", dec)
		}
		noErrors(t, h)
	})
}

// pauseForBody sends headers that must pause (the body way).
func pauseForBody(t *testing.T, h filtertest.Harness, body string) uint32 {
	t.Helper()
	id := h.InitializeHttpContext()
	if a := h.CallOnRequestHeaders(id, requestHeaders("/v1/completions", body), false); a != types.ActionPause {
		t.Fatalf("request headers: action %v, want Pause (body way)", a)
	}
	return id
}

// TestAutoLearnsWithheldBody is Envoy without allow_on_headers_stop_iteration:
// the first request waits for a body that does not come, a tick continues it
// the headers way, Envoy then delivers the buffered body at once, and every
// later request takes the headers way from the start.
//
// "At once" is within withheldWindow (20 ms) of the tick that continued the
// request. A loaded machine can stall longer than that between the test's
// two calls; the filter then rightly takes the body for a slow client's and
// learns nothing (TestAutoSlowClient), so the test tries again with the next
// request, as Envoy would bring one.
func TestAutoLearnsWithheldBody(t *testing.T) {
	run(t, nixlConfig, func(t *testing.T, h filtertest.Harness) {
		if p := h.GetTickPeriod(); p != 100 {
			t.Errorf("tick %d ms while the way is unknown, want 100", p)
		}
		body := `{"model":"m","prompt":"hello"}`
		for attempt := 1; ; attempt++ {
			start := time.Now()
			id := pauseForBody(t, h, body)
			h.Tick()
			if a := h.GetCurrentHttpStreamAction(id); a != types.ActionPause && time.Since(start) < probeAfter {
				t.Fatalf("continued before probeAfter (%v)", a)
			}
			time.Sleep(probeAfter + 20*time.Millisecond)
			probed := time.Now()
			h.Tick()
			a := h.GetCurrentHttpStreamAction(id)
			// Envoy delivers the body it held as the headers continue.
			ba := h.CallOnRequestBody(id, []byte(body), true)
			late := time.Since(probed)
			if a != types.ActionContinue {
				t.Fatalf("not continued after probeAfter: %v", a)
			}
			if c, _ := get(h.GetCurrentRequestHeaders(id), "x-pdroute-cluster"); !strings.HasPrefix(c, "decode-") {
				t.Errorf("route header %q", c)
			}
			if ba != types.ActionContinue {
				t.Fatalf("body: %v", ba)
			}
			if late <= withheldWindow {
				break
			}
			if attempt == 5 {
				t.Fatalf("the machine stalled past withheldWindow in %d attempts (last: %v)", attempt, late)
			}
			t.Logf("attempt %d: the body came %v after the tick, past withheldWindow; trying again", attempt, late)
		}
		if counter(t, h, "pdroute.route_at.body_withheld") != 1 {
			t.Error("route_at.body_withheld not counted")
		}
		if logs := strings.Join(h.GetLogs(3), "\n"); !strings.Contains(logs, "allow_on_headers_stop_iteration") {
			t.Errorf("no warning naming the flag: %q", logs)
		}
		if p := h.GetTickPeriod(); p != 1000 {
			t.Errorf("tick %d ms once the way is known, want 1000", p)
		}
		headersWay(t, h, "/v1/completions", body)
		noErrors(t, h)
	})
}

// TestAutoReleasesWaitingOnceWithheld: a request that paused for its body
// before the way was found (here by an earlier request of the same VM; a
// finding of another VM reaches it through shared data the same way) is
// continued the headers way at the next tick, not after bodyWatchdog. The
// tick stays at 100 ms until it is.
func TestAutoReleasesWaitingOnceWithheld(t *testing.T) {
	run(t, nixlConfig, func(t *testing.T, h filtertest.Harness) {
		body := `{"model":"m","prompt":"hello"}`
		var waiting uint32
		for attempt := 1; ; attempt++ {
			first := pauseForBody(t, h, body)
			time.Sleep(probeAfter + 20*time.Millisecond)
			h.Tick()
			probed := time.Now()
			// Still unknown: this one waits for its body too.
			waiting = pauseForBody(t, h, body)
			h.CallOnRequestBody(first, []byte(body), true) // what Envoy had held
			if time.Since(probed) <= withheldWindow {
				break
			}
			// A stall on a loaded machine: nothing learnt (see
			// TestAutoLearnsWithheldBody). The waiting request becomes the
			// next attempt's probe, its body never delivered.
			if attempt == 5 {
				t.Fatalf("the machine stalled past withheldWindow in %d attempts", attempt)
			}
		}
		if counter(t, h, "pdroute.route_at.body_withheld") != 1 {
			t.Fatal("the withheld body was not learnt")
		}
		if a := h.GetCurrentHttpStreamAction(waiting); a != types.ActionPause {
			t.Fatalf("waiting request: action %v before the tick, want Pause", a)
		}
		if p := h.GetTickPeriod(); p != 100 {
			t.Errorf("tick %d ms while a request waits for a withheld body, want 100", p)
		}
		h.Tick()
		if a := h.GetCurrentHttpStreamAction(waiting); a != types.ActionContinue {
			t.Fatalf("waiting request: action %v after the tick, want Continue (the headers way)", a)
		}
		if c, _ := get(h.GetCurrentRequestHeaders(waiting), "x-pdroute-cluster"); !strings.HasPrefix(c, "decode-") {
			t.Errorf("route header %q", c)
		}
		if a := h.CallOnRequestBody(waiting, []byte(body), true); a != types.ActionContinue {
			t.Fatalf("body: %v", a)
		}
		if p := h.GetTickPeriod(); p != 1000 {
			t.Errorf("tick %d ms once nothing waits, want 1000", p)
		}
		noErrors(t, h)
	})
}

// TestAutoSlowClient: a body that comes late (a slow client, not Envoy) is
// served, and teaches nothing.
func TestAutoSlowClient(t *testing.T) {
	run(t, nixlConfig, func(t *testing.T, h filtertest.Harness) {
		body := `{"model":"m","prompt":"hello"}`
		id := pauseForBody(t, h, body)
		time.Sleep(probeAfter + 20*time.Millisecond)
		h.Tick()
		time.Sleep(2 * withheldWindow)
		if a := h.CallOnRequestBody(id, []byte(body), true); a != types.ActionContinue {
			t.Fatalf("late body: %v", a)
		}
		if lr := h.GetSentLocalResponse(id); lr != nil {
			t.Fatalf("slow client answered locally: %+v", lr)
		}
		if counter(t, h, "pdroute.route_at.body_withheld") != 0 {
			t.Error("a slow client was taken for a withheld body")
		}
		pauseForBody(t, h, body) // still unknown: the next request tries the body way
		noErrors(t, h)
	})
}

// TestAutoLearnsBodyWay: a body callback during a header pause proves the
// flag; later requests keep waiting for their bodies past probeAfter.
func TestAutoLearnsBodyWay(t *testing.T) {
	run(t, nixlConfig, func(t *testing.T, h filtertest.Harness) {
		body := `{"model":"m","prompt":"hello"}`
		id := pauseForBody(t, h, body)
		if a := h.CallOnRequestBody(id, []byte(body), true); a != types.ActionContinue {
			t.Fatalf("body: %v", a)
		}
		if p := h.GetTickPeriod(); p != 1000 {
			t.Errorf("tick %d ms once the way is known, want 1000", p)
		}
		id = pauseForBody(t, h, body)
		time.Sleep(probeAfter + 20*time.Millisecond)
		h.Tick()
		if a := h.GetCurrentHttpStreamAction(id); a != types.ActionPause {
			t.Fatalf("a known body way gave up after probeAfter: %v", a)
		}
		if counter(t, h, "pdroute.route_at.body") != 2 || counter(t, h, "pdroute.route_at.headers") != 0 {
			t.Error("route_at counters")
		}
		noErrors(t, h)
	})
}

// TestBodyPinned: route_at "body" trusts the flag: a paused request waits for
// its body past auto's probe (up to bodyWatchdog), and gets it.
func TestBodyPinned(t *testing.T) {
	run(t, withRouteAt(nixlConfig, "body"), func(t *testing.T, h filtertest.Harness) {
		if p := h.GetTickPeriod(); p != 1000 {
			t.Errorf("tick %d ms, want 1000 (nothing to probe)", p)
		}
		body := `{"model":"m","prompt":"hello"}`
		id := pauseForBody(t, h, body)
		time.Sleep(probeAfter + 20*time.Millisecond)
		h.Tick()
		if a := h.GetCurrentHttpStreamAction(id); a != types.ActionPause {
			t.Fatalf("route_at body gave up after probeAfter: %v", a)
		}
		if a := h.CallOnRequestBody(id, []byte(body), true); a != types.ActionContinue {
			t.Fatalf("body: %v", a)
		}
		if c, _ := get(h.GetCurrentRequestHeaders(id), "x-pdroute-cluster"); !strings.HasPrefix(c, "decode-") {
			t.Errorf("route header %q set in the body phase", c)
		}
		noErrors(t, h)
	})
}
