// Package echo is the test plugin of filtertest: small, but it touches each
// kind of host interaction a harness must mirror (header mutation, buffered
// body rewrite, local reply, http call with resume, metrics, logs, tick).
package echo

import (
	"strings"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi"
)

// New returns the plugin's VMContext.
func New() types.VMContext { return &vmContext{} }

type vmContext struct{ types.DefaultVMContext }

func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

type pluginContext struct {
	types.DefaultPluginContext
	requests abi.MetricCounter
}

func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	cfg, err := abi.GetPluginConfiguration()
	if err != nil {
		abi.LogErrorf("echo: read config: %v", err)
		return types.OnPluginStartStatusFailed
	}
	if string(cfg) == "reject" {
		return types.OnPluginStartStatusFailed
	}
	p.requests = abi.DefineCounterMetric("echo_requests")
	abi.LogInfof("echo: configured with %q", cfg)
	if err := abi.SetTickPeriodMilliSeconds(250); err != nil {
		abi.LogErrorf("echo: tick: %v", err)
	}
	return types.OnPluginStartStatusOK
}

func (p *pluginContext) OnTick() { abi.LogInfo("echo: tick") }

func (p *pluginContext) NewHttpContext(uint32) types.HttpContext { return &httpContext{plugin: p} }

type httpContext struct {
	types.DefaultHttpContext
	plugin *pluginContext
}

func (h *httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	h.plugin.requests.Increment(1)
	path, err := abi.GetHttpRequestHeader(":path")
	if err != nil {
		abi.LogErrorf("echo: no path: %v", err)
		return types.ActionContinue
	}
	switch path {
	case "/deny":
		if err := abi.SendHttpResponse(403, [][2]string{{"X-Denied", "yes"}}, []byte("denied"), -1); err != nil {
			abi.LogErrorf("echo: local reply: %v", err)
		}
		return types.ActionPause
	case "/call":
		_, err := abi.DispatchHttpCall("auth", [][2]string{{":method", "GET"}, {":path", "/check"}, {":authority", "auth"}},
			nil, nil, 1000, func(numHeaders, _, _ int) {
				status := "reset"
				if numHeaders > 0 {
					hs, err := abi.GetHttpCallResponseHeaders()
					if err != nil {
						abi.LogErrorf("echo: call response headers: %v", err)
					}
					for _, kv := range hs {
						if kv[0] == ":status" {
							status = kv[1]
						}
					}
				}
				if err := abi.AddHttpRequestHeader("x-auth-status", status); err != nil {
					abi.LogErrorf("echo: add header: %v", err)
				}
				if err := abi.ResumeHttpRequest(); err != nil {
					abi.LogErrorf("echo: resume: %v", err)
				}
			})
		if err != nil {
			abi.LogErrorf("echo: dispatch: %v", err)
			return types.ActionContinue
		}
		return types.ActionPause
	}
	if err := abi.AddHttpRequestHeader("x-seen", "1"); err != nil {
		abi.LogErrorf("echo: add header: %v", err)
	}
	return types.ActionContinue
}

func (h *httpContext) OnHttpRequestBody(size int, eos bool) types.Action {
	if !eos {
		return types.ActionPause
	}
	body, err := abi.GetHttpRequestBody(0, size)
	if err != nil {
		abi.LogErrorf("echo: read body: %v", err)
		return types.ActionContinue
	}
	if err := abi.ReplaceHttpRequestBody([]byte(strings.ToUpper(string(body)))); err != nil {
		abi.LogErrorf("echo: replace body: %v", err)
	}
	return types.ActionContinue
}

func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	if err := abi.AddHttpResponseHeader("x-pdroute", "passthrough"); err != nil {
		abi.LogErrorf("echo: add response header: %v", err)
	}
	return types.ActionContinue
}
