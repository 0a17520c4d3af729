package filtertest_test

import (
	"slices"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/e2e/filtertest"
	"github.com/pdroute/pdroute/e2e/filtertest/testdata/echo"
	"github.com/pdroute/pdroute/filter/abi/abispec"
)

var echoSpec = filtertest.Spec{
	VMContext:    echo.New,
	Package:      "./e2e/filtertest/testdata/echo/wasm",
	PluginConfig: []byte(`{"mode":"echo"}`),
}

func header(hs [][2]string, key string) (string, bool) {
	for _, kv := range hs {
		if kv[0] == key {
			return kv[1], true
		}
	}
	return "", false
}

func start(t *testing.T, h filtertest.Harness) {
	t.Helper()
	if !h.StartVM() || !h.StartPlugin() {
		t.Fatal("plugin did not start")
	}
}

// TestPassthrough: request headers continue with x-seen added, response
// headers get x-pdroute: passthrough, and the counter and start log agree.
func TestPassthrough(t *testing.T) {
	filtertest.Run(t, echoSpec, func(t *testing.T, h filtertest.Harness) {
		start(t, h)
		if got := h.GetLogs(abispec.LogLevelInfo); !slices.Contains(got, `echo: configured with "{\"mode\":\"echo\"}"`) {
			t.Errorf("info logs = %q", got)
		}
		if got := h.GetTickPeriod(); got != 250 {
			t.Errorf("tick period = %d, want 250", got)
		}
		id := h.InitializeHttpContext()
		if a := h.CallOnRequestHeaders(id, [][2]string{{":path", "/x"}, {":method", "GET"}, {":authority", "a"}}, true); a != types.ActionContinue {
			t.Fatalf("request headers action = %v", a)
		}
		if v, _ := header(h.GetCurrentRequestHeaders(id), "x-seen"); v != "1" {
			t.Errorf("x-seen = %q", v)
		}
		if a := h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true); a != types.ActionContinue {
			t.Fatalf("response headers action = %v", a)
		}
		if v, _ := header(h.GetCurrentResponseHeaders(id), "x-pdroute"); v != "passthrough" {
			t.Errorf("x-pdroute = %q (headers %v)", v, h.GetCurrentResponseHeaders(id))
		}
		h.CompleteHttpContext(id)
		if n, err := h.GetCounterMetric("echo_requests"); err != nil || n != 1 {
			t.Errorf("echo_requests = %d, %v", n, err)
		}
		h.Tick()
		if got := h.GetLogs(abispec.LogLevelInfo); got[len(got)-1] != "echo: tick" {
			t.Errorf("last info log = %q", got[len(got)-1])
		}
	})
}

func TestLocalReply(t *testing.T) {
	filtertest.Run(t, echoSpec, func(t *testing.T, h filtertest.Harness) {
		start(t, h)
		id := h.InitializeHttpContext()
		if a := h.CallOnRequestHeaders(id, [][2]string{{":path", "/deny"}, {":method", "GET"}}, true); a != types.ActionPause {
			t.Errorf("action = %v, want Pause", a)
		}
		r := h.GetSentLocalResponse(id)
		if r == nil {
			t.Fatal("no local response")
		}
		if r.StatusCode != 403 || string(r.Body) != "denied" || r.GRPCStatus != -1 {
			t.Errorf("local response = %+v", r)
		}
		if v, _ := header(r.Headers, "x-denied"); v != "yes" {
			t.Errorf("local response headers = %v", r.Headers)
		}
	})
}

func TestHTTPCallResumes(t *testing.T) {
	filtertest.Run(t, echoSpec, func(t *testing.T, h filtertest.Harness) {
		start(t, h)
		id := h.InitializeHttpContext()
		if a := h.CallOnRequestHeaders(id, [][2]string{{":path", "/call"}, {":method", "GET"}}, true); a != types.ActionPause {
			t.Fatalf("action = %v, want Pause", a)
		}
		calls := h.GetCalloutAttributesFromContext(id)
		if len(calls) != 1 || calls[0].Upstream != "auth" {
			t.Fatalf("callouts = %+v", calls)
		}
		if v, _ := header(calls[0].Headers, ":path"); v != "/check" {
			t.Errorf("callout headers = %v", calls[0].Headers)
		}
		h.CallOnHttpCallResponse(calls[0].ID, [][2]string{{":status", "204"}}, nil, nil)
		if v, _ := header(h.GetCurrentRequestHeaders(id), "x-auth-status"); v != "204" {
			t.Errorf("x-auth-status = %q", v)
		}
		if a := h.GetCurrentHttpStreamAction(id); a != types.ActionContinue {
			t.Errorf("stream action after resume = %v", a)
		}
	})
}

func TestBufferedBodyRewrite(t *testing.T) {
	filtertest.Run(t, echoSpec, func(t *testing.T, h filtertest.Harness) {
		start(t, h)
		id := h.InitializeHttpContext()
		h.CallOnRequestHeaders(id, [][2]string{{":path", "/b"}, {":method", "POST"}}, false)
		if a := h.CallOnRequestBody(id, []byte("hello "), false); a != types.ActionPause {
			t.Fatalf("first chunk action = %v", a)
		}
		if a := h.CallOnRequestBody(id, []byte("world"), true); a != types.ActionContinue {
			t.Fatalf("last chunk action = %v", a)
		}
		if got := string(h.GetCurrentRequestBody(id)); got != "HELLO WORLD" {
			t.Errorf("body = %q", got)
		}
	})
}

func TestConfigRejected(t *testing.T) {
	spec := echoSpec
	spec.PluginConfig = []byte("reject")
	filtertest.Run(t, spec, func(t *testing.T, h filtertest.Harness) {
		if !h.StartVM() {
			t.Fatal("vm start failed")
		}
		if h.StartPlugin() {
			t.Error("plugin start succeeded with a rejected config")
		}
	})
}
